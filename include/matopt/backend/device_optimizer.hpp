// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// DeviceOptimizer: any host optimizer (a preset or a composition) stepping matrices in device memory.
// DeviceOptimizer<HostOptimizer, Engine>: a matopt::Optimizer (a preset or a user composition) stepping
// matrices in device memory. The step is Optimizer's (core/optimizer.hpp), stage for stage:
//   U = u_g G + u_v V;  D = Preconditioner(U);  W = Scaling(W, D, G);  V = v_v V + v_g G
// with the policies' own scalar rules (MomentumPolicy::coefficients, the NS schedule and
// precondition/detail/ns_algorithm.hpp), the scalings' own update and the matrix work done by `Engine`: ThrustEngine
// (backend/thrust.hpp) or the CUDA engine (backend/cuda/engine.cuh). Options, defaults and validation are
// the host optimizer's; bad input throws std::invalid_argument before anything is written, as on the host.
//
// Policies on device: momentum Ema / Sum / NoMomentum; Orthogonalize<NewtonSchulz<...>> (plain and Gram, with
// or without Turbo-Muon's AOL start), AutoSteps<NewtonSchulz<...>> (planned on the host from U downloaded on a check
// step), OnEngine<Policy> (a user's policy written against the engine operations), Orthogonalize<ExactPolar>,
// RowNormalize, ColNormalize, Identity, Sign, Adaptive<Cheap, Exact> (of those), NuclearScaled<Inner> (PolarGrad)
// and SecondMoment<Inner, Moment> (NorMuon, AdaMuon, NAMO, one's own) of those; DionPowerIteration (Dion);
// per-head / split row blocks (heads, split_sizes, split_groups). Any other preconditioner is a compile-time error
// (a static_assert names the device policies). Every scaling (Static, TrustRatio, SpectralCap, a user's) runs its own
// update(e, ...) with DevicePolicyEngine's operations, and so does every second moment (NorMuon, AdaMuon, NAMO, a
// user's).
//   SecondMoment: the moments' scalar rules are the host's (second_moment.hpp). NorMuon's S (one entry per row or
//     column) and NAMO's (one scalar) stay in the host State: each step downloads the k squared line norms and
//     uploads k factors (k = m or n). AdaMuon's S (m n entries) lives in device memory (State::moment) and is
//     copied through host memory only by checkpoints (into a copy of the host State).
//   Row blocks: each block is formed, preconditioned and updated as a parameter of its own shape (as
//     Optimizer::apply_blocks); a block of split_groups runs is formed run by run into the workspace.
//   Dion: the host's own step (DionPowerIteration::run, written once over views) with M and Q in device memory
//     (State::moment, as AdaMuon's S) and the products on the engine; the thin Q of P's Householder QR on a host
//     copy of P (max(m, n) r elements each way per step).
//   ExactPolar: the reference SVD runs on the host (the host policy itself, on a host copy of U: m n elements
//     each way per step); neither device engine has an SVD.
//   SpectralCap: u and v live in the host State (its type and checkpoints stay the host's): each step uploads v
//     (n elements) into the workspace and downloads u, v (m + n) after the power iteration.
//   Adaptive: Adaptive::choose (the host's rule, State, counters) with r_min measured on the device: U's
//     Gram formed by the engine (SYRK) and summarized by the host's dominance_of_gram, as
//     diagonal_dominance(engine, view) does (device_diagnostics.hpp); then the chosen device preconditioner.
// Device memory: the momentum buffer per state; one workspace per optimizer, grown by make_state, so step
// allocates nothing on the device (Thrust's reductions may use a temporary buffer; the CUDA engine's do not).
// The policies' states (SpectralCap's, Adaptive's, TrustRatio's) are their host State types, in host memory.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/fill.h>

#include "matopt/backend/device_matrix.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/norms.hpp"
#include "matopt/core/detail/strided.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/core/optimizer.hpp"
#include "matopt/core/step_policy.hpp"
#include "matopt/diagnostics/diagonal_dominance.hpp"
#include "matopt/precondition/adaptive.hpp"
#include "matopt/precondition/auto_steps.hpp"
#include "matopt/precondition/col_normalize.hpp"
#include "matopt/precondition/detail/fused_normalize.hpp"
#include "matopt/precondition/detail/ns_algorithm.hpp"
#include "matopt/precondition/dion.hpp"
#include "matopt/precondition/elementwise.hpp"
#include "matopt/precondition/exact_polar.hpp"
#include "matopt/precondition/newton_schulz.hpp"
#include "matopt/precondition/nuclear_scaled.hpp"
#include "matopt/precondition/on_engine.hpp"
#include "matopt/precondition/orthogonalize.hpp"
#include "matopt/precondition/row_blocks.hpp"
#include "matopt/precondition/row_normalize.hpp"
#include "matopt/precondition/second_moment.hpp"
#include "matopt/scaling/spectral_cap.hpp"
#include "matopt/scaling/static.hpp"
#include "matopt/scaling/trust_ratio.hpp"

namespace matopt {
namespace detail {

template <class T>
Strided<T> strided(DeviceMatrixView<T> v) {
  return strided(v.data, v.rows, v.cols, v.layout);
}
template <class T>
T* raw(thrust::device_vector<T>& v) {
  return thrust::raw_pointer_cast(v.data());
}
/// Grows a device buffer (never shrinks): only make_state calls this.
template <class T>
void grow(thrust::device_vector<T>& v, Index size) {
  if (Index(v.size()) < size) v.resize(std::size_t(size));
}

/// The device workspace of one optimizer (sized by the largest parameter it has made state for).
template <class T>
struct DeviceWorkspace {
  thrust::device_vector<T> u, x, y, a, b, q, t, scale, clean;
  thrust::device_vector<T> u2;       ///< NuclearScaled, moments reading ||U||: U formed again
  thrust::device_vector<T> gram;     ///< Adaptive: the k x k Gram of U
  thrust::device_vector<T> vectors;  ///< SpectralCap: u (m elements), then v (n)
  thrust::device_vector<T> block_w, block_g;  ///< a split_groups row block gathered for a scaling's own update
  DiagonalDominanceWorkspace<T> dominance;  ///< Adaptive: host memory for the Gram's statistics (not in bytes())
  Buffer<T> host_u;                          ///< ExactPolar: U in host memory (not in bytes())
  ExactPolar::Workspace<T> polar;            ///< ExactPolar: the host SVD's buffers (not in bytes())
  Buffer<T> host_lines;                      ///< moments' and Dion's line factors (not in bytes())
  Buffer<T> host_norms;                      ///< row blocks of split_groups runs: the runs' norms (not in bytes())
  /// Device bytes.
  std::size_t bytes() const {
    return (u.size() + x.size() + y.size() + a.size() + b.size() + q.size() + t.size() + scale.size() +
            clean.size() + u2.size() + gram.size() + vectors.size() + block_w.size() + block_g.size()) *
           sizeof(T);
  }
};

/// Diagonal dominance (docs/math.md) of P = X X^T for a column-major k x l X in device memory: P formed by the
/// engine (gram_lower: SYRK in T's own precision, whatever the engine's product precision) in the k x k
/// device scratch p, copied into host_ws and summarized by the host's own
/// dominance_of_gram. The one implementation behind diagonal_dominance(engine, view) (device_diagnostics.hpp)
/// and Adaptive on device; allocates nothing once host_ws is reserved for (k, l).
template <class Engine, class T>
DiagonalDominance gram_dominance(Engine& e, Strided<T> x, T* p, DiagonalDominanceWorkspace<T>& host_ws,
                                 GramSide side) {
  const Index k = x.rows;
  host_ws.template reserve<T>(k, x.cols);
  auto ph = host_ws.gram.matrix(k, k);
  if (k >= 2) {
    Strided<T> pc = col_major(p, k, k);
    e.gram_lower(x, pc);
    e.download(static_cast<const T*>(p), k * k, ph.data());
  }
  return dominance_of_gram<T>(ph, host_ws.rows, side);
}

/// Refuses ns_dtype = bfloat16 wherever a device optimizer's options hold one (the preconditioner's, or one it
/// wraps), before the host optimizer's checks, whose bfloat16 rule is the host engine's (oneDNN).
struct DeviceDtypeCheck {
  const char* where;
  template <class F, class C>
  void operator()(std::string_view, const F& field, const C&, const char*) const {
    if constexpr (std::is_same_v<F, NsDtype>) check_ns_dtype(field, where);
  }
  template <class R>
  void rule(R&&) const {}
};

template <class P>
inline constexpr bool host_only_policy_v = false;

/// How each preconditioner runs on a device engine: reserve(ws, options, m, n) and
/// apply(engine, ws, options, m, n, layout, form_u) -> D, where form_u(target) writes U into the m x n
/// target and D is a view of the workspace.
template <class P>
struct DevicePreconditioner {
  static_assert(host_only_policy_v<P>,
                "matopt::DeviceOptimizer: this preconditioner has no device implementation (device policies: "
                "Orthogonalize<NewtonSchulz<...>>, AutoSteps<NewtonSchulz<...>>, Orthogonalize<ExactPolar>, "
                "RowNormalize, ColNormalize, Identity, Sign, Adaptive<Cheap, Exact>, NuclearScaled<Inner>, "
                "SecondMoment<Inner, Moment> of those (any moment), DionPowerIteration; a policy of one's own "
                "runs on every engine as OnEngine<Policy>)");
};

template <class Schedule, NsVariant V>
struct DevicePreconditioner<Orthogonalize<NewtonSchulz<Schedule, V>>> {
  using Method = NewtonSchulz<Schedule, V>;
  using Options = typename Method::Options;
  template <class T>
  static void reserve(DeviceWorkspace<T>& ws, const Options& o, Index m, Index n) {
    const Index r = m < n ? m : n, s = m < n ? n : m;  // Orthogonalize: r x s with r <= s
    grow(ws.x, r * s);
    grow(ws.y, r * s);
    grow(ws.a, r * r);
    grow(ws.b, r * r);
    if (Method::uses_gram(o, r, s)) {
      grow(ws.q, r * r);
      grow(ws.t, r * r);
    }
  }
  template <class T, class Engine, class FormU>
  static Strided<T> apply(Engine& e, DeviceWorkspace<T>& ws, const Options& o, Index m, Index n, Layout,
                          FormU&& form_u) {
    const bool tall = m > n;  // X = U (m <= n) or U^T, formed column-major r x s
    const Index r = tall ? n : m, s = tall ? m : n;
    Strided<T> x = col_major(raw(ws.x), r, s), y = col_major(raw(ws.y), r, s);
    form_u(tall ? x.t() : x);
    const bool gram = Method::uses_gram(o, r, s) && r > 0 && s > 0;
    Strided<T> a = col_major(raw(ws.a), r, r), b = col_major(raw(ws.b), r, r);
    Strided<T> q = col_major(gram ? raw(ws.q) : nullptr, gram ? r : 0, gram ? r : 0), t = q;
    if (gram) t = col_major(raw(ws.t), r, r);
    const Strided<T> d = NsMatrices<Strided<T>>{&x, &y, &a, &b, &q, &t}.run(e, o, gram);
    return tall ? d.t() : d;
  }
};

/// U in the workspace, in W's storage order (the element-wise and normalizing preconditioners).
template <class T, class FormU>
Strided<T> form_in_workspace(DeviceWorkspace<T>& ws, Index m, Index n, Layout layout, FormU&& form_u) {
  const Strided<T> u = strided(raw(ws.u), m, n, layout);
  form_u(u);
  return u;
}

/// AutoSteps<NewtonSchulz<...>>: AutoSteps's own plan (plans_now, plan, advance; the host's State) from U downloaded
/// on a check step (m n elements every plan_every steps, planned on the host), then the device Newton–Schulz with
/// the planned step count, which forms U again.
template <class Schedule, NsVariant V>
struct DevicePreconditioner<AutoSteps<NewtonSchulz<Schedule, V>>> {
  using P = AutoSteps<NewtonSchulz<Schedule, V>>;
  using Ns = DevicePreconditioner<Orthogonalize<NewtonSchulz<Schedule, V>>>;
  using Options = typename P::Options;
  template <class T>
  static void reserve(DeviceWorkspace<T>& ws, const Options& o, Index m, Index n) {
    Ns::template reserve<T>(ws, o, m, n);
    grow(ws.u, m * n);
    ws.host_u.reserve(m * n);
  }
  template <class T, class Engine, class FormU>
  static Strided<T> apply(Engine& e, DeviceWorkspace<T>& ws, const Options& o, typename P::template State<T>& s,
                          Index m, Index n, Layout layout, FormU&& form_u) {
    if (P::plans_now(o, s)) {
      const Strided<T> u = form_in_workspace(ws, m, n, layout, form_u);
      e.download(static_cast<const T*>(u.data), m * n, ws.host_u.data());
      if (layout == Layout::RowMajor)
        P::plan(ws.host_u.template matrix<Eigen::RowMajor>(m, n), o, s);
      else
        P::plan(ws.host_u.template matrix<Eigen::ColMajor>(m, n), o, s);
    }
    // The options with the planned step count: assigned in place, so that a step allocates nothing once warm.
    thread_local typename Ns::Options run;
    run = o;
    run.schedule.steps = P::advance(s);
    return Ns::apply(e, ws, run, m, n, layout, form_u);
  }
};

/// RowNormalize and ColNormalize: D = U / max(||U_i||, eps) per row, or per column as the rows of U^T.
template <bool Columns>
struct DevicePreconditioner<NormalizeLines<Columns>> {
  using Options = detail::NormalizeOptions;
  template <class T>
  static void reserve(DeviceWorkspace<T>& ws, const Options&, Index m, Index n) {
    grow(ws.u, m * n);
    grow(ws.scale, Columns ? n : m);
  }
  template <class T, class Engine, class FormU>
  static Strided<T> apply(Engine& e, DeviceWorkspace<T>& ws, const Options& o, Index m, Index n, Layout layout,
                          FormU&& form_u) {
    const Strided<T> u = form_in_workspace(ws, m, n, layout, form_u);
    const Strided<T> lines = Columns ? u.t() : u;
    e.inverse_row_norms(Strided<const T>(lines), T(o.eps), raw(ws.scale));  // 1 / max(||line||, eps)
    e.scale_rows(lines, static_cast<const T*>(raw(ws.scale)));
    return u;
  }
};

/// A preconditioner that transforms U in place, formed in the workspace in W's storage order: Run::run(e, u, o, m, n)
/// (OnEngine<Policy>: the policy's own run, written once for every engine; Identity; Sign).
template <class O, class Run>
struct InPlace {
  using Options = O;
  template <class T>
  static void reserve(DeviceWorkspace<T>& ws, const Options&, Index m, Index n) {
    grow(ws.u, m * n);
  }
  template <class T, class Engine, class FormU>
  static Strided<T> apply(Engine& e, DeviceWorkspace<T>& ws, const Options& o, Index m, Index n, Layout layout,
                          FormU&& form_u) {
    Strided<T> u = form_in_workspace(ws, m, n, layout, form_u);
    Run::run(e, u, o, m, n);
    return u;
  }
};
/// D = U.
struct IdentityRun {
  template <class Engine, class M, class O>
  static void run(Engine&, M&, const O&, Index, Index) {}
};
/// D = sign(U).
struct SignRun {
  template <class Engine, class M, class O>
  static void run(Engine& e, M& u, const O&, Index, Index) {
    e.sign(u);
  }
};
template <class Policy>
struct DevicePreconditioner<OnEngine<Policy>> : InPlace<typename Policy::Options, Policy> {};
template <>
struct DevicePreconditioner<Identity> : InPlace<Identity::Options, IdentityRun> {};
template <>
struct DevicePreconditioner<Sign> : InPlace<Sign::Options, SignRun> {};

/// Orthogonalize<ExactPolar>: the host's own SVD on a host copy of U. U is formed on the device in W's order,
/// downloaded (m n elements), orthogonalized by the host Orthogonalize<ExactPolar> (BDCSVD; it allocates, as on
/// the host) and D uploaded over U. A reference policy: the SVD, O(mn min(m, n)) on the host, dominates the
/// two copies.
template <>
struct DevicePreconditioner<Orthogonalize<ExactPolar>> {
  using P = Orthogonalize<ExactPolar>;
  using Options = P::Options;
  template <class T>
  static void reserve(DeviceWorkspace<T>& ws, const Options& o, Index m, Index n) {
    grow(ws.u, m * n);
    ws.host_u.reserve(m * n);
    P::reserve(ws.polar, o, m, n);
  }
  template <class T, class Engine, class FormU>
  static Strided<T> apply(Engine& e, DeviceWorkspace<T>& ws, const Options& o, Index m, Index n, Layout layout,
                          FormU&& form_u) {
    const Strided<T> u = form_in_workspace(ws, m, n, layout, form_u);
    e.download(static_cast<const T*>(u.data), m * n, ws.host_u.data());
    const auto upload = [&](const auto& d) { e.upload(d.data(), m * n, u.data); };  // D in U's order
    if (layout == Layout::RowMajor)
      P::apply<T>(ws.host_u.template matrix<Eigen::RowMajor>(m, n), o, ws.polar, upload);
    else
      P::apply<T>(ws.host_u.template matrix<Eigen::ColMajor>(m, n), o, ws.polar, upload);
    return u;
  }
};

/// Adaptive<Cheap, Exact>: Adaptive::choose (the host's rule and State) with r_min of U's Gram measured on the
/// device (gram_dominance: U formed into ws.u, free until the chosen policy runs, as X = U or, for a column
/// Gram, X = U^T), then the chosen device preconditioner, which forms U again from G and the momentum.
template <class Cheap, class Exact>
struct DevicePreconditioner<Adaptive<Cheap, Exact>> {
  using P = Adaptive<Cheap, Exact>;
  using Options = typename P::Options;
  template <class T>
  static void reserve(DeviceWorkspace<T>& ws, const Options& o, Index m, Index n) {
    DevicePreconditioner<Cheap>::reserve(ws, o.cheap, m, n);
    DevicePreconditioner<Exact>::reserve(ws, o.exact, m, n);
    const Index k = P::column_gram ? n : m;
    grow(ws.u, m * n);
    grow(ws.gram, k * k);
    ws.dominance.template reserve<T>(k, P::column_gram ? m : n);
  }
  template <class T, class Engine, class FormU>
  static Strided<T> apply(Engine& e, DeviceWorkspace<T>& ws, const Options& o, typename P::template State<T>& s,
                          Index m, Index n, Layout layout, FormU&& form_u) {
    const bool exact = P::choose(s, o, [&] {
      const Index k = P::column_gram ? n : m, l = P::column_gram ? m : n;
      const Strided<T> x = col_major(raw(ws.u), k, l);  // P = X X^T
      if (k >= 2) form_u(P::column_gram ? x.t() : x);
      return gram_dominance(e, x, raw(ws.gram), ws.dominance, GramSide::Rows);
    });
    if (exact) return DevicePreconditioner<Exact>::apply(e, ws, o.exact, m, n, layout, form_u);
    return DevicePreconditioner<Cheap>::apply(e, ws, o.cheap, m, n, layout, form_u);
  }
};

/// A power iteration's vectors in device memory (SpectralCap's power_iteration interface): u (w.rows elements) and v
/// (w.cols) in the workspace, v uploaded from the host State's and both stored back into it after the iteration.
template <class T, class Engine>
struct DeviceSingularVectors {
  Engine& e;
  Strided<const T> w;
  T* u;
  T* v;
  T forward() {  // u <- W v
    e.gemv(T(1), w, static_cast<const T*>(v), T(0), u);
    return e.norm(col_major(static_cast<const T*>(u), w.rows, 1));
  }
  void normalize_u(T norm) { e.scale(col_major(u, w.rows, 1), T(1) / norm); }
  T backward() {  // v <- W^T u
    e.gemv(T(1), w.t(), static_cast<const T*>(u), T(0), v);
    return e.norm(col_major(static_cast<const T*>(v), w.cols, 1));
  }
  void normalize_v(T norm) { e.scale(col_major(v, w.cols, 1), T(1) / norm); }
  /// Downloads u and v into the host vectors (m + n elements).
  template <class V>
  void store(V& host_u, V& host_v) const {
    e.download(static_cast<const T*>(u), w.rows, host_u.data());
    e.download(static_cast<const T*>(v), w.cols, host_v.data());
  }
  /// u^T D v.
  T bilinear(Strided<T> d) const {
    return e.bilinear(static_cast<const T*>(u), Strided<const T>(d), static_cast<const T*>(v));
  }
  /// D <- D - c u v^T, in place.
  Strided<T> minus_rank1(Strided<T> d, T c) const {
    e.rank1(d, -c, static_cast<const T*>(u), static_cast<const T*>(v));
    return d;
  }
};

/// Scalings that declare `tracks_singular_vectors = true` (SpectralCap) get m + n elements of device scratch.
template <class S, class = void>
inline constexpr bool tracks_singular_vectors_v = false;
template <class S>
inline constexpr bool tracks_singular_vectors_v<S, std::void_t<decltype(S::tracks_singular_vectors)>> =
    S::tracks_singular_vectors;

/// The policies' operations on a device engine (the host's are HostEngine's, core/detail/engine.hpp): a scaling S's
/// own update(e, w, d, g, ...) and a second moment's apply(e, d, ...), with W, D and G in device memory, D a
/// workspace view that `combined`, `minus_rank1` and the moments' operations overwrite, and scratch in the workspace.
template <class T, class Engine, class S = void>  // S: the scaling or the moment, for its checks
struct DevicePolicyEngine {
  Engine& e;
  DeviceWorkspace<T>& ws;
  Layout layout;  ///< W's storage order (AdaMuon's S)
  template <class U>
  static Index rows(const Strided<U>& x) { return x.rows; }
  template <class U>
  static Index cols(const Strided<U>& x) { return x.cols; }
  template <class U>
  T norm(Strided<U> x) { return e.norm(Strided<const T>(x)); }
  /// W <- keep W - step D.
  void update(Strided<T> w, T keep, T step, Strided<const T> d) { e.update(w, keep, step, d); }
  /// W <- keep W - step D where D . W >= 0, W - step D elsewhere.
  void cautious_update(Strided<T> w, T keep, T step, Strided<const T> d) { e.cautious_update(w, keep, step, d); }
  /// a W + b D, written over D.
  Strided<T> combined(T a, Strided<const T> w, T b, Strided<T> d) {
    e.combine(d, a, w, b, Strided<const T>(d));
    return d;
  }
  /// out = a x + b y; out = x; C = alpha A B + beta C (the engine's, for policies written once over views).
  void combine(Strided<T> out, T a, Strided<const T> x, T b, Strided<const T> y) { e.combine(out, a, x, b, y); }
  void copy(Strided<const T> x, Strided<T> out) { e.copy(x, out); }
  void gemm(T alpha, Strided<T> a, Strided<T> b, T beta, Strided<T> c) { e.gemm(alpha, a, b, beta, c); }
  /// f(X) on a host copy of the column-major x (in the workspace's host buffer), then X copied back into x.
  template <class F>
  void on_host(Strided<T> x, F&& f) {
    MATOPT_ASSERT(x.rs == 1 && (x.cs == x.rows || x.cols <= 1));
    e.download(static_cast<const T*>(x.data), x.size(), ws.host_u.data());
    f(ws.host_u.matrix(x.rows, x.cols));
    e.upload(static_cast<const T*>(ws.host_u.data()), x.size(), x.data);
  }
  /// The vectors of a power iteration on W in the workspace, v uploaded from the host's.
  template <class V>
  DeviceSingularVectors<T, Engine> singular_vectors(Strided<T> w, const V&, const V& host_v) {
    static_assert(tracks_singular_vectors_v<S>,
                  "matopt::DeviceOptimizer: a scaling that calls e.singular_vectors declares `static constexpr bool "
                  "tracks_singular_vectors = true;` (their m + n elements of device scratch; a scaling wrapping "
                  "SpectralCap too)");
    T* u = raw(ws.vectors);
    e.upload(host_v.data(), w.cols, u + w.rows);
    return {e, Strided<const T>(w), u, u + w.rows};
  }

  // The second moments' operations (moments::*::apply, precondition/second_moment.hpp): D changed in place, then
  // passed to sink; f points at host memory (k line statistics go through ws.scale each way).
  /// The squared norms of D's rows (rows) or columns, downloaded into f.
  void line_squared_norms(Strided<T> d, bool rows, T* f) {
    const Strided<T> lines = rows ? d : d.t();
    e.row_squared_norms(Strided<const T>(lines), raw(ws.scale));
    e.download(static_cast<const T*>(raw(ws.scale)), lines.rows, f);
  }
  /// Row i (rows) or column i of D times f[i], f uploaded; then sink(D).
  template <class Sink>
  void scale_lines(Strided<T> d, bool rows, const T* f, Sink&& sink) {
    const Strided<T> lines = rows ? d : d.t();
    e.upload(f, lines.rows, raw(ws.scale));
    e.scale_rows(lines, static_cast<const T*>(raw(ws.scale)));
    sink(d);
  }
  /// S <- b S + (1 - b) D.D (S at s in device memory, in W's storage order), D <- D / (sqrt(S) + eps); then sink(D).
  template <class Sink>
  void moment_normalized(Strided<T> d, T* s, T b, T eps, Sink&& sink) {
    static_assert(moment_engine_state_v<S>,
                  "matopt::DeviceOptimizer: a moment that calls e.moment_normalized declares `static constexpr bool "
                  "engine_state = true;` (its S then lives in device memory)");
    e.moment_normalize(d, strided(s, d.rows, d.cols, layout), b, eps);
    sink(d);
  }
  /// tr(D^T U) = sum(U . D) for U laid out as D.
  T dot(Strided<const T> u, Strided<const T> d) {
    MATOPT_ASSERT(u.rows == d.rows && u.cols == d.cols && u.rs == d.rs && u.cs == d.cs);
    return e.dot(u.data, d.data, d.size());
  }
  /// D <- c D; then sink(D).
  template <class Sink>
  void scaled(Strided<T> d, T c, Sink&& sink) {
    e.scale(d, c);
    sink(d);
  }
};

/// SecondMoment<Inner, Moment> (second_moment.hpp): D = Inner(U) (Inner(sign U) for AdaMuon), then the moment's own
/// apply with DevicePolicyEngine's operations. S lies at `s`: in device memory where the moment declares
/// engine_state (AdaMuon), else in the host State (NorMuon's k line statistics go down and k factors up each step).
template <class Inner, class Moment>
struct DevicePreconditioner<SecondMoment<Inner, Moment>> {
  using P = SecondMoment<Inner, Moment>;
  using Options = typename P::Options;
  static constexpr bool device_state = moment_engine_state_v<Moment>;
  /// The host State's fields that live in device memory (AdaMuon's S), see DevicePreconditioner<DionPowerIteration>.
  template <class T, class F>
  static void device_fields(typename P::template State<T>& s, F&& f) {
    f(s.second_moment);
  }
  /// S, of `size` entries in device memory, must be the size these options give.
  template <class T>
  static void check_state(const typename P::template State<T>&, Index size, const Options& o, Index m, Index n,
                          std::string_view where) {
    P::check_state_size(size, o, m, n, where);
  }
  template <class T>
  static void reserve(DeviceWorkspace<T>& ws, const Options& o, Index m, Index n) {
    DevicePreconditioner<Inner>::reserve(ws, o, m, n);
    grow(ws.scale, Moment::workspace_size(m, n));
    ws.host_lines.reserve(Moment::workspace_size(m, n));
    if constexpr (Moment::reads_input_norm) grow(ws.u2, m * n);
  }
  template <class T, class Engine, class GNorm, class FormU>
  static Strided<T> apply(Engine& e, DeviceWorkspace<T>& ws, const Options& o, T* s, GNorm&& g_norm, Index m,
                          Index n, Layout layout, FormU&& form_u) {
    const auto inner_u = [&](Strided<T> target) {
      form_u(target);
      if constexpr (Moment::sign_input) e.sign(target);
    };
    const typename Inner::Options& inner = o;
    const Strided<T> d = DevicePreconditioner<Inner>::apply(e, ws, inner, m, n, layout, inner_u);
    finish(e, ws, o, d, s, g_norm, layout, form_u);
    return d;
  }
  static constexpr bool sign_input = Moment::sign_input;
  /// D' = Moment(D) in place, for a D the inner preconditioner made (here, or batched over row blocks); ||U||_F, where
  /// the moment reads it, of U formed again into ws.u2.
  template <class T, class Engine, class GNorm, class FormU>
  static void finish(Engine& e, DeviceWorkspace<T>& ws, const Options& o, Strided<T> d, T* s, GNorm&& g_norm,
                     Layout layout, FormU&& form_u) {
    check_moment<Moment, T>();
    DevicePolicyEngine<T, Engine, Moment> pe{e, ws, layout};
    const auto u_norm = input_norm<Moment, T>([&] {
      const Strided<T> u = laid_out_as(raw(ws.u2), d);
      form_u(u);
      return e.norm(Strided<const T>(u));
    });
    Moment::template apply<T>(pe, d, o.moment, s, ws.host_lines.data(), g_norm, u_norm, [](const Strided<T>&) {});
  }
};

/// NuclearScaled<Inner> (PolarGrad, nuclear_scaled.hpp): D = Inner(U), then the policy's own scale_by_trace with
/// DevicePolicyEngine's operations. U is formed again into ws.u2, laid out as D (which Inner returns dense), so
/// tr(D^T U) is a plain dot product of m n elements.
template <class Inner>
struct DevicePreconditioner<NuclearScaled<Inner>> {
  using Options = typename NuclearScaled<Inner>::Options;
  template <class T>
  static void reserve(DeviceWorkspace<T>& ws, const Options& o, Index m, Index n) {
    DevicePreconditioner<Inner>::reserve(ws, o, m, n);
    grow(ws.u2, m * n);
  }
  template <class T, class Engine, class FormU>
  static Strided<T> apply(Engine& e, DeviceWorkspace<T>& ws, const Options& o, Index m, Index n, Layout layout,
                          FormU&& form_u) {
    const Strided<T> d = DevicePreconditioner<Inner>::apply(e, ws, o, m, n, layout, form_u);
    const Strided<T> u = laid_out_as(raw(ws.u2), d);
    form_u(u);
    DevicePolicyEngine<T, Engine> pe{e, ws, layout};
    NuclearScaled<Inner>::scale_by_trace(pe, Strided<const T>(u), d, [](const Strided<T>&) {});
    return d;
  }
};

/// DionPowerIteration (dion.hpp): its run() with M and Q in device memory and the products on the engine; the thin Q
/// factor of P's Householder QR on a host copy of P (on_host: max(m, n) r elements each way per step; neither device
/// engine has a QR). The products run in the engine's precision.
template <>
struct DevicePreconditioner<DionPowerIteration> {
  using P = DionPowerIteration;
  using Options = P::Options;
  /// The host State's M and Q live in device memory (State::moment: M in W's storage order, then Q, min(m, n) x r
  /// column-major); the host State keeps the rank. A checkpoint fills M and Q in a copy of the host State.
  static constexpr bool device_state = true;
  template <class T, class F>
  static void device_fields(P::State<T>& s, F&& f) {
    f(s.momentum);
    f(s.q);
  }
  /// The rank of make_state must be the one these options give (the host's check).
  template <class T>
  static void check_state(const P::State<T>& s, Index, const Options& o, Index m, Index n, std::string_view where) {
    P::check_state(s, o, m, n, where);
  }
  template <class T>
  static void reserve(DeviceWorkspace<T>& ws, const Options& o, Index m, Index n) {
    const Index r = P::rank(o, m, n), rows = std::max(m, n), cols = std::min(m, n);
    grow(ws.u, m * n);
    grow(ws.a, rows * r);
    grow(ws.b, cols * r);
    grow(ws.scale, r);
    ws.host_u.reserve(rows * r);
    ws.host_lines.reserve(r);
  }
  /// D (in ws.u, W's storage order) for U = G, with M and Q at `device` (updated in place): dion.hpp's run().
  template <class T, class Engine, class FormU>
  static Strided<T> apply(Engine& e, DeviceWorkspace<T>& ws, const Options& o, const P::State<T>& s, T* device,
                          Index m, Index n, Layout layout, FormU&& form_u) {
    const Index r = Index(s.rank), rows = std::max(m, n), cols = std::min(m, n);
    const Strided<T> d = form_in_workspace(ws, m, n, layout, form_u);  // U = G, then D in its place
    DevicePolicyEngine<T, Engine> pe{e, ws, layout};
    P::run(pe, strided(device, m, n, layout), col_major(device + m * n, cols, r), col_major(raw(ws.a), rows, r),
           col_major(raw(ws.b), cols, r), d, o, ws.host_lines.data());
    return d;
  }
};

/// The Newton-Schulz method of a preconditioner that is one (Orthogonalize<NewtonSchulz<...>>, or SecondMoment
/// of it); void otherwise.
template <class P>
struct ns_method {
  using type = void;
};
template <class Schedule, NsVariant V>
struct ns_method<Orthogonalize<NewtonSchulz<Schedule, V>>> {
  using type = NewtonSchulz<Schedule, V>;
};
template <class Inner, class Moment>
struct ns_method<SecondMoment<Inner, Moment>> : ns_method<Inner> {};
template <class P>
using ns_method_t = typename ns_method<P>::type;

template <class P, class = void>
inline constexpr bool device_state_v = false;
template <class P>
inline constexpr bool device_state_v<P, std::void_t<decltype(DevicePreconditioner<P>::device_state)>> =
    DevicePreconditioner<P>::device_state;

}  // namespace detail

/// One parameter's report from a device step: StepReport's fields, with U in device memory.
template <class T>
struct DeviceStepReport {
  const T* param = nullptr;  ///< W's device data: identifies the parameter
  /// W's shape.
  /// @{
  Index rows = 0, cols = 0;
  /// @}
  std::int64_t step = 0;  ///< the parameter's step count, this step included
  /// U = u_g G + u_v V in W's layout, in device memory: what diagonal_dominance(engine, view) and
  /// singular_value_quantiles(engine, view) (device_diagnostics.hpp) examine. Valid during the callback only.
  DeviceMatrixView<const T> direction{};
  double update_rms = 0;    ///< ||W_after - W_before||_F / sqrt(mn)
  double effective_lr = 0;  ///< as effective_lr(state) after this step
};

/// A matopt::Optimizer (a preset or a user composition) stepping matrices in device memory: the host optimizer's
/// step, stage for stage, with its options, defaults, validation and scalar rules, and the matrix work done by
/// `Engine` (ThrustEngine, or cuda::Engine: cuda::Optimizer). Bad input throws std::invalid_argument before anything
/// is written, as on the host. Supported policies: momentum Ema, Sum, NoMomentum; Orthogonalize (NewtonSchulz,
/// ExactPolar on the host), RowNormalize, ColNormalize, Identity, Sign, Adaptive, NuclearScaled and SecondMoment of
/// those, DionPowerIteration, row blocks (others fail to compile); every scaling, through its own update with the
/// device engine's operations. Checkpoints are interchangeable with the host optimizer's.
/// @tparam HostOptimizer an Optimizer (e.g. Muon<float>).
/// @tparam Engine ThrustEngine or cuda::Engine.
template <class HostOptimizer, class Engine>
class DeviceOptimizer {
 public:
  /// The host optimizer type.
  using Host = HostOptimizer;
  /// The scalar type.
  using Scalar = typename Host::Scalar;
  /// The scalar type.
  using T = Scalar;
  /// The host optimizer's options.
  using Options = typename Host::Options;
  /// The preconditioner policy.
  using PreconditionerType = typename Host::PreconditionerType;
  /// The momentum policy.
  using MomentumType = typename Host::MomentumType;
  /// The scaling policy.
  using ScalingType = typename Host::ScalingType;
  /// The engine type.
  using EngineType = Engine;

  /// Per-parameter state: the momentum buffer (device memory, in W's storage order) and the policies' states
  /// (the host optimizer's State types, in host memory).
  struct State : StateCounters {
    /// The momentum buffer V in device memory, in W's storage order (empty without a buffer).
    thrust::device_vector<T> momentum;
    /// The preconditioner's state where it lives in device memory, its fields one after another (AdaMuon's S in
    /// W's storage order; Dion's M in W's storage order, then Q); else empty. Those host fields are empty.
    thrust::device_vector<T> moment;
    /// The sizes of those fields, set by make_state.
    std::vector<Index> moment_sizes;
    /// The preconditioner's state (the host type, in host memory).
    detail::policy_state_t<PreconditionerType, T> precondition{};
    /// The scaling policy's state (the host type, in host memory).
    typename ScalingType::template State<T> scaling{};
    /// Device bytes (the momentum buffer and a device-resident preconditioner state).
    std::size_t bytes() const { return (momentum.size() + moment.size()) * sizeof(T); }

    /// Checkpoints (serialization/checkpoint.hpp): the host State's fields, in its order and format, with the
    /// momentum copied through host memory. So a file saved from the device loads into the host optimizer for
    /// a W of the same shape and layout, and the other way round.
    template <class Writer>
    void write(Writer& w) const {
      Eigen::Matrix<T, Eigen::Dynamic, 1> m(Index(momentum.size()));
      detail::device_synchronize();  // after the steps queued on the engine's stream
      detail::copy_n(momentum.begin(), momentum.size(), m.data());
      auto pre = host_precondition();
      detail::optimizer_state_fields(const_cast<State&>(*this), m, pre,
                                     [&](const char* name, auto& v) { w.field(name, v); });
    }
    /// Restores in place (the checkpoint loader reads into a copy, so a failure leaves the live state alone).
    template <class Reader>
    void read(Reader& r) {
      Eigen::Matrix<T, Eigen::Dynamic, 1> m(Index(momentum.size()));
      auto pre = precondition;
      each_device_field(pre, [](auto&, Index) {});  // sized for the reader's checks
      detail::optimizer_state_fields(*this, m, pre, [&](const char* name, auto& v) { r.field(name, v); });
      detail::device_synchronize();  // no step queued on the engine's stream still reads the old momentum
      detail::copy_n(m.data(), m.size(), momentum.begin());
      each_device_field(pre, [&](auto& host, Index at) {
        detail::copy_n(host.data(), host.size(), moment.begin() + at);
        host.resize(0);
      });
      precondition = std::move(pre);
    }
    /// The preconditioner's state as the host optimizer's State holds it: a copy of `precondition` with the
    /// device-resident fields copied in (after the steps queued on the engine's stream).
    detail::policy_state_t<PreconditionerType, T> host_precondition() const {
      auto pre = precondition;
      detail::device_synchronize();
      each_device_field(pre, [&](auto& host, Index at) {
        detail::copy_n(moment.begin() + at, host.size(), host.data());
      });
      return pre;
    }
    /// f(host field, offset in moment) for each device-resident field of pre, the field sized as in moment.
    template <class F>
    void each_device_field(detail::policy_state_t<PreconditionerType, T>& pre, F&& f) const {
      if constexpr (device_state) {
        Index at = 0;
        std::size_t k = 0;
        Precondition::template device_fields<T>(pre, [&](auto& host) {
          const Index size = k < moment_sizes.size() ? moment_sizes[k] : 0;  // none in a State not from make_state
          ++k;
          host.resize(size);
          f(host, at);
          at += size;
        });
      }
    }
  };

  /// An optimizer with the default options and a default-constructed engine.
  DeviceOptimizer() : DeviceOptimizer(Options{}) {}
  /// An optimizer with these options and engine; throws std::invalid_argument naming the first bad option.
  explicit DeviceOptimizer(const Options& options, Engine engine = Engine{})
      : options_(options), engine_(std::move(engine)) {
    validate(name());
  }

  /// The host optimizer's name, such as "matopt::Muon".
  static constexpr const char* name() { return Host::name(); }
  /// The host optimizer's identity: checkpoints move between the host and device optimizers.
  static std::string identity() { return Host::identity(); }
  /// The options; mutable between steps, checked at each step.
  Options& options() { return options_; }
  /// The options (read-only).
  const Options& options() const { return options_; }
  /// The engine, through which a CUDA engine's stream is reached.
  Engine& engine() { return engine_; }

  /// The state for parameter w; grows the shared device workspace to fit w's shape.
  State make_state(DeviceMatrixView<const T> w) {
    detail::check_device_view<T>(Host::name(), w, "W");
    check_device_rules(Host::name());
    // Growing the workspace frees buffers that steps queued on the engine's stream may still use, and the zero
    // fill below runs on Thrust's stream: both after the work queued so far (device_matrix.hpp).
    detail::device_synchronize();
    State s;
    s.rows = w.rows;
    s.cols = w.cols;
    s.layout = w.layout;
    if constexpr (MomentumType::has_buffer) s.momentum.assign(std::size_t(w.size()), T(0));
    detail::init_policy_state<PreconditionerType>(s.precondition, options_.precondition, w.rows, w.cols);
    if constexpr (device_state) {  // the fields' initial values moved to device memory
      Index size = 0;
      Precondition::template device_fields<T>(s.precondition, [&](auto& host) {
        s.moment_sizes.push_back(host.size());
        size += host.size();
      });
      s.moment.resize(std::size_t(size));
      s.each_device_field(s.precondition, [&](auto& host, Index at) {
        detail::copy_n(host.data(), host.size(), s.moment.begin() + at);
        host.resize(0);
      });
    }
    detail::init_policy_state<ScalingType>(s.scaling, w.rows, w.cols);
    reserve(w.rows, w.cols);
    return s;
  }
  /// The state for a DeviceMatrix W.
  State make_state(const DeviceMatrix<T>& w) { return make_state(w.view()); }

  /// One step in place, on device memory. Throws std::invalid_argument (W and state unchanged) on bad
  /// hyperparameters, a shape or layout mismatch, or (NonFinite::Throw) a non-finite gradient.
  void step(DeviceMatrixView<T> w, DeviceMatrixView<const T> g, State& state) {
    constexpr const char* where = Host::name();
    validate(where);
    detail::check_device_step<T>(where, w, g, state);
    detail::check_row_blocks<PreconditionerType, ScalingType, T>(options_.precondition, w.rows, w.cols, where);
    check_policy_state(state, w.rows, w.cols, where);
    detail::check_step_coefficients<ScalingType>(options_.scaling, options_.lr, options_.weight_decay,
                                                 options_.precondition, w.rows, w.cols);
    reserve(w.rows, w.cols);  // no-op unless the options changed since make_state
    detail::Strided<const T> gs = detail::strided(g.data, g.rows, g.cols, w.layout);
    switch (detail::gradient_action(engine_.all_finite(gs), options_.non_finite, where, g.rows, g.cols)) {
      case detail::GradAction::Apply: break;
      case detail::GradAction::Skip: ++state.skipped; return;
      case detail::GradAction::Zero: {
        detail::grow(ws_.clean, w.size());
        const detail::Strided<T> clean = detail::strided(detail::raw(ws_.clean), w.rows, w.cols, w.layout);
        engine_.clean(clean, gs);
        gs = clean;
        ++state.zeroed;
      }
    }
    if (telemetry_.due(state.steps + 1)) {
      report(w, gs, state);
    } else {
      apply(detail::strided(w), gs, state);
      ++state.steps;
    }
  }
  /// One step of DeviceMatrix W with gradient G.
  void step(DeviceMatrix<T>& w, const DeviceMatrix<T>& g, State& state) { step(w.view(), g.view(), state); }

  /// lr * s(m, n) (Static) or lr * r * s with the last trust ratio (TrustRatio), as on the host (row blocks: the
  /// first block's shape).
  T effective_lr(const State& s) const {
    const Index rows = detail::reported_rows<PreconditionerType>(options_.precondition, s.rows);
    return ScalingType::effective_lr(options_.scaling, s.scaling, options_.lr, rows, s.cols);
  }
  /// Device bytes of the shared workspace (and of the telemetry copies, once a report has needed them).
  std::size_t workspace_bytes() const { return ws_.bytes() + (report_w_.size() + report_u_.size()) * sizeof(T); }

  /// Reports every K-th step of each parameter, as Optimizer::set_telemetry, with U in device memory. A
  /// reporting step copies W and forms U in two m n device buffers (allocated the first time a report needs a
  /// larger shape) and takes one more pass for update_rms; reporting does not change the numbers.
  void set_telemetry(Telemetry<T, DeviceStepReport<T>> t) { telemetry_ = std::move(t); }
  /// The telemetry settings.
  const Telemetry<T, DeviceStepReport<T>>& telemetry() const { return telemetry_; }

 private:
  using Precondition = detail::DevicePreconditioner<PreconditionerType>;
  static constexpr bool device_state = detail::device_state_v<PreconditionerType>;
  /// Preconditioners that read the raw gradient (SecondMoment: NAMO's ||G||_F) and keep a moment.
  static constexpr bool second_moment = detail::reads_gradient_v<PreconditionerType>;
  /// The scaling's engine operations.
  using Scaling = detail::DevicePolicyEngine<T, Engine, ScalingType>;
  /// Per-head / split row blocks (row_blocks.hpp), taken with a scaling that keeps no state (check_row_blocks).
  static constexpr bool splits_rows =
      detail::splits_rows_v<PreconditionerType> && std::is_empty_v<typename ScalingType::template State<T>>;
  /// Blocks of one shape orthogonalized together: an engine with batched Newton-Schulz and a Newton-Schulz
  /// preconditioner (Orthogonalize, or SecondMoment of it).
  static constexpr bool batched_blocks = splits_rows && Engine::has_batched_ns &&
                                         !std::is_void_v<detail::ns_method_t<PreconditionerType>>;

  /// Row/ColNormalize with Static scaling: one pass per normalized vector (fused_normalize.hpp's step).
  static constexpr bool fused =
      MomentumType::has_buffer && detail::has_fused_step_v<ScalingType> &&
      detail::is_normalize_lines_v<PreconditionerType>;

  /// The device's own rule on the options (DeviceDtypeCheck), before anything is allocated or written.
  void check_device_rules(const char* where) const {
    detail::DeviceDtypeCheck dtype{where};
    Host::describe(options_, dtype);
  }
  /// The host optimizer's checks of the options, after the device's own rule.
  void validate(const char* where) const {
    check_device_rules(where);
    Host::validate(options_, where);
  }

  /// The preconditioner's state must fit these options (SecondMoment: S sized for the row blocks of make_state).
  void check_policy_state(const State& state, Index m, Index n, const char* where) const {
    using S = detail::policy_state_t<PreconditionerType, T>;
    if constexpr (device_state)
      Precondition::template check_state<T>(state.precondition, Index(state.moment.size()), options_.precondition, m,
                                            n, where);
    else if constexpr (detail::has_check_state_v<PreconditionerType, S, typename PreconditionerType::Options>)
      PreconditionerType::check_state(state.precondition, options_.precondition, m, n, where);
  }

  void reserve(Index m, Index n) {
    Precondition::reserve(ws_, options_.precondition, m, n);
    if constexpr (splits_rows) {
      const RowBlocks& b = options_.precondition;
      if (b.blocked() && b.fits(m)) {
        b.for_each(m, [&](const RowSet& r) {
          Precondition::reserve(ws_, options_.precondition, r.size(), n);
          // The engine's row scratch is not monotone in the rows (cuda::Engine::reserve): each block's shape too.
          engine_.reserve(r.size(), n);
        });
        ws_.host_norms.reserve(b.split_groups);  // >= 1
        if constexpr (!detail::has_fused_step_v<ScalingType>)
          if (b.split_groups > 1) {  // update_block gathers a block's runs
            detail::grow(ws_.block_w, m * n);
            detail::grow(ws_.block_g, m * n);
          }
      }
      if constexpr (batched_blocks)
        if (equal_blocks(m)) engine_.template reserve_batched<T>(b.count(), b.block(m, 0).size(), n);
    }
    if constexpr (detail::tracks_singular_vectors_v<ScalingType>) detail::grow(ws_.vectors, m + n);
    engine_.reserve(m, n);  // the engine's own scratch (the CUDA engine's bf16 operands, reduction results)
    if (options_.non_finite == NonFinite::Zero) detail::grow(ws_.clean, m * n);
  }

  /// apply() with a report (Optimizer::report's order): copies W and forms U first, then steps, then calls the
  /// telemetry callback.
  void report(DeviceMatrixView<T> wv, detail::Strided<const T> g, State& state) {
    const Index m = wv.rows, n = wv.cols;
    const detail::Strided<T> w = detail::strided(wv);
    detail::grow(report_w_, m * n);
    detail::grow(report_u_, m * n);
    const detail::Strided<T> before = detail::strided(detail::raw(report_w_), m, n, wv.layout);
    const detail::Strided<T> u = detail::strided(detail::raw(report_u_), m, n, wv.layout);
    if (m * n != 0) {
      engine_.copy(detail::Strided<const T>(w), before);
      if constexpr (MomentumType::has_buffer) {
        const auto c = MomentumType::coefficients(options_.momentum, options_.nesterov);
        engine_.combine(u, c.u_g, g, c.u_v,
                        detail::Strided<const T>(detail::strided(detail::raw(state.momentum), m, n, wv.layout)));
      } else {
        engine_.copy(g, u);
      }
    }
    apply(w, g, state);
    ++state.steps;
    DeviceStepReport<T> r;
    r.param = wv.data;
    r.rows = m;
    r.cols = n;
    r.step = state.steps;
    r.direction = DeviceMatrixView<const T>{u.data, m, n, wv.layout};
    if (m * n != 0) {
      engine_.combine(before, T(1), detail::Strided<const T>(w), T(-1), detail::Strided<const T>(before));
      r.update_rms = double(engine_.norm(detail::Strided<const T>(before))) / std::sqrt(double(m) * double(n));
    }
    r.effective_lr = double(effective_lr(state));
    telemetry_.callback(r);
  }

  void apply(detail::Strided<T> w, detail::Strided<const T> g, State& state) {
    const Index m = w.rows, n = w.cols;
    if (m * n == 0) return;
    const auto c = MomentumType::coefficients(options_.momentum, options_.nesterov);
    const T lr = options_.lr, lambda = options_.weight_decay;
    [[maybe_unused]] const detail::Strided<T> v =
        detail::strided(MomentumType::has_buffer ? detail::raw(state.momentum) : nullptr, m, n, state.layout);
    if constexpr (fused) {
      const auto k = ScalingType::coefficients(options_.scaling, lr, lambda, m, n);
      if (!k.cautious) {  // the fused kernels have no masked decay: cautious takes the unfused step below
        const detail::FusedStep<T> f{c, T(options_.precondition.eps), k.keep, k.step};
        if constexpr (!PreconditionerType::columns)
          engine_.fused_normalize_rows(w, g, v, f);
        else
          engine_.fused_normalize_rows(w.t(), detail::Strided<const T>(g.t()), v.t(), f);
        return;
      }
    }
    if constexpr (splits_rows) {
      if (options_.precondition.blocked()) {
        apply_blocks(w, g, v, state);
        return;
      }
    }
    auto form_u = [&](detail::Strided<T> target) {  // U = u_g G + u_v V
      if constexpr (MomentumType::has_buffer)
        engine_.combine(target, c.u_g, g, c.u_v, detail::Strided<const T>(v));
      else
        engine_.copy(g, target);
    };
    const detail::Strided<T> d = precondition(state, 0, m, n, form_u, [&] { return engine_.norm(g); });
    Scaling scaling{engine_, ws_, state.layout};
    ScalingType::update(scaling, w, d, g, state.scaling, options_.scaling, lr, lambda);
    if constexpr (MomentumType::has_buffer)
      engine_.combine(v, c.v_v, detail::Strided<const T>(v), c.v_g, g);  // V <- v_v V + v_g G
  }

  /// D for an m x n parameter or row block whose U form_u writes; `offset`: the block's first entry of S.
  template <class FormU, class GNorm>
  detail::Strided<T> precondition(State& state, Index offset, Index m, Index n, FormU&& form_u, GNorm&& g_norm) {
    if constexpr (second_moment) {
      return Precondition::apply(engine_, ws_, options_.precondition, slot(state, offset), g_norm, m, n, state.layout,
                                 form_u);
    } else if constexpr (device_state) {
      return Precondition::apply(engine_, ws_, options_.precondition, state.precondition, detail::raw(state.moment), m,
                                 n, state.layout, form_u);
    } else if constexpr (detail::has_policy_state_v<PreconditionerType, T>) {
      return Precondition::apply(engine_, ws_, options_.precondition, state.precondition, m, n, state.layout, form_u);
    } else {
      return Precondition::apply(engine_, ws_, options_.precondition, m, n, state.layout, form_u);
    }
  }

  /// apply() for row blocks (Optimizer::apply_blocks): each block (`groups` runs of rows) is formed run by run,
  /// preconditioned on its share of S and updated with the Static coefficients of its own shape; the momentum
  /// is updated once, after. Blocks of one shape on an engine with batched Newton-Schulz (the CUDA engine) are
  /// orthogonalized together (apply_blocks_batched).
  template <class Unused = void>
  void apply_blocks(detail::Strided<T> w, detail::Strided<const T> g, detail::Strided<T> v, State& state) {
    const Index n = w.cols;
    const auto c = MomentumType::coefficients(options_.momentum, options_.nesterov);
    const RowBlocks& blocks = options_.precondition;
    if constexpr (batched_blocks) {
      if (equal_blocks(w.rows)) {
        apply_blocks_batched(w, g, v, state);
        if constexpr (MomentumType::has_buffer)
          engine_.combine(v, c.v_v, detail::Strided<const T>(v), c.v_g, g);  // V <- v_v V + v_g G
        return;
      }
    }
    Index offset = 0;
    for (Index i = 0; i < blocks.count(); ++i) {
      const RowSet b = blocks.block(w.rows, i);
      const detail::Strided<T> d = precondition(state, offset, b.size(), n, block_u(b, g, v), block_g_norm(b, g));
      if constexpr (second_moment) offset += PreconditionerType::block_state_size(b.size(), n);
      update_block(b, w, g, d, state);
    }
    if constexpr (MomentumType::has_buffer)
      engine_.combine(v, c.v_v, detail::Strided<const T>(v), c.v_g, g);  // V <- v_v V + v_g G
  }

  /// Run k of block b (rows [first + k stride, + rows)) of x.
  template <class M>
  static M run_of(const RowSet& b, M x, Index k) {
    return detail::rows_of(x, b.first + k * b.stride, b.rows);
  }
  /// form_u of block b: U's runs written one after another into the block's target.
  auto block_u(const RowSet& b, detail::Strided<const T> g, detail::Strided<T> v) {
    return [this, b, g, v](detail::Strided<T> target) {
      const auto c = MomentumType::coefficients(options_.momentum, options_.nesterov);
      for (Index k = 0; k < b.groups; ++k) {
        const detail::Strided<T> t = detail::rows_of(target, k * b.rows, b.rows);
        if constexpr (MomentumType::has_buffer)
          engine_.combine(t, c.u_g, run_of(b, g, k), c.u_v, detail::Strided<const T>(run_of(b, v, k)));
        else
          engine_.copy(run_of(b, g, k), t);
      }
    };
  }
  /// ||G_b||_F, when a moment asks (NAMO): the norm of the runs' norms (core/detail/norms.hpp's robust_norm).
  auto block_g_norm(const RowSet& b, detail::Strided<const T> g) {
    return [this, b, g] {
      auto norms = ws_.host_norms.vector(b.groups);  // reserved for split_groups runs
      for (Index k = 0; k < b.groups; ++k) norms[k] = engine_.norm(run_of(b, g, k));
      return detail::robust_norm(norms);
    };
  }
  /// W_b <- the scaling's update of block b as a parameter of the block's shape, with D_b (its runs from D's rows, in
  /// order) and G_b. A block of one run is a view of W and G. The runs of a split_groups block take the coefficients
  /// of the block's shape run by run when the update is W <- keep W - step D (has_fused_step: Static), and are
  /// otherwise gathered into the workspace, updated there and written back.
  template <class Unused = void>
  void update_block(const RowSet& b, detail::Strided<T> w, detail::Strided<const T> g, detail::Strided<T> d,
                    State& state) {
    Scaling scaling{engine_, ws_, state.layout};
    const T lr = options_.lr, lambda = options_.weight_decay;
    if (b.groups == 1) {
      detail::Strided<T> wb = detail::rows_of(w, b.first, b.rows);
      ScalingType::update(scaling, wb, d, detail::rows_of(g, b.first, b.rows), state.scaling, options_.scaling, lr,
                          lambda);
    } else if constexpr (detail::has_fused_step_v<ScalingType>) {
      const auto k = ScalingType::coefficients(options_.scaling, lr, lambda, b.size(), w.cols);
      for (Index r = 0; r < b.groups; ++r) {
        const detail::Strided<const T> dr = detail::rows_of(d, r * b.rows, b.rows);
        if (k.cautious)
          scaling.cautious_update(run_of(b, w, r), k.keep, k.step, dr);
        else
          scaling.update(run_of(b, w, r), k.keep, k.step, dr);
      }
    } else {
      detail::Strided<T> wb = detail::strided(detail::raw(ws_.block_w), b.size(), w.cols, state.layout);
      const detail::Strided<T> gb = detail::strided(detail::raw(ws_.block_g), b.size(), w.cols, state.layout);
      for (Index r = 0; r < b.groups; ++r) {
        engine_.copy(detail::Strided<const T>(run_of(b, w, r)), detail::rows_of(wb, r * b.rows, b.rows));
        engine_.copy(run_of(b, g, r), detail::rows_of(gb, r * b.rows, b.rows));
      }
      ScalingType::update(scaling, wb, d, detail::Strided<const T>(gb), state.scaling, options_.scaling, lr, lambda);
      for (Index r = 0; r < b.groups; ++r)
        engine_.copy(detail::Strided<const T>(detail::rows_of(wb, r * b.rows, b.rows)), run_of(b, w, r));
    }
  }

  /// Blocks of one shape (heads, or equal split sizes), two or more.
  bool equal_blocks(Index m) const {
    if constexpr (splits_rows) return static_cast<const RowBlocks&>(options_.precondition).equal_blocks(m);
    return false;
  }

  /// The blocks' Newton-Schulz as one batched run (Engine::ns_batched: each product one strided-batched call for
  /// every block), then each block's moment (SecondMoment) and update, as apply_blocks.
  template <class Unused = void>
  void apply_blocks_batched(detail::Strided<T> w, detail::Strided<const T> g, detail::Strided<T> v, State& state) {
    using Method = detail::ns_method_t<PreconditionerType>;
    const RowBlocks& blocks = options_.precondition;
    const Index count = blocks.count(), mb = blocks.block(w.rows, 0).size(), n = w.cols;
    const bool tall = mb > n;
    const Index r = tall ? n : mb, s = tall ? mb : n;
    const typename Method::Options& ns = options_.precondition;
    const detail::Strided<T> xs = engine_.template ns_batched<T>(
        count, r, s, ns, Method::uses_gram(ns, r, s), [&](Index i, detail::Strided<T> x) {
          const detail::Strided<T> u = tall ? x.t() : x;
          block_u(blocks.block(w.rows, i), g, v)(u);
          if constexpr (second_moment)
            if constexpr (Precondition::sign_input) engine_.sign(u);
        });
    Index offset = 0;
    for (Index i = 0; i < count; ++i) {
      const RowSet b = blocks.block(w.rows, i);
      const detail::Strided<T> x = detail::col_major(xs.data + i * r * s, r, s), d = tall ? x.t() : x;
      if constexpr (second_moment) {
        Precondition::finish(engine_, ws_, options_.precondition, d, slot(state, offset), block_g_norm(b, g),
                             state.layout, block_u(b, g, v));
        offset += PreconditionerType::block_state_size(mb, n);
      }
      update_block(b, w, g, d, state);
    }
  }

  /// The SecondMoment's S of a parameter (or block: from entry `offset`), in device memory or the host State.
  T* slot(State& state, Index offset) {
    if constexpr (!second_moment) return nullptr;  // (explicit instantiations compile every member)
    else if constexpr (device_state) return detail::raw(state.moment) + offset;
    else return state.precondition.second_moment.data() + offset;
  }

  Options options_;
  Engine engine_;
  detail::DeviceWorkspace<T> ws_;
  Telemetry<T, DeviceStepReport<T>> telemetry_;
  thrust::device_vector<T> report_w_, report_u_;  ///< telemetry: W before the step, and U
};

}  // namespace matopt

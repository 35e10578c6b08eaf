// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: what the preconditioners' engine forms share (namespace detail only).
// A preconditioner's engine form is written once, in the policy's own file, for every engine that steps
// matrices over views (Optimizer's HostEngine, DeviceOptimizer's ThrustEngine and CUDA engine):
//   template <class WS> static void reserve_on(WS& ws, const Options& o, Index m, Index n);
//   template <class E, class WS, class FormU>
//   static Strided<T> apply_on(E& e, WS& ws, const Options& o, [state,] Index m, Index n, Layout layout,
//                              FormU&& form_u);
// form_u(target) writes U = u_g G + u_v V into the m x n view target; D, returned, is a view of the workspace.
// WS holds the engine's buffers by name (u, x, y, a, b, q, t, scale, u2, gram, vectors) with WS::ptr(buffer) and
// WS::grow(buffer, size), and host scratch (host_u, host_lines, polar, dominance). A policy with per-parameter state
// in engine memory declares `engine_state = true` and names those fields with engine_fields(state, f).

#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "matopt/config.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/strided.hpp"

namespace matopt::detail {

/// U formed into the workspace's u, in W's storage order (the element-wise and normalizing preconditioners).
template <class WS, class FormU>
Strided<typename WS::Scalar> form_in_workspace(WS& ws, Index m, Index n, Layout layout, FormU&& form_u) {
  const Strided<typename WS::Scalar> u = strided(WS::ptr(ws.u), m, n, layout);
  form_u(u);
  return u;
}

/// The Newton-Schulz method of a preconditioner that is one (Orthogonalize<NewtonSchulz<...>>, or SecondMoment of
/// it: their files specialize this), for an engine's batched run of equal row blocks; void otherwise.
template <class P>
struct ns_method {
  using type = void;
};
template <class P>
using ns_method_t = typename ns_method<P>::type;

/// Whether P has an engine form for the workspace WS.
template <class P, class WS, class = void>
inline constexpr bool has_engine_form_v = false;
template <class P, class WS>
inline constexpr bool has_engine_form_v<
    P, WS,
    std::void_t<decltype(P::reserve_on(std::declval<WS&>(), std::declval<const typename P::Options&>(), Index(),
                                       Index()))>> = true;

/// Stops the build, saying what to declare, where a composite (Adaptive, NuclearScaled, SecondMoment) wraps a policy
/// without an engine form.
template <class Inner, class WS>
constexpr void check_inner_engine_form() {
  static_assert(has_engine_form_v<Inner, WS>,
                "matopt: the policy a composite wraps (Adaptive's, NuclearScaled's, SecondMoment's) needs an engine "
                "form: `reserve_on` and `apply_on` (core/detail/engine_form.hpp), or is written as OnEngine<Policy>");
}

/// The n elements at x (engine memory) where the host reads them: x itself when the engine's memory is the host's
/// (WS::host_memory), else a copy downloaded into `host` (reserved with reserve_host).
template <class E, class WS, class T, class Host>
const T* host_readable(E& e, const WS&, Host& host, const T* x, Index n) {
  if constexpr (WS::host_memory) {
    return x;
  } else {
    e.download(x, n, host.data());
    return host.data();
  }
}
/// Reserves n elements of host copy for host_readable, where it copies.
template <class WS, class Host>
void reserve_host(const WS&, Host& host, Index n) {
  if constexpr (!WS::host_memory) host.reserve(n);
}

/// P::engine_state: whether part of P's per-parameter state lives in the engine's memory (AdaMuon's S, Dion's M
/// and Q); P then names those fields with engine_fields(state, f).
template <class P, class = void>
inline constexpr bool engine_state_v = false;
template <class P>
inline constexpr bool engine_state_v<P, std::void_t<decltype(P::engine_state)>> = P::engine_state;

/// A power iteration's vectors in engine memory (SpectralCap's power_iteration interface): u (w.rows elements) and v
/// (w.cols) in the workspace, v uploaded from the host State's and both stored back into it after the iteration.
template <class T, class Engine>
struct EngineSingularVectors {
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

/// Scalings that declare `tracks_singular_vectors = true` (SpectralCap) get m + n elements of engine scratch.
template <class S, class = void>
inline constexpr bool tracks_singular_vectors_v = false;
template <class S>
inline constexpr bool tracks_singular_vectors_v<S, std::void_t<decltype(S::tracks_singular_vectors)>> =
    S::tracks_singular_vectors;

/// The policies' operations on an engine over views: a second moment's apply(e, d, ...), NuclearScaled's and Dion's
/// steps, and a scaling S's own update(e, w, d, g, ...) in the engine step (core/detail/engine_step.hpp), on the host
/// engine and the device engines alike (behind a host form, Optimizer passes HostEngine on Eigen expressions
/// instead); W, D and G in engine memory, D a workspace view that `combined`, `minus_rank1` and the moments'
/// operations overwrite, and scratch in the workspace WS.
template <class T, class Engine, class WS, class S = void>  // S: the scaling or the moment, for its checks
struct PolicyEngine {
  Engine& e;
  WS& ws;
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
  /// f(X) for the column-major x: in place where the engine's memory is the host's, else on a host copy (in the
  /// workspace's host buffer) copied back into x.
  template <class F>
  void on_host(Strided<T> x, F&& f) {
    MATOPT_ASSERT(x.rs == 1 && (x.cs == x.rows || x.cols <= 1));
    using Map = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>>;
    if constexpr (WS::host_memory) {
      f(Map(x.data, x.rows, x.cols));
    } else {
      e.download(static_cast<const T*>(x.data), x.size(), ws.host_u.data());
      f(Map(ws.host_u.data(), x.rows, x.cols));
      e.upload(static_cast<const T*>(ws.host_u.data()), x.size(), x.data);
    }
  }
  /// The vectors of a power iteration on W in the workspace, v uploaded from the host's.
  template <class V>
  EngineSingularVectors<T, Engine> singular_vectors(Strided<T> w, const V&, const V& host_v) {
    static_assert(tracks_singular_vectors_v<S>,
                  "matopt: a scaling that calls e.singular_vectors declares `static constexpr bool "
                  "tracks_singular_vectors = true;` (their m + n elements of workspace; a scaling wrapping "
                  "SpectralCap too)");
    T* u = WS::ptr(ws.vectors);
    e.upload(host_v.data(), w.cols, u + w.rows);
    return {e, Strided<const T>(w), u, u + w.rows};
  }

  // The second moments' operations (moments::*::apply, precondition/second_moment.hpp): D changed in place, then
  // passed to sink; f points at host memory (k line statistics go through ws.scale each way).
  /// The squared norms of D's rows (rows) or columns, downloaded into f.
  void line_squared_norms(Strided<T> d, bool rows, T* f) {
    const Strided<T> lines = rows ? d : d.t();
    e.row_squared_norms(Strided<const T>(lines), WS::ptr(ws.scale));
    e.download(static_cast<const T*>(WS::ptr(ws.scale)), lines.rows, f);
  }
  /// Row i (rows) or column i of D times f[i], f uploaded; then sink(D).
  template <class Sink>
  void scale_lines(Strided<T> d, bool rows, const T* f, Sink&& sink) {
    const Strided<T> lines = rows ? d : d.t();
    e.upload(f, lines.rows, WS::ptr(ws.scale));
    e.scale_rows(lines, static_cast<const T*>(WS::ptr(ws.scale)));
    sink(d);
  }
  /// S <- b S + (1 - b) D.D (S at s in engine memory, in W's storage order), D <- D / (sqrt(S) + eps); then sink(D).
  template <class Sink>
  void moment_normalized(Strided<T> d, T* s, T b, T eps, Sink&& sink) {
    static_assert(engine_state_v<S>,
                  "matopt::SecondMoment: a moment that calls e.moment_normalized declares `static constexpr bool "
                  "engine_state = true;` (its S then lives in the engine's memory)");
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

}  // namespace matopt::detail

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// DionPowerIteration: Dion's low-rank power-iteration step (arXiv 2504.05295) as a stateful preconditioner.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include <Eigen/Core>
#include <Eigen/QR>

#include "matopt/config.hpp"
#include "matopt/core/detail/engine.hpp"
#include "matopt/core/detail/engine_form.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/parse.hpp"
#include "matopt/core/detail/strided.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/core/detail/workspace.hpp"
#include "matopt/distributed/plan.hpp"

namespace matopt {

/// Dion's step (arXiv 2504.05295; microsoft/dion) on one device, as a preconditioner that keeps its own momentum M
/// and rank-r right factor Q: M <- M + G, one power iteration P = orthonormalize(B Q) (Householder QR), R = B^T P,
/// error feedback M <- M - (1 - mu) P R^T, Q <- R with normalized columns, D = P Q^T. Compose it with NoMomentum and
/// Static<shape::Spectral>: the Dion preset. The QR allocates (@ref policy_preconditioner).
///
/// Reference: microsoft/dion dion_reference.py dion_update (`docs/math.md#dion`). B = M when m >= n and B = M^T
/// otherwise (tall, R x C); the error feedback and D are in W's orientation; Q <- R / (||R||_column + eps).
/// NoMomentum gives U = G; Static<shape::Spectral> lr sqrt(m/n) and decoupled decay.
/// An all-zero M gives P = 0 and R = Q (dion fix_all_zero_or_nan): D = 0, Q renormalized. Q starts
/// as a fixed pseudo-random normal matrix (dion: torch.randn; the same for equal shapes here) and is kept in the
/// state with M, so checkpoints resume bitwise. The sign of each column of P (the QR's convention) cancels in
/// P R^T and P Q^T. Dion is not on the zero-allocation list.
/// One device only: dion's sharded (DDP / FSDP) forms are not part of matopt yet.
struct DionPowerIteration {
  /// "DionPowerIteration".
  static constexpr const char* name() { return "DionPowerIteration"; }
  /// The planner's cost (distributed/plan.hpp): m n min(m, n), the bound of its m n r power iteration (r <= min(m, n)).
  static double cost(Index m, Index n) { return orthogonalize_cost(m, n); }

  /// Options of the step.
  struct Options {
    double mu = 0.95;             ///< error-feedback momentum (dion `mu`; Optimizer's `momentum` has no effect)
    double rank_fraction = 1.0;   ///< r / min(m, n), before rounding up to rank_multiple_of
    /// The rank is rounded up to a multiple of this (>= 1; default 1).
    int rank_multiple_of = 1;
    double eps = 1e-8;            ///< column-normalization floor of Q
  };
  /// Per parameter: Dion's momentum M and right factor Q at a rank fixed at make_state (all checkpointed).
  template <class T>
  struct State {
    Eigen::Matrix<T, Eigen::Dynamic, 1> momentum;  ///< M, in W's storage order
    Eigen::Matrix<T, Eigen::Dynamic, 1> q;         ///< Q, min(m, n) x rank, column-major
    /// The rank r (0 for an empty parameter).
    std::int64_t rank = 0;
    /// Bytes held.
    std::size_t bytes() const { return std::size_t(momentum.size() + q.size()) * sizeof(T); }
    /// Every field, for checkpoints: f(name, field).
    template <class F>
    void fields(F&& f) {
      f("rank", rank);
      f("momentum", momentum);
      f("q", q);
    }
  };

  /// r = min(ceil(rank_fraction min(m, n) / rank_multiple_of) rank_multiple_of, m, n), at least 1.
  static Index rank(const Options& o, Index m, Index n) {
    const Index k = std::min(m, n), mult = o.rank_multiple_of;
    const Index want = Index(std::ceil(o.rank_fraction * double(k) / double(mult) - 1e-12)) * mult;
    return std::max<Index>(1, std::min({want, m, n}));
  }

  /// The options (core/options.hpp): mu, rank_fraction, rank_multiple_of, dion_eps.
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("mu", o.mu, checks::UnitInterval{}, "mu of Dion's error feedback");
    d("rank_fraction", o.rank_fraction, checks::Fraction{}, "Dion's rank r / min(m, n) before rounding");
    d("rank_multiple_of", o.rank_multiple_of, checks::AtLeast{1}, "Dion's rank rounded up to a multiple of it");
    d("dion_eps", o.eps, checks::Positive{}, "epsilon of Q's column normalization");
  }

  /// M = 0 and Q: min(m, n) x rank normal pseudo-random entries (Box-Muller over splitmix64, seeded by the shape).
  template <class T>
  static void init_state(State<T>& s, const Options& o, Index m, Index n) {
    s.rank = m * n == 0 ? 0 : rank(o, m, n);
    s.momentum.setZero(m * n);
    s.q.resize(std::min(m, n) * s.rank);
    std::uint64_t x = 0x9E3779B97F4A7C15ull ^ (std::uint64_t(m) * 0x100000001B3ull + std::uint64_t(n));
    auto uniform = [&x] {  // splitmix64, in (0, 1)
      std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return (double((z ^ (z >> 31)) >> 11) + 0.5) * 0x1.0p-53;
    };
    for (Index i = 0; i < s.q.size(); ++i)
      s.q[i] = T(std::sqrt(-2 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()));
  }
  /// The state must have been made under the same rank (rank_fraction may not change after make_state).
  template <class T>
  static void check_state(const State<T>& s, const Options& o, Index m, Index n, std::string_view where) {
    if (m * n != 0 && s.rank != rank(o, m, n))
      detail::fail(where, "state was made with Dion rank ", s.rank, " but rank_fraction ", o.rank_fraction,
                   " and rank_multiple_of ", o.rank_multiple_of, " now give ", rank(o, m, n), " for a ",
                   detail::shape_string(m, n), " parameter");
  }
  /// P <- the thin Q factor of P's Householder QR (dion's orthonormalize; allocates).
  template <class M>
  static void orthonormalize(M&& p) {
    using Mat = Eigen::Matrix<typename std::decay_t<M>::Scalar, Eigen::Dynamic, Eigen::Dynamic>;
    const Eigen::HouseholderQR<Mat> qr(p);
    p.setIdentity();
    p.applyOnTheLeft(qr.householderQ());
  }
  /// Dion's step on engine e, written once over views for every engine (the host engine here, a device engine in
  /// DeviceOptimizer): M (m x n, W's order) and Q (min(m, n) x r, column-major) updated in place; D holds G on entry
  /// and D on return; P (max(m, n) x r) and R (min(m, n) x r) column-major scratch; f r scalars of host memory. Q's
  /// column factors 1 / (||R_j|| + eps) are computed on the host and multiplied in.
  template <class E, class T>
  static void run(E& e, detail::Strided<T> mom, detail::Strided<T> q, detail::Strided<T> p, detail::Strided<T> rr,
                  detail::Strided<T> d, const Options& o, T* f) {
    using View = detail::Strided<const T>;
    const bool tall = mom.rows >= mom.cols;  // B = M (R x C) or M^T
    const detail::Strided<T> b = tall ? mom : mom.t(), dt = tall ? d : d.t();
    e.combine(mom, T(1), View(mom), T(1), View(d));  // M <- M + G
    const bool zero = e.norm(View(mom)) == T(0);     // P = 0 and R = Q: M unchanged, D = 0
    if (zero) {
      e.copy(View(mom), d);
    } else {
      e.gemm(T(1), b, q, T(0), p);  // P = orthonormalize(B Q)
      e.on_host(p, [](auto&& host) { orthonormalize(host); });
      e.gemm(T(1), b.t(), p, T(0), rr);          // R = B^T P
      e.gemm(-T(1 - o.mu), p, rr.t(), T(1), b);  // M <- M - (1 - mu) P R^T
      e.copy(View(rr), q);
    }
    e.line_squared_norms(q, false, f);  // Q <- R / (||R_j|| + eps)
    for (Index j = 0; j < q.cols; ++j) f[j] = T(1) / (T(std::sqrt(f[j])) + T(o.eps));
    e.scale_lines(q, false, static_cast<const T*>(f), [](const auto&) {});
    if (!zero) e.gemm(T(1), p, q.t(), T(0), dt);  // D = P Q^T, in W's orientation
  }

  /// The engine form (core/detail/engine_form.hpp): the State's M and Q live in engine memory (M in W's storage
  /// order, then Q, min(m, n) x r column-major); the host State keeps the rank. A checkpoint fills M and Q in a copy
  /// of the host State.
  static constexpr bool engine_state = true;
  /// The State's fields that live in engine memory: M, then Q.
  template <class T, class F>
  static void engine_fields(State<T>& s, F&& f) {
    f(s.momentum);
    f(s.q);
  }
  /// The rank of make_state must be the one these options give (check_state).
  template <class T>
  static void check_engine_state(const State<T>& s, Index, const Options& o, Index m, Index n,
                                 std::string_view where) {
    check_state(s, o, m, n, where);
  }
  /// U = G (then D), P and R in engine memory, P's host copy and Q's column factors on the host.
  template <class WS>
  static void reserve_on(WS& ws, const Options& o, Index m, Index n) {
    const Index r = rank(o, m, n), rows = std::max(m, n), cols = std::min(m, n);
    ws.grow(ws.u, m * n);
    ws.grow(ws.a, rows * r);
    ws.grow(ws.b, cols * r);
    ws.grow(ws.scale, r);
    detail::reserve_host(ws, ws.host_u, rows * r);
    ws.host_lines.reserve(r);
  }
  /// D (in ws.u, W's storage order) for U = G, with M and Q at fields[0] and fields[1] (updated in place): run()
  /// with the products on the engine and the thin Q factor of P's Householder QR on a host copy of P (on_host:
  /// max(m, n) r elements each way per step on a device). The products run in the engine's precision.
  template <class E, class WS, class FormU>
  static detail::Strided<typename WS::Scalar> apply_on(E& e, WS& ws, const Options& o,
                                                       const State<typename WS::Scalar>& s,
                                                       typename WS::Scalar* const* fields, Index m, Index n,
                                                       Layout layout, FormU&& form_u) {
    using T = typename WS::Scalar;
    const Index r = Index(s.rank), rows = std::max(m, n), cols = std::min(m, n);
    const detail::Strided<T> d = detail::form_in_workspace(ws, m, n, layout, form_u);  // U = G, then D in its place
    detail::PolicyEngine<T, E, WS> pe{e, ws, layout};
    run(pe, detail::strided(fields[0], m, n, layout), detail::col_major(fields[1], cols, r),
        detail::col_major(WS::ptr(ws.a), rows, r), detail::col_major(WS::ptr(ws.b), cols, r), d, o,
        ws.host_lines.data());
    return d;
  }
};

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: the Newton–Schulz iteration written once for every backend (namespace detail only).
// The Newton–Schulz iteration as one algorithm for every backend (docs/math.md#newton-schulz-iteration; cost model in
// newton_schulz.hpp). A backend supplies an engine with the dense operations on its matrix handles
// (column-major on device; either storage order, one per run, on the host); the Eigen path
// (detail::ns_on_host, engine detail::HostEngine), the Thrust backend and the CUDA backend (cuBLAS, also
// strided-batched) all run this code.
//
// Engine interface, for handles M of scalar type T = Engine::scalar_t<M>:
//   norm(x) -> T (Frobenius, no overflow)   scale(x, s)            empty(x) -> bool
//   syrk_lower(alpha, a, beta, c): lower(C) <- alpha A A^T + beta lower(C)   (beta = 0: C not read)
//   gemm(alpha, a, b, beta, c):    C <- alpha A B + beta C                  (beta = 0: C not read)
//   mirror_lower(c)  copy_lower(src, dst)  add_diagonal(c, v)  copy(src, dst)
//   aol_scale(x, a, scratch, eps): Turbo-Muon's AOL row scaling of x and a (schedule.hpp), scratch r x r

#include <algorithm>
#include <utility>
#include <vector>

#include "matopt/core/detail/errors.hpp"
#include "matopt/precondition/schedule.hpp"

namespace matopt::detail {

/// The Newton–Schulz algorithm, written once for every backend: `Engine` supplies the dense operations
/// on its matrix handles `M` (HostEngine, core/detail/engine.hpp, for Eigen maps of either order; backend/thrust.hpp and
/// backend/cuda for device memory). x holds the r x s input (r <= s); y the same shape; a, b r x r;
/// q, t r x r for the Gram variant. Returns the handle holding the result.
template <class M>
struct NsMatrices {
  M *x, *y, *a, *b, *q, *t;

  /// steps: the iteration count, the schedule's own where negative (AutoSteps passes its plan's).
  template <class Engine, class Options>
  M& run(Engine& e, const Options& o, bool gram, int steps = -1) {
    using T = typename Engine::template scalar_t<M>;
    const NsSchedule& sch = o.schedule;
    if (!sch.aol) {  // with AOL, the first step's A = X X^T gives the scaling (aol_first)
      const T denominator = T(sch.safety) * e.norm(*x) + T(sch.eps);
      e.scale(*x, denominator > T(0) ? T(1) / denominator : T(0));  // a zero U with ns_eps = 0 stays zero
    }
    if (e.empty(*x)) return *x;
    const int k = steps < 0 ? sch.steps : steps;
    return gram ? run_gram(e, sch, k, o.restarts) : run_plain(e, sch, k);
  }

 private:
  /// b <- a I + b A + c A^2 for a full symmetric A (lower triangle computed, then mirrored).
  template <class Engine, class T = typename Engine::template scalar_t<M>>
  static void polynomial(Engine& e, const NsCoefficients& k, M& a, M& b) {
    e.copy_lower(a, b);
    e.syrk_lower(T(k.c), a, T(k.b), b);
    e.add_diagonal(b, T(k.a));
    e.mirror_lower(b);
  }

  /// 3 r^2 s + r^3 per step: A = X X^T (SYRK), B (SYRK with beta), X <- B X (GEMM).
  /// AOL (schedule.hpp): X <- diag(d) X and A <- diag(d) A diag(d) from A = X X^T; `scratch` holds d.
  template <class Engine, class T = typename Engine::template scalar_t<M>>
  static void aol_first(Engine& e, const NsSchedule& sch, M& xm, M& am, M& scratch) {
    if (sch.aol) e.aol_scale(xm, am, scratch, T(sch.eps));
  }

  template <class Engine, class T = typename Engine::template scalar_t<M>>
  M& run_plain(Engine& e, const NsSchedule& sch, int steps) {
    M* cur = x;
    M* next = y;
    for (int k = 0; k < steps; ++k) {
      e.syrk_lower(T(1), *cur, T(0), *a);  // A = X X^T
      e.mirror_lower(*a);
      if (k == 0) aol_first(e, sch, *cur, *a, *b);
      polynomial(e, sch.at(k), *a, *b);    // B = a I + b A + c A^2
      e.gemm(T(1), *b, *cur, T(0), *next);  // X <- B X
      std::swap(cur, next);
    }
    return *cur;
  }

  /// Gram NS (Dao-AILab): iterate on R = X X^T; Q <- Q M, R <- M R M; restart X <- Q X after `restarts`.
  template <class Engine, class T = typename Engine::template scalar_t<M>>
  M& run_gram(Engine& e, const NsSchedule& sch, int steps, const std::vector<int>& restarts) {
    M* cur = x;
    M* next = y;
    M* qp = q;
    M* tp = t;
    M& gram = *a;
    M& m = *b;
    e.syrk_lower(T(1), *cur, T(0), gram);  // R = X X^T
    e.mirror_lower(gram);
    aol_first(e, sch, *cur, gram, m);
    bool q_identity = true;
    for (int k = 0; k < steps; ++k) {
      polynomial(e, sch.at(k), gram, m);  // M = a I + b R + c R^2
      if (q_identity) {
        e.copy(m, *qp);
        q_identity = false;
      } else {
        e.gemm(T(1), *qp, m, T(0), *tp);  // Q <- Q M
        std::swap(qp, tp);
      }
      if (k + 1 == steps) break;
      if (std::find(restarts.begin(), restarts.end(), k + 1) != restarts.end()) {
        e.gemm(T(1), *qp, *cur, T(0), *next);  // X <- Q X, R <- X X^T, Q <- I
        std::swap(cur, next);
        e.syrk_lower(T(1), *cur, T(0), gram);
        e.mirror_lower(gram);
        q_identity = true;
      } else {
        e.gemm(T(1), m, gram, T(0), *tp);  // R <- M R M
        e.gemm(T(1), *tp, m, T(0), gram);
      }
    }
    e.gemm(T(1), *qp, *cur, T(0), *next);  // output Q X
    return *next;
  }
};

/// Newton–Schulz of the handles m on engine e (an engine may run it its own way: the host engine's overload,
/// newton_schulz.hpp, maps the handles to Eigen and may multiply in bfloat16); returns the result's handle.
template <class Engine, class WS, class M, class Options>
M newton_schulz(Engine& e, WS&, NsMatrices<M> m, const Options& o, bool gram, int steps) {
  return m.run(e, o, gram, steps);
}

}  // namespace matopt::detail

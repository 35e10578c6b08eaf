// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: what Optimizer and DeviceOptimizer do around one parameter's step, written once (namespace detail only).
// Around the step of docs/design.md#the-step-pipeline, on every engine: the checks that read the options (row blocks,
// the scales s(m, n)), the gradient gate's outcome (skip, or G's non-finite entries zeroed into a buffer), the report
// that telemetry asks for (W before the step, U, the update's RMS), the step counter and the per-parameter learning
// rate. The optimizers keep their entry points (Eigen matrices and host views; device views), their State types and
// the step on views itself: the fused one-pass step, the engine step (core/detail/engine_step.hpp) or, on the host,
// a preconditioner's host form.

#include <cmath>
#include <cstddef>
#include <type_traits>

#include "matopt/config.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/strided.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/core/step_policy.hpp"
#include "matopt/precondition/row_blocks.hpp"

namespace matopt::detail {

/// A call of a callable that outlives it, by reference, without allocating (the host's write-back of a copied W);
/// default-constructed: nothing.
class Callback {
 public:
  Callback() = default;
  template <class F>
  explicit Callback(F& f) : f_(&f), call_([](void* x) { (*static_cast<F*>(x))(); }) {}
  void operator()() const {
    if (call_) call_(f_);
  }

 private:
  void* f_ = nullptr;
  void (*call_)(void*) = nullptr;
};

/// The driver of Optimizer<T, P, M, S> steps with options O, buffers in Store's memory (HostStore, DeviceStore:
/// precondition/detail/engine_workspace.hpp) and telemetry reports of type Report (StepReport, DeviceStepReport).
template <class T, class P, class M, class S, class O, class Store, class Report>
class Driver {
 public:
  /// The telemetry settings: every `every`-th step of each parameter reported (step_policy.hpp).
  Telemetry<T, Report> telemetry;

  /// Throws, before anything is written, where a step of an m x n W at lr and lambda does not fit the options: row
  /// blocks (precondition/row_blocks.hpp) must split the rows as asked, and only a preconditioner that steps row
  /// blocks (Orthogonalize, SecondMoment of it) with a scaling without per-parameter state takes them; Static's scales
  /// s(m, n), and each row block's, must be finite (before a stateful preconditioner such as SecondMoment writes).
  static void check(const O& o, Index m, Index n, T lr, T lambda, const char* where) {
    if constexpr (std::is_base_of_v<RowBlocks, typename P::Options>) {
      const RowBlocks& b = o.precondition;
      if (b.blocked()) {
        if constexpr (!splits_rows_v<P>)
          fail(where, "heads / split_sizes: ", policy_identity<P>(),
               " orthogonalizes the whole matrix (only Orthogonalize and SecondMoment step row blocks)");
        if constexpr (!std::is_empty_v<typename S::template State<T>>)
          fail(where, "heads / split_sizes need a scaling without per-parameter state (", S::name(),
               " keeps one per matrix)");
        b.check(m, n, where);
      }
    }
    if constexpr (has_fused_step_v<S>) {
      if (m * n == 0) return;
      S::coefficients(o.scaling, lr, lambda, m, n);
      if constexpr (std::is_base_of_v<RowBlocks, typename P::Options>) {
        const RowBlocks& b = o.precondition;
        if (b.blocked() && b.fits(m))
          b.for_each(m, [&](const RowSet& r) { S::coefficients(o.scaling, lr, lambda, r.size(), n); });
      }
    }
  }

  /// The learning rate the update of a parameter with this state uses at lr (Optimizer::effective_lr): the scaling's,
  /// for the first row block's shape where P splits rows (the scaling sees each block as the parameter).
  template <class State>
  static T effective_lr(const O& o, const State& s, T lr) {
    Index rows = s.rows;
    if constexpr (splits_rows_v<P>) rows = static_cast<const RowBlocks&>(o.precondition).first_rows(s.rows);
    return S::effective_lr(o.scaling, s.scaling, lr, rows, s.cols);
  }

  /// Grows the buffer of a zeroed G to `size` elements under NonFinite::Zero (make_state), so that steps allocate
  /// nothing.
  void reserve(const O& o, Index size) {
    if (o.non_finite == NonFinite::Zero) Store::grow(clean_, size);
  }
  /// Bytes of the driver's buffers: the zeroed G, and W and U of a report.
  std::size_t bytes() const {
    return (Store::size(clean_) + Store::size(report_w_) + Store::size(report_u_)) * sizeof(T);
  }

  /// One checked step of W with G (views of the engine's memory; `layout`: W's storage order, V's, the buffers'; V
  /// null without a momentum buffer), after the gradient gate's `action`: skipped (counted), taken on G with its
  /// non-finite entries zeroed (counted), or taken; reported when telemetry is due (param identifies W in the report).
  /// step(g) is the optimizer's step on these views with gradient g (G, or its zeroed copy); the step counter is
  /// advanced here.
  template <class E, class State, class Step>
  void run(E& e, const O& o, Layout layout, Strided<T> w, Strided<const T> g, const T* v, GradAction action,
           State& state, T lr, const T* param, Step&& step) {
    if (action == GradAction::Skip) {
      ++state.skipped;
      return;
    }
    const Index m = w.rows, n = w.cols;
    if (action == GradAction::Zero) {
      Store::grow(clean_, m * n);  // allocates only if the policy was switched to Zero after make_state
      const Strided<T> clean = strided(Store::ptr(clean_), m, n, layout);
      if (m * n != 0) e.clean(clean, g);
      g = clean;
      ++state.zeroed;
    }
    if (!telemetry.due(state.steps + 1)) {
      step(g);
      ++state.steps;
      return;
    }
    // A report: W before and U = u_g G + u_v V copied first, then the step, then the callback.
    Store::grow(report_w_, m * n);
    Store::grow(report_u_, m * n);
    const Strided<T> before = strided(Store::ptr(report_w_), m, n, layout);
    const Strided<T> u = strided(Store::ptr(report_u_), m, n, layout);
    if (m * n != 0) {
      e.copy(Strided<const T>(w), before);
      if constexpr (M::has_buffer) {
        const auto c = M::coefficients(o.momentum, o.nesterov);
        e.combine(u, c.u_g, g, c.u_v, strided(v, m, n, layout));
      } else {
        e.copy(g, u);
      }
    }
    step(g);
    ++state.steps;
    Report r;
    r.param = param;
    r.rows = m;
    r.cols = n;
    r.step = state.steps;
    r.direction = {u.data, m, n, layout};
    if (m * n != 0) {
      e.combine(before, T(1), Strided<const T>(w), T(-1), Strided<const T>(before));
      r.update_rms = double(e.norm(Strided<const T>(before))) / std::sqrt(double(m) * double(n));
    }
    r.effective_lr = double(effective_lr(o, state, lr));
    telemetry.callback(r);
  }

 private:
  typename Store::template vector<T> clean_;     ///< G with its non-finite entries zeroed (NonFinite::Zero)
  typename Store::template vector<T> report_w_;  ///< a report's W before the step
  typename Store::template vector<T> report_u_;  ///< a report's U
};

}  // namespace matopt::detail

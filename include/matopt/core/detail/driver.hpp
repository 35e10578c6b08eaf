// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: what Optimizer and DeviceOptimizer do around one parameter's step, written once (namespace detail only).
// Around the step of docs/design.md#the-step-pipeline, on every engine: the checks that read the options (row blocks,
// the scales s(m, n)), the gradient gate's outcome (skip, or G's non-finite entries zeroed into a buffer), the report
// that telemetry asks for (W before the step, U, the update's RMS), the step counter and the per-parameter learning
// rate; and the step on views: the checks of W, G and the state (check_step), the one-pass step of a normalization
// (fused_step, an engine operation) and the engine form's step (engine_step, core/detail/engine_step.hpp). The
// optimizers keep their entry points (Eigen matrices and host views; device views), their State types and, on the
// host, the preconditioners' host forms.

#include <cmath>
#include <cstddef>
#include <optional>
#include <type_traits>

#include "matopt/config.hpp"
#include "matopt/core/detail/engine_step.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/strided.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/core/step_policy.hpp"
#include "matopt/precondition/detail/fused_normalize.hpp"
#include "matopt/precondition/row_blocks.hpp"
#include "matopt/precondition/row_normalize.hpp"

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
  /// s(m, n) and decay factor, and each row block's, must be finite, Static inside SpectralCap too (before a stateful
  /// preconditioner such as SecondMoment, or the cap's power iteration, writes).
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
    if (m * n == 0) return;
    check_scale<S>(o.scaling, lr, lambda, m, n);
    if constexpr (std::is_base_of_v<RowBlocks, typename P::Options>) {
      const RowBlocks& b = o.precondition;
      if (b.blocked() && b.fits(m))
        b.for_each(m, [&](const RowSet& r) { check_scale<S>(o.scaling, lr, lambda, r.size(), n); });
    }
  }
  /// A scaling's scale and decay factor for an m x n parameter (Static's coefficients, also inside a scaling that
  /// wraps it: SpectralCap), checked before its state or W is written.
  template <class Sc>
  static void check_scale(const typename Sc::Options& so, T lr, T lambda, Index m, Index n) {
    if constexpr (has_fused_step_v<Sc>)
      Sc::coefficients(so, lr, lambda, m, n);
    else if constexpr (wraps_scaling_v<Sc>)
      check_scale<typename Sc::Wrapped>(so.inner, lr, lambda, m, n);
  }

  /// Throws, before anything is written, where W (a view laid out as `layout`), G (laid out as g_layout), the state and
  /// the options do not fit (check; the preconditioner's own check of its state, which a device keeps partly in Store's
  /// memory); returns the gradient gate's action, with G's finiteness scanned by the engine unless the caller knows it.
  template <class E, class State>
  static GradAction check_step(E& e, const O& o, const State& s, Strided<const T> w, Strided<const T> g, Layout layout,
                               Layout g_layout, T lr, T lambda, NonFinite non_finite, std::optional<bool> finite,
                               const char* where) {
    s.check_fits(where, w.rows, w.cols, layout, g.rows, g.cols, g_layout);
    check(o, w.rows, w.cols, lr, lambda, where);
    if constexpr (!Store::host_memory && engine_state_v<P>)
      P::template check_engine_state<T>(s.precondition, Index(Store::size(s.moment)), o.precondition, w.rows, w.cols,
                                        where);
    else if constexpr (has_check_state_v<P, policy_state_t<P, T>, typename P::Options>)
      P::check_state(s.precondition, o.precondition, w.rows, w.cols, where);
    return gradient_action(finite ? *finite : e.all_finite(g), non_finite, where, g.rows, g.cols);
  }

  /// Whether a step is one pass of the engine's fused_normalize_rows (precondition/detail/fused_normalize.hpp):
  /// RowNormalize or ColNormalize, a momentum buffer and a scaling whose update is W <- keep W - step D (Static).
  static constexpr bool fused_lines = M::has_buffer && is_normalize_lines_v<P> && has_fused_step_v<S>;
  /// An entry-wise preconditioner (Identity, Sign: P::direction) with a momentum buffer under Static, on the host
  /// engine: one element-wise pass (HostEngine::fused_update_entries), 1.1-2x faster than their host form
  /// (bench/results/2026-12-05-fused-views-ab.txt); a device engine runs their engine form.
  static constexpr bool fused_entries = M::has_buffer && Store::host_memory && has_fused_step_v<S> && entrywise_v<P>;
  static constexpr bool fused = fused_lines || fused_entries;
  /// The whole step in that pass, on non-empty views laid out alike with unit inner stride (ws: the host engine's
  /// scratch), with the scaling's coefficients for an m x n parameter: W's shape, or the whole matrix's where W is a
  /// slice of whole lines of it (ShardedOptimizer; the lines are normalized one by one, so a slice steps as its part).
  template <class E, class WS>
  static void fused_step(E& e, WS& ws, const O& o, Strided<T> w, Strided<const T> g, Strided<T> v, T lr, T lambda,
                         Index m, Index n) {
    const auto c = M::coefficients(o.momentum, o.nesterov);
    const auto k = S::coefficients(o.scaling, lr, lambda, m, n);
    if constexpr (fused_entries) {
      const auto direction = [](const auto& u) -> decltype(auto) { return P::direction(u); };
      e.fused_update_entries(w, g, v, FusedStep<T>{c, T(0), k.keep, k.step, k.cautious}, direction);
    } else {
      const FusedStep<T> f{c, T(o.precondition.eps), k.keep, k.step, k.cautious};
      if constexpr (P::columns)
        e.fused_normalize_rows(w.t(), Strided<const T>(g.t()), v.t(), f, ws);
      else
        e.fused_normalize_rows(w, g, v, f, ws);
    }
  }
  /// Grows ws and the engine's scratch for a step of an m x n parameter (DeviceOptimizer's make_state, and each step in
  /// case the options changed): the engine's own scratch for the one-pass step where it applies (fused), which needs
  /// no U, else the engine form's buffers (EngineStep::reserve).
  template <class E, class WS>
  static void reserve_step(E& e, WS& ws, const O& o, Index m, Index n) {
    if constexpr (fused) e.reserve(m, n);  // the CUDA engine's row sums
    else EngineStep<T, P, M, S, E, WS, O>::reserve(e, ws, o, m, n);
  }
  /// The step of a preconditioner's engine form on non-empty views laid out as `layout` (core/detail/engine_step.hpp),
  /// with the state's fields where the engine reads them: the preconditioner's State (host memory), or the device
  /// State's `moment`, fields one after another. each_block(count, f): the row blocks (EngineStep::apply).
  template <class E, class WS, class State, class EachBlock>
  static void engine_step(E& e, WS& ws, const O& o, State& s, Layout layout, Strided<T> w, Strided<const T> g,
                          Strided<T> v, T lr, T lambda, EachBlock&& each_block) {
    EngineStep<T, P, M, S, E, WS, O> step{e, o, lr, lambda, layout, s.precondition, s.scaling};
    constexpr bool in_moment = !Store::host_memory && engine_state_v<P>;
    if constexpr (in_moment) {
      Index at = 0;
      MATOPT_ASSERT(s.moment_sizes.size() <= step.fields.size());
      for (std::size_t k = 0; k < s.moment_sizes.size(); at += s.moment_sizes[k++])
        step.fields[k] = Store::ptr(s.moment) + at;
    } else if constexpr (engine_state_v<P>) {
      std::size_t k = 0;
      P::template engine_fields<T>(s.precondition, [&](auto& field) {
        MATOPT_ASSERT(k < step.fields.size());
        step.fields[k++] = field.data();
      });
    }
    if constexpr (reads_gradient_v<P>) {
      if constexpr (in_moment) step.moment = Store::ptr(s.moment);
      else step.moment = s.precondition.second_moment.data();
    }
    step.apply(ws, w, g, v, each_block);
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

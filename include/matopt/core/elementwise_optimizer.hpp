// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// ElementwiseOptimizer<T, Rule>: the element-wise optimizers (AdamW, Lion) as one skeleton and an update rule.
// What the element-wise optimizers share, written once: the options lr, weight_decay and non_finite and their checks,
// the state (the counters and the rule's buffers, in W's storage order; checkpoint fields), the argument checks and
// the gradient gate. The rule (adamw.hpp, lion.hpp: ensmallen's update policies) declares
//   name                               "matopt::AdamW": messages and checkpoints
//   Options<T>                         an aggregate: lr, weight_decay, non_finite and the rule's own fields
//   Buffers<Vec>                       its per-element buffers of type Vec (an Eigen vector on the host; a device
//                                      vector, and T* in a device's pass): each(f) visits f(name, buffer)
//   check_loaded(buffers, fail)        what loaded (host) buffers must satisfy (AdamW: v >= 0)
//   describe(o, d)                     the rule's own options (core/options.hpp; lr, weight_decay and non_finite
//                                      are declared here)
//   coefficients(o, t)                 the scalars of a step at count t (1-based), a trivially copyable struct
//   element(w, g, k, buffers...)       the update, written once: on Eigen arrays here, on one element in a device's
//                                      pass (backend/device_elementwise.hpp); Buffers' with(f) calls f(buffers...)
// Works on any Eigen matrix or vector. The device twins (backend/device_adamw.hpp, device_lion.hpp) take the same
// rule's options and state fields, so checkpoints move between the two.

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "matopt/config.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/options.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/core/step_policy.hpp"
#include "matopt/core/view.hpp"

namespace matopt {

/// An element-wise optimizer: the update rule `Rule` (AdamW, Lion) with the skeleton every element-wise optimizer
/// shares (options, state, checks, the non-finite policy, checkpoints). The same interface as Optimizer
/// (make_state, step, options, checkpoints) on any Eigen matrix or vector.
/// @tparam T float or double.
/// @tparam Rule the update rule (rules::AdamW, rules::Lion; see the file comment for what a rule declares).
template <class T, class Rule>
class ElementwiseOptimizer {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "matopt::ElementwiseOptimizer<T, Rule>: T must be float or double");

 public:
  /// The scalar type T.
  using Scalar = T;
  /// The update rule.
  using RuleType = Rule;
  /// Hyperparameters (an aggregate): lr, weight_decay, non_finite and the rule's own.
  using Options = typename Rule::template Options<T>;

  /// A per-element buffer in W's storage order.
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  /// Per-parameter state: the counters and the rule's buffers, in W's storage order.
  struct State : StateCounters, Rule::template Buffers<Vector> {
    /// Bytes held (the buffers).
    std::size_t bytes() const {
      std::size_t n = 0;
      const_cast<State*>(this)->each([&](const char*, const Vector& b) { n += std::size_t(b.size()) * sizeof(T); });
      return n;
    }
    /// Every field, for checkpoints: f(name, field).
    template <class F>
    void fields(F&& f) {
      counter_fields(f);
      this->each(f);
    }
    /// Checkpoint loading (serialization/archive.hpp): the rule's checks of what its loaded buffers mean.
    template <class Fail>
    void check_loaded(Fail&& fail) const {
      Rule::check_loaded(*this, fail);
    }
  };

  /// An optimizer with the default options.
  ElementwiseOptimizer() : ElementwiseOptimizer(Options{}) {}
  /// An optimizer with these options; throws std::invalid_argument naming the first bad one.
  explicit ElementwiseOptimizer(const Options& options) : options_(options) { validate(options_, name()); }

  /// The options; mutable between steps (schedules are the caller's), checked at each step.
  Options& options() { return options_; }
  /// The options (read-only).
  const Options& options() const { return options_; }
  /// The rule's name, such as "matopt::AdamW".
  static constexpr const char* name() { return Rule::name; }
  /// The name, as checkpoints record it.
  static std::string identity() { return name(); }

  /// The options (core/options.hpp): lr, the rule's, weight_decay, non_finite.
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("lr", o.lr, checks::Positive{}, "the learning rate");
    Rule::describe(o, d);
    detail::describe_decay_and_gate(o, d);
    d.rule([&o](std::string_view where) {
      detail::require_finite_keep(where, 1 - o.lr * o.weight_decay, o.lr, o.weight_decay);  // the rules' decoupled decay
    });
  }
  /// Throws std::invalid_argument, prefixed by `where`, naming the first bad hyperparameter.
  static void validate(const Options& o, std::string_view where) {
    detail::validate_options<ElementwiseOptimizer>(o, where);
  }

  /// Allocates the state (zero buffers) for parameter W.
  template <class WMat>
  State make_state(const Eigen::MatrixBase<WMat>& w) const {
    State s;
    s.rows = w.rows();
    s.cols = w.cols();
    s.layout = detail::layout_of_v<WMat>;
    s.each([&](const char*, Vector& b) { b.setZero(w.size()); });
    return s;
  }

  /// One step, in place. Throws std::invalid_argument (W and state unchanged) on bad options, a shape or layout
  /// mismatch, or (under NonFinite::Throw) a non-finite gradient.
  template <class WMat, class GMat>
  void step(WMat&& w, const Eigen::MatrixBase<GMat>& g, State& state) const {
    static_assert(detail::is_eigen_matrix_v<WMat>, "matopt::ElementwiseOptimizer::step: W must be an Eigen matrix");
    constexpr Layout layout = detail::layout_of_v<detail::remove_cvref_t<WMat>>;
    constexpr const char* where = Rule::name;
    validate(options_, where);
    state.check_fits(where, w.rows(), w.cols(), layout, g.rows(), g.cols(), layout);
    run(options_, detail::gradient_action(detail::all_finite(g), options_.non_finite, where, g.rows(), g.cols()), w,
        g.derived(), state);
  }
  /// The batched step with each parameter's own settings (ParamStep: lr, weight decay, non-finite policy; the same call
  /// as Optimizer's, for HybridOptimizer and AnyOptimizer): every parameter is checked before any is written, and the
  /// options' lr, weight_decay and non_finite are not read, and not changed.
  void step(const std::vector<MatrixView<T>>& params, const std::vector<MatrixView<const T>>& grads,
            const std::vector<State*>& states, const std::vector<ParamStep<T>>& settings) {
    constexpr const char* where = Rule::name;
    if (grads.size() != params.size() || states.size() != params.size() || settings.size() != params.size())
      detail::fail(where, "batched step got ", params.size(), " parameters, ", grads.size(), " gradients, ",
                   states.size(), " states and ", settings.size(), " settings");
    detail::require_distinct_states(where, states, sorted_states_);
    actions_.clear();  // keeps its capacity: no allocation after the first step
    for (std::size_t i = 0; i < params.size(); ++i) {
      const MatrixView<T>& w = params[i];
      const MatrixView<const T>& g = grads[i];
      validate(with_settings(settings[i]), where);
      detail::check_view(w);
      detail::check_view(g);
      states[i]->check_fits(where, w.rows, w.cols, w.layout, g.rows, g.cols, g.layout);
      const bool finite = settings[i].finite ? *settings[i].finite : detail::with_map(g, [](const auto& gm) {
        return detail::all_finite(gm);
      });
      actions_.push_back(detail::gradient_action(finite, settings[i].non_finite, where, g.rows, g.cols));
    }
    for (std::size_t i = 0; i < params.size(); ++i)
      detail::with_map(params[i], [&](auto& w) {
        constexpr Layout layout = detail::layout_of_v<detail::remove_cvref_t<decltype(w)>>;
        using Map = Eigen::Map<const detail::DynamicMatrix<T, layout>>;
        run(with_settings(settings[i]), actions_[i], w, Map(grads[i].data, w.rows(), w.cols()), *states[i]);
      });
  }

  /// The per-parameter lr is `lr` (the rule's per-element adaptivity aside).
  T effective_lr(const State&) const { return options_.lr; }
  /// No workspace: 0.
  std::size_t workspace_bytes() const { return 0; }

  /// Sets one option from text (keys lr, the rule's, weight_decay, non_finite); false for an unknown key.
  static bool set_option(Options& o, std::string_view key, std::string_view value) {
    return detail::set_option<ElementwiseOptimizer>(o, key, value);
  }
  /// "lr, <the rule's keys>, weight_decay, non_finite".
  static std::string option_keys() { return detail::option_keys<ElementwiseOptimizer>(); }

 private:
  /// The options with a batched step's settings in place of lr, weight_decay and non_finite.
  Options with_settings(const ParamStep<T>& k) const {
    Options o = options_;
    o.lr = k.lr;
    o.weight_decay = k.weight_decay;
    o.non_finite = k.non_finite;
    return o;
  }
  /// The checked step's action: the update with G, or with G's non-finite entries zeroed, or a skip.
  template <class WMat, class GMat>
  static void run(const Options& o, detail::GradAction action, WMat& w, const GMat& g, State& state) {
    switch (action) {
      case detail::GradAction::Apply: return update(o, w, g, state);
      case detail::GradAction::Skip: ++state.skipped; return;
      case detail::GradAction::Zero:
        update(o, w, g.unaryExpr([](T x) { return std::isfinite(x) ? x : T(0); }), state);
        ++state.zeroed;
    }
  }
  /// The rule's element update on Eigen arrays of W, G and the buffers (maps of W's shape), at the next step count.
  template <class WMat, class GExpr>
  static void update(const Options& o, WMat& w, const GExpr& g, State& s) {
    using Map = Eigen::Map<detail::DynamicMatrix<T, detail::layout_of_v<detail::remove_cvref_t<WMat>>>>;
    const auto k = Rule::coefficients(o, ++s.steps);
    s.with([&](auto&... b) { Rule::element(w.array(), g.array(), k, Map(b.data(), w.rows(), w.cols()).array()...); });
  }

  Options options_;
  std::vector<detail::GradAction> actions_;  ///< batched step: each parameter's action
  std::vector<const State*> sorted_states_;  ///< batched step: its states, sorted (require_distinct_states)
};

}  // namespace matopt

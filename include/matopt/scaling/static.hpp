// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Static scaling: W <- W (1 - lr lambda) - lr s(m, n) D, with a shape rule s and decoupled weight decay.

#include <cmath>
#include <string_view>
#include <type_traits>

#include "matopt/core/detail/errors.hpp"
#include "matopt/scaling/shape.hpp"
#include "matopt/scaling/step_rules.hpp"

namespace matopt {

/// Static scaling with decoupled weight decay: W <- W (1 - lr lambda) - lr s(m, n) D, lambda applied with the
/// unscaled lr (Moonlight's convention). StepRules (step_rules.hpp) choose the lr rule and the decay form (also
/// cautious or lr-independent) at run time (`docs/math.md#shape-rules`, `docs/math.md#weight-decay`;
/// @ref policy_scaling).
/// @tparam Rule the shape rule s(m, n) under lr_rule = preset (shape::MuonOriginal by default).
template <class Rule = shape::MuonOriginal>
struct Static {
  /// "Static".
  static constexpr const char* name() { return "Static"; }

  /// The shape rule and the run-time step rules (lr_rule, extra_scale_factor, weight_decay_method).
  struct Options : StepRules {
    Rule rule{};  ///< s(m, n) under lr_rule = preset
  };
  /// Static scaling keeps no per-parameter state.
  template <class T>
  struct State {
    /// No fields.
    template <class F>
    void fields(F&&) {}
  };

  /// The step rules' options (core/options.hpp); a shape::Function must have a function.
  template <class O, class D>
  static void describe(O& o, D& d) {
    StepRules::describe(o, d);
    if constexpr (std::is_same_v<Rule, shape::Function>)
      d.rule([&o](std::string_view where) {
        if (!o.rule.rule) detail::fail(where, "scaling.rule: shape::Function has no function set");
      });
  }

  /// s(m, n) for an m x n parameter.
  static double factor(const Options& o, Index m, Index n) { return o.factor(o.rule, m, n); }

  /// lr s(m, n).
  template <class T>
  static T effective_lr(const Options& o, const State<T>&, T lr, Index m, Index n) {
    return lr * T(factor(o, m, n));
  }

  /// The update is W <- keep W - step D (cautious: keep only where D . W >= 0): a fused kernel may apply it
  /// (see Optimizer::step).
  static constexpr bool has_fused_step = true;
  /// The update as W <- keep W - step D (see coefficients()).
  template <class T>
  struct Coefficients {
    T keep;                 ///< 1 - lr lambda (1 - lambda when the decay is independent of lr)
    T step;                 ///< lr s(m, n)
    bool cautious = false;  ///< decay only the entries where D . W >= 0
  };
  /// keep, step and cautious for an m x n parameter; throws std::invalid_argument if lr s(m, n) or keep is not finite.
  template <class T>
  static Coefficients<T> coefficients(const Options& o, T lr, T lambda, Index m, Index n) {
    const double s = factor(o, m, n);
    const T step = lr * T(s);
    if (!std::isfinite(static_cast<double>(step)))
      detail::fail("matopt::Static", "scale lr * s(m, n) is not finite for a ", m, "x", n, " parameter (s = ", s,
                   ")");
    const T keep = o.keep(lr, lambda);
    detail::require_finite_keep("matopt::Static", keep, lr, lambda);
    return {keep, step, o.cautious() && lambda != T(0)};
  }

  /// W <- W (1 - lr lambda) - lr s D (or the decay form of o.weight_decay_method), on any engine. `g` is unused here.
  template <class T, class Engine, class WMat, class DMat, class GMat>
  static void update(Engine& e, WMat& w, const DMat& d, const GMat&, State<T>&, const Options& o, T lr, T lambda) {
    const Coefficients<T> k = coefficients(o, lr, lambda, e.rows(w), e.cols(w));
    if (k.cautious)
      e.cautious_update(w, k.keep, k.step, d);
    else
      e.update(w, k.keep, k.step, d);
  }
};

}  // namespace matopt

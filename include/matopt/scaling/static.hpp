#pragma once
// Static scaling with decoupled weight decay (spec §3.1, §4):
//   W <- W (1 - lr * lambda) - lr * s(m, n) * D
// lambda is applied with the unscaled lr (Moonlight convention).

#include <cmath>
#include <string_view>
#include <type_traits>

#include "matopt/core/errors.hpp"
#include "matopt/scaling/shape.hpp"

namespace matopt {

template <class Rule = shape::MuonOriginal>
struct Static {
  static constexpr const char* name() { return "Static"; }

  struct Options {
    Rule rule{};
  };
  /// Static scaling keeps no per-parameter state.
  template <class T>
  struct State {
    template <class F>
    void fields(F&&) {}
  };

  static void validate(const Options& o, std::string_view where) {
    if constexpr (std::is_same_v<Rule, shape::Function>) {
      if (!o.rule.rule) detail::fail(where, "scaling.rule: shape::Function has no function set");
    }
  }
  static bool set_option(Options&, std::string_view, std::string_view) { return false; }
  static constexpr const char* option_keys() { return ""; }

  /// s(m, n) for an m x n parameter.
  static double factor(const Options& o, Index m, Index n) { return o.rule(m, n); }

  template <class T>
  static T effective_lr(const Options& o, const State<T>&, T lr, Index m, Index n) {
    return lr * T(factor(o, m, n));
  }

  /// The update is W <- keep W - step D: a fused kernel may apply it (see Optimizer::step).
  static constexpr bool has_fused_step = true;
  template <class T>
  struct Coefficients {
    T keep;  ///< 1 - lr lambda
    T step;  ///< lr s(m, n)
  };
  template <class T>
  static Coefficients<T> coefficients(const Options& o, T lr, T lambda, Index m, Index n) {
    const double s = factor(o, m, n);
    const T step = lr * T(s);
    if (!std::isfinite(static_cast<double>(step)))
      detail::fail("matopt::Static", "scale lr * s(m, n) is not finite for a ", m, "x", n, " parameter (s = ", s,
                   ")");
    return {T(1) - lr * lambda, step};
  }

  /// W <- W (1 - lr lambda) - lr s D. `g` (the raw gradient) is unused here.
  template <class T, class WMat, class DExpr, class GMat>
  static void update(WMat& w, const DExpr& d, const GMat&, State<T>&, const Options& o, T lr, T lambda) {
    const Coefficients<T> k = coefficients(o, lr, lambda, w.rows(), w.cols());
    if (lambda != T(0))
      w = k.keep * w - k.step * d;
    else
      w -= k.step * d;
  }
};

}  // namespace matopt

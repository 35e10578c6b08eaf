// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Lion (arXiv 2302.06675), an alternative to AdamW for the parameters that are not hidden matrices.
// Lion (Chen et al., arXiv 2302.06675; google/automl lion_pytorch.py, = lucidrains/lion-pytorch update_fn) for
// the parameters that are not hidden matrices, in place of AdamW (docs/math.md#lion):
//   W <- W (1 - lr lambda);  W <- W - lr sign(b1 m + (1 - b1) g);  m <- b2 m + (1 - b2) g
// sign(0) = 0. The paper's advice: lr 3-10x smaller than AdamW's and lambda 3-10x larger (the decay is lr lambda).
// Works on any Eigen matrix or vector; the state follows W's storage order. A HybridOptimizer takes it as its
// second optimizer: HybridOptimizer<T>(matrix, make_optimizer<T>("lion")).

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include <Eigen/Core>

#include "matopt/core/errors.hpp"
#include "matopt/core/parse.hpp"
#include "matopt/core/step_policy.hpp"
#include "matopt/core/traits.hpp"

namespace matopt {

/// Lion (Chen et al., arXiv 2302.06675; google/automl lion_pytorch.py): W <- W (1 - lr lambda),
/// W <- W - lr sign(b1 m + (1 - b1) g), m <- b2 m + (1 - b2) g, with sign(0) = 0. For the parameters that are not
/// hidden matrices, in place of AdamW (the paper advises an lr 3-10x smaller and a lambda 3-10x larger). Any Eigen
/// matrix or vector; the same interface as AdamW.
/// @tparam T float or double.
template <class T>
class Lion {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "matopt::Lion<T>: T must be float or double");

 public:
  /// The scalar type T.
  using Scalar = T;

  /// Hyperparameters (an aggregate).
  struct Options {
    /// Learning rate, > 0 (default 1e-4).
    T lr = T(1e-4);
    T beta1 = T(0.9);   ///< interpolation of the update direction
    T beta2 = T(0.99);  ///< momentum decay
    /// Decoupled weight decay lambda, >= 0 (default 0).
    T weight_decay = T(0);
    NonFinite non_finite = NonFinite::Throw;  ///< what a gradient with an inf or NaN does
  };

  /// Per-parameter state: the momentum, in W's storage order.
  struct State {
    /// Rows of the parameter this state was made for.
    Index rows = 0;
    /// Columns of the parameter this state was made for.
    Index cols = 0;
    /// Storage order of that parameter.
    Layout layout = Layout::ColMajor;
    std::int64_t steps = 0;    ///< steps taken
    std::int64_t skipped = 0;  ///< steps skipped for a non-finite gradient (NonFinite::Skip)
    std::int64_t zeroed = 0;   ///< steps taken with non-finite entries of G zeroed (NonFinite::Zero)
    Eigen::Matrix<T, Eigen::Dynamic, 1> m;  ///< momentum, in W's storage order
    /// Bytes held.
    std::size_t bytes() const { return static_cast<std::size_t>(m.size()) * sizeof(T); }
    /// Every field, for checkpoints: f(name, field).
    template <class F>
    void fields(F&& f) {
      f("rows", rows);
      f("cols", cols);
      f("layout", layout);
      f("steps", steps);
      f("skipped", skipped);
      f("zeroed", zeroed);
      f("m", m);
    }
  };

  /// An optimizer with the default options.
  Lion() : Lion(Options{}) {}
  /// An optimizer with these options; throws std::invalid_argument naming the first bad one.
  explicit Lion(const Options& options) : options_(options) { validate(options_, name()); }

  /// The options; mutable between steps (schedules are the caller's), checked at each step.
  Options& options() { return options_; }
  /// The options (read-only).
  const Options& options() const { return options_; }
  /// "matopt::Lion".
  static constexpr const char* name() { return "matopt::Lion"; }
  /// The name, as checkpoints record it.
  static std::string identity() { return name(); }

  /// Throws std::invalid_argument, prefixed by `where`, naming the first bad hyperparameter.
  static void validate(const Options& o, std::string_view where) {
    detail::require_positive(where, "lr", o.lr);
    detail::require_unit_interval(where, "beta1", o.beta1);
    detail::require_unit_interval(where, "beta2", o.beta2);
    detail::require_nonnegative(where, "weight_decay", o.weight_decay);
  }

  /// Allocates the state (zero momentum) for parameter W.
  template <class WMat>
  State make_state(const Eigen::MatrixBase<WMat>& w) const {
    State s;
    s.rows = w.rows();
    s.cols = w.cols();
    s.layout = detail::layout_of_v<WMat>;
    s.m.setZero(w.size());
    return s;
  }

  /// One step, in place. Throws std::invalid_argument (W and state unchanged) on bad options, a shape or layout
  /// mismatch, or (under NonFinite::Throw) a non-finite gradient.
  template <class WMat, class GMat>
  void step(WMat&& w, const Eigen::MatrixBase<GMat>& g, State& state) const {
    static_assert(detail::is_eigen_matrix_v<WMat>, "matopt::Lion::step: W must be an Eigen matrix");
    constexpr Layout layout = detail::layout_of_v<detail::remove_cvref_t<WMat>>;
    constexpr const char* where = "matopt::Lion";
    validate(options_, where);
    if (g.rows() != w.rows() || g.cols() != w.cols())
      detail::fail(where, "G is ", detail::shape_string(g.rows(), g.cols()), " but W is ",
                   detail::shape_string(w.rows(), w.cols()));
    if (state.rows != w.rows() || state.cols != w.cols())
      detail::fail(where, "state was made for a ", detail::shape_string(state.rows, state.cols),
                   " parameter but W is ", detail::shape_string(w.rows(), w.cols()));
    if (!detail::same_layout(state.layout, layout, w.rows(), w.cols()))
      detail::fail(where, "state was made for a ", detail::layout_name(state.layout), " W but W is ",
                   detail::layout_name(layout));
    if (detail::all_finite(g)) return update(w, g.derived(), state);
    switch (options_.non_finite) {
      case NonFinite::Skip: ++state.skipped; return;
      case NonFinite::Zero:
        update(w, g.unaryExpr([](T x) { return std::isfinite(x) ? x : T(0); }), state);
        ++state.zeroed;
        return;
      default:
        detail::fail(where, "G (", detail::shape_string(g.rows(), g.cols()),
                     ") contains a non-finite value; W and state are unchanged (options.non_finite = throw)");
    }
  }

  /// Lion's per-parameter lr is `lr` (every entry moves by lr, decay aside).
  T effective_lr(const State&) const { return options_.lr; }
  /// No workspace: 0.
  std::size_t workspace_bytes() const { return 0; }

  /// Sets one option from text (keys lr, beta1, beta2, weight_decay, non_finite); false for an unknown key.
  static bool set_option(Options& o, std::string_view key, std::string_view value) {
    if (key == "lr") o.lr = T(detail::parse_double(key, value));
    else if (key == "beta1") o.beta1 = T(detail::parse_double(key, value));
    else if (key == "beta2") o.beta2 = T(detail::parse_double(key, value));
    else if (key == "weight_decay") o.weight_decay = T(detail::parse_double(key, value));
    else if (key == "non_finite") o.non_finite = detail::parse_non_finite(key, value);
    else return false;
    return true;
  }
  /// "lr, beta1, beta2, weight_decay, non_finite".
  static std::string option_keys() { return "lr, beta1, beta2, weight_decay, non_finite"; }

 private:
  /// The update on checked arguments; `g` may be an expression (NonFinite::Zero).
  template <class WMat, class GExpr>
  void update(WMat& w, const GExpr& g, State& state) const {
    constexpr Layout layout = detail::layout_of_v<detail::remove_cvref_t<WMat>>;
    const Options& o = options_;
    Eigen::Map<detail::DynamicMatrix<T, layout>> m(state.m.data(), w.rows(), w.cols());
    if (o.weight_decay != T(0)) w *= T(1) - o.lr * o.weight_decay;
    w -= o.lr * (o.beta1 * m + (T(1) - o.beta1) * g).array().sign().matrix();
    m = o.beta2 * m + (T(1) - o.beta2) * g;
    ++state.steps;
  }

  Options options_;
};

}  // namespace matopt

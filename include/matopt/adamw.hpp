// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// AdamW (arXiv 1711.05101) for the parameters that are not hidden matrices: biases, norms, embeddings, heads.
// AdamW (Loshchilov & Hutter, arXiv 1711.05101) for the parameters that are not hidden matrices: biases,
// norms, embeddings, output heads (docs/math.md#presets). The same step as torch.optim.AdamW:
//   W <- W (1 - lr lambda);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
//   W <- W - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Works on any Eigen matrix or vector; the state follows W's storage order.

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
namespace detail {

/// AdamW's scalars at step t (1-based): the bias corrections folded into the step size and the denominator,
/// and the decoupled decay factor. Shared by AdamW::update and the device backends' element update.
template <class T>
struct AdamWCoefficients {
  T beta1, beta2, eps, keep, step_size, inv_sqrt_bc2;
  template <class Options>
  static AdamWCoefficients at(const Options& o, std::int64_t t) {
    const T bc1 = T(1) - T(std::pow(static_cast<double>(o.beta1), static_cast<double>(t)));
    const T bc2 = T(1) - T(std::pow(static_cast<double>(o.beta2), static_cast<double>(t)));
    return {o.beta1, o.beta2, o.eps, T(1) - o.lr * o.weight_decay, o.lr / bc1, T(1) / std::sqrt(bc2)};
  }
};

}  // namespace detail

/// AdamW (Loshchilov & Hutter, arXiv 1711.05101), the step of torch.optim.AdamW, for parameters that are not hidden
/// matrices (biases, norms, embeddings, output heads): W <- W (1 - lr lambda), m <- b1 m + (1 - b1) g,
/// v <- b2 v + (1 - b2) g^2, W <- W - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps). Any Eigen matrix or
/// vector; the same interface as Optimizer (make_state, step, options, checkpoints).
/// @tparam T float or double.
template <class T>
class AdamW {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "matopt::AdamW<T>: T must be float or double");

 public:
  /// The scalar type T.
  using Scalar = T;

  /// Hyperparameters (an aggregate).
  struct Options {
    /// Learning rate, > 0 (default 3e-4).
    T lr = T(3e-4);
    /// First-moment coefficient, in [0, 1) (default 0.9).
    T beta1 = T(0.9);
    /// Second-moment coefficient, in [0, 1) (default 0.95; torch's default is 0.999).
    T beta2 = T(0.95);
    /// Added to the denominator, > 0 (default 1e-8).
    T eps = T(1e-8);
    /// Decoupled weight decay lambda, >= 0 (default 0).
    T weight_decay = T(0);
    NonFinite non_finite = NonFinite::Throw;  ///< what a gradient with an inf or NaN does
  };

  /// Per-parameter state: the two moments, in W's storage order.
  struct State {
    /// Rows of the parameter this state was made for.
    Index rows = 0;
    /// Columns of the parameter this state was made for.
    Index cols = 0;
    /// Storage order of that parameter.
    Layout layout = Layout::ColMajor;
    std::int64_t steps = 0;    ///< steps taken (the bias corrections' t)
    std::int64_t skipped = 0;  ///< steps skipped for a non-finite gradient (NonFinite::Skip)
    std::int64_t zeroed = 0;   ///< steps taken with non-finite entries of G zeroed (NonFinite::Zero)
    /// First and second moments, in W's storage order.
    /// @{
    Eigen::Matrix<T, Eigen::Dynamic, 1> m, v;  ///< first and second moments, in W's storage order
    /// @}
    /// Bytes held.
    std::size_t bytes() const { return static_cast<std::size_t>(m.size() + v.size()) * sizeof(T); }
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
      f("v", v);
    }
    /// Checkpoint loading (serialization/archive.hpp): the second moment is an EMA of squares.
    template <class Fail>
    void check_loaded(Fail&& fail) const {
      if ((v.array() < T(0)).any()) fail("field 'v' (AdamW's second moment) has a negative entry");
    }
  };

  /// An optimizer with the default options.
  AdamW() : AdamW(Options{}) {}
  /// An optimizer with these options; throws std::invalid_argument naming the first bad one.
  explicit AdamW(const Options& options) : options_(options) { validate(options_, name()); }

  /// The options; mutable between steps (schedules are the caller's), checked at each step.
  Options& options() { return options_; }
  /// The options (read-only).
  const Options& options() const { return options_; }
  /// "matopt::AdamW".
  static constexpr const char* name() { return "matopt::AdamW"; }
  /// The name, as checkpoints record it.
  static std::string identity() { return name(); }

  /// Throws std::invalid_argument, prefixed by `where`, naming the first bad hyperparameter.
  static void validate(const Options& o, std::string_view where) {
    detail::require_positive(where, "lr", o.lr);
    detail::require_unit_interval(where, "beta1", o.beta1);
    detail::require_unit_interval(where, "beta2", o.beta2);
    detail::require_positive(where, "eps", o.eps);
    detail::require_nonnegative(where, "weight_decay", o.weight_decay);
  }

  /// Allocates the state (zero moments) for parameter W.
  template <class WMat>
  State make_state(const Eigen::MatrixBase<WMat>& w) const {
    State s;
    s.rows = w.rows();
    s.cols = w.cols();
    s.layout = detail::layout_of_v<WMat>;
    s.m.setZero(w.size());
    s.v.setZero(w.size());
    return s;
  }

  /// One step, in place. Throws std::invalid_argument (W and state unchanged) on bad options, a shape or layout
  /// mismatch, or (under NonFinite::Throw) a non-finite gradient.
  template <class WMat, class GMat>
  void step(WMat&& w, const Eigen::MatrixBase<GMat>& g, State& state) const {
    static_assert(detail::is_eigen_matrix_v<WMat>, "matopt::AdamW::step: W must be an Eigen matrix");
    constexpr Layout layout = detail::layout_of_v<detail::remove_cvref_t<WMat>>;
    constexpr const char* where = "matopt::AdamW";
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

  /// AdamW's per-parameter lr is `lr` (its per-element adaptivity aside).
  T effective_lr(const State&) const { return options_.lr; }
  /// No workspace: 0.
  std::size_t workspace_bytes() const { return 0; }

  /// Sets one option from text (keys lr, beta1, beta2, eps, weight_decay, non_finite); false for an unknown key.
  static bool set_option(Options& o, std::string_view key, std::string_view value) {
    if (key == "lr") o.lr = T(detail::parse_double(key, value));
    else if (key == "beta1") o.beta1 = T(detail::parse_double(key, value));
    else if (key == "beta2") o.beta2 = T(detail::parse_double(key, value));
    else if (key == "eps") o.eps = T(detail::parse_double(key, value));
    else if (key == "weight_decay") o.weight_decay = T(detail::parse_double(key, value));
    else if (key == "non_finite") o.non_finite = detail::parse_non_finite(key, value);
    else return false;
    return true;
  }
  /// "lr, beta1, beta2, eps, weight_decay, non_finite".
  static std::string option_keys() { return "lr, beta1, beta2, eps, weight_decay, non_finite"; }

 private:
  /// The update on checked arguments; `g` may be an expression (NonFinite::Zero).
  template <class WMat, class GExpr>
  void update(WMat& w, const GExpr& g, State& state) const {
    constexpr Layout layout = detail::layout_of_v<detail::remove_cvref_t<WMat>>;
    const auto k = detail::AdamWCoefficients<T>::at(options_, ++state.steps);
    using Map = Eigen::Map<detail::DynamicMatrix<T, layout>>;
    Map m(state.m.data(), w.rows(), w.cols()), v(state.v.data(), w.rows(), w.cols());
    m = k.beta1 * m + (T(1) - k.beta1) * g;
    v = k.beta2 * v + (T(1) - k.beta2) * g.cwiseAbs2();
    if (options_.weight_decay != T(0)) w *= k.keep;
    w.array() -= k.step_size * m.array() / (v.array().sqrt() * k.inv_sqrt_bc2 + k.eps);
  }

  Options options_;
};

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// AdamW (arXiv 1711.05101) for the parameters that are not hidden matrices: biases, norms, embeddings, heads.
// The update rule of an ElementwiseOptimizer (core/elementwise_optimizer.hpp), which supplies the rest.

#include <cmath>
#include <cstdint>
#include <string_view>

#include <Eigen/Core>

#include "matopt/core/elementwise_optimizer.hpp"

namespace matopt {
namespace detail {

/// AdamW's scalars at step t (1-based): the bias corrections folded into the step size and the denominator,
/// and the decoupled decay factor (decay: lambda != 0).
template <class T>
struct AdamWCoefficients {
  T beta1, beta2, eps, keep, step_size, inv_sqrt_bc2;
  bool decay;
};

}  // namespace detail

namespace rules {
/// AdamW's update rule (torch.optim.AdamW): two moments m and v.
struct AdamW {
  /// "matopt::AdamW".
  static constexpr const char* name = "matopt::AdamW";
  /// Hyperparameters (an aggregate).
  template <class T>
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
  /// The first and second moments m and v in W's storage order: Eigen vectors on the host, device vectors on a
  /// device (backend/device_adamw.hpp).
  template <class Vec>
  struct Buffers {
    /// First and second moments, in W's storage order.
    /// @{
    Vec m, v;
    /// @}
    /// f(name, buffer) for each buffer: the checkpoint fields "m", "v".
    template <class F>
    void each(F&& f) {
      f("m", m);
      f("v", v);
    }
    /// f(m, v): every buffer, for the element update.
    MATOPT_EXEC_CHECK_DISABLE
    template <class F>
    MATOPT_HOST_DEVICE void with(F&& f) {
      f(m, v);
    }
  };
  /// Checkpoint loading (the host buffers): the second moment is an EMA of squares.
  template <class Vec, class Fail>
  static void check_loaded(const Buffers<Vec>& b, Fail&& fail) {
    if ((b.v.array() < typename Vec::Scalar(0)).any()) fail("field 'v' (AdamW's second moment) has a negative entry");
  }
  /// The rule's options (core/options.hpp): beta1, beta2, eps (between lr and weight_decay in the optimizer's).
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("beta1", o.beta1, checks::UnitInterval{}, "AdamW's beta1");
    d("beta2", o.beta2, checks::UnitInterval{}, "AdamW's beta2");
    d("eps", o.eps, checks::Positive{}, "AdamW's epsilon");
  }

  /// The scalars of step t (bias corrections in double, as torch's).
  template <class T>
  static detail::AdamWCoefficients<T> coefficients(const Options<T>& o, std::int64_t t) {
    const T bc1 = T(1) - T(std::pow(static_cast<double>(o.beta1), static_cast<double>(t)));
    const T bc2 = T(1) - T(std::pow(static_cast<double>(o.beta2), static_cast<double>(t)));
    return {o.beta1, o.beta2, o.eps, T(1) - o.lr * o.weight_decay, o.lr / bc1, T(1) / std::sqrt(bc2),
            o.weight_decay != T(0)};
  }
  /// The update, written once: w, g, m, v are Eigen arrays (the host's update) or one element each (a device's
  /// pass, backend/device_elementwise.hpp).
  MATOPT_EXEC_CHECK_DISABLE
  template <class W, class G, class T, class M, class V>
  MATOPT_HOST_DEVICE static void element(W&& w, const G& g, const detail::AdamWCoefficients<T>& k, M&& m, V&& v) {
    using std::sqrt;
    m = k.beta1 * m + (T(1) - k.beta1) * g;
    v = k.beta2 * v + (T(1) - k.beta2) * (g * g);
    if (k.decay) w *= k.keep;
    w -= k.step_size * m / (sqrt(v) * k.inv_sqrt_bc2 + k.eps);
  }
};
}  // namespace rules

/// AdamW (Loshchilov & Hutter, arXiv 1711.05101), the step of torch.optim.AdamW, for parameters that are not hidden
/// matrices (biases, norms, embeddings, output heads): W <- W (1 - lr lambda), m <- b1 m + (1 - b1) g,
/// v <- b2 v + (1 - b2) g^2, W <- W - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps). Any Eigen matrix or
/// vector; the same interface as Optimizer (make_state, step, options, checkpoints). See `docs/math.md#presets`.
template <class T>
using AdamW = ElementwiseOptimizer<T, rules::AdamW>;

}  // namespace matopt

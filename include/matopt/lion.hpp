// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Lion (arXiv 2302.06675), an alternative to AdamW for the parameters that are not hidden matrices.
// The update rule of an ElementwiseOptimizer (core/elementwise_optimizer.hpp), which supplies the rest. A
// HybridOptimizer takes it as its second optimizer: HybridOptimizer<T>(matrix, make_optimizer<T>("lion")).

#include <cstdint>
#include <string_view>

#include <Eigen/Core>

#include "matopt/core/detail/norms.hpp"
#include "matopt/core/elementwise_optimizer.hpp"

namespace matopt {

namespace rules {
/// Lion's update rule (google/automl lion_pytorch.py): one momentum m.
struct Lion {
  /// "matopt::Lion".
  static constexpr const char* name = "matopt::Lion";
  /// Hyperparameters (an aggregate).
  template <class T>
  struct Options {
    /// Learning rate, > 0 (default 1e-4).
    T lr = T(1e-4);
    T beta1 = T(0.9);   ///< interpolation of the update direction
    T beta2 = T(0.99);  ///< momentum decay
    /// Decoupled weight decay lambda, >= 0 (default 0).
    T weight_decay = T(0);
    NonFinite non_finite = NonFinite::Throw;  ///< what a gradient with an inf or NaN does
  };
  /// The momentum m in W's storage order: an Eigen vector on the host, a device vector on a device
  /// (backend/device_lion.hpp).
  template <class Vec>
  struct Buffers {
    Vec m;  ///< momentum, in W's storage order
    /// f(name, buffer) for each buffer: the checkpoint field "m".
    template <class F>
    void each(F&& f) {
      f("m", m);
    }
    /// f(m), for the element update.
    MATOPT_EXEC_CHECK_DISABLE
    template <class F>
    MATOPT_HOST_DEVICE void with(F&& f) {
      f(m);
    }
  };
  /// Checkpoint loading: any finite momentum is valid.
  template <class Vec, class Fail>
  static void check_loaded(const Buffers<Vec>&, Fail&&) {}
  /// The rule's options (core/options.hpp): beta1, beta2 (between lr and weight_decay in the optimizer's).
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("beta1", o.beta1, checks::UnitInterval{}, "Lion's interpolation of the direction");
    d("beta2", o.beta2, checks::UnitInterval{}, "Lion's momentum decay");
  }

  /// A step's scalars.
  template <class T>
  struct Coefficients {
    T lr;        ///< the learning rate
    T keep;      ///< 1 - lr lambda
    T beta1;     ///< the interpolation of the direction
    T beta2;     ///< the momentum decay
    bool decay;  ///< lambda != 0
  };
  /// The scalars of a step (t unused: Lion has no bias correction).
  template <class T>
  static Coefficients<T> coefficients(const Options<T>& o, std::int64_t) {
    return {o.lr, T(1) - o.lr * o.weight_decay, o.beta1, o.beta2, o.weight_decay != T(0)};
  }
  /// The update, written once: w, g, m are Eigen arrays (the host's update) or one element each (a device's pass,
  /// backend/device_elementwise.hpp).
  MATOPT_EXEC_CHECK_DISABLE
  template <class W, class G, class T, class M>
  MATOPT_HOST_DEVICE static void element(W&& w, const G& g, const Coefficients<T>& k, M&& m) {
    if (k.decay) w *= k.keep;
    w -= k.lr * detail::sign_of(k.beta1 * m + (T(1) - k.beta1) * g);
    m = k.beta2 * m + (T(1) - k.beta2) * g;
  }
};
}  // namespace rules

/// Lion (Chen et al., arXiv 2302.06675; google/automl lion_pytorch.py): W <- W (1 - lr lambda),
/// W <- W - lr sign(b1 m + (1 - b1) g), m <- b2 m + (1 - b2) g, with sign(0) = 0. For the parameters that are not
/// hidden matrices, in place of AdamW (the paper advises an lr 3-10x smaller and a lambda 3-10x larger). Any Eigen
/// matrix or vector; the same interface as AdamW. google/automl's lion_pytorch.py step is lucidrains/lion-pytorch's
/// update_fn; see `docs/math.md#lion`.
template <class T>
using Lion = ElementwiseOptimizer<T, rules::Lion>;

}  // namespace matopt

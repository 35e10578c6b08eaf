// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// DeviceLion: Lion on matrices in device memory, with Thrust alone (any Thrust device system).
// DeviceLion<T>: Lion (lion.hpp; Chen et al., arXiv 2302.06675) on parameters in device memory, for the
// parameters that are not hidden matrices when the weights live on the device, in place of DeviceAdamW: a
// DeviceElementwise (backend/device_elementwise.hpp) of Lion's rule, whose element update is the host's:
//   W <- W (1 - lr lambda);  W <- W - lr sign(b1 m + (1 - b1) g);  m <- b2 m + (1 - b2) g
//
//   matopt::DeviceLion<float> lion;                  // Lion<float>::Options; or (options, stream) on CUDA
//   auto state = lion.make_state(bias);
//   lion.step(bias, grad, state);

#include <cstdint>

#include "matopt/backend/device_elementwise.hpp"
#include "matopt/lion.hpp"

namespace matopt {
namespace detail {

/// One Lion element update (rules::Lion::element, as on the host); `zero` maps a non-finite g to 0.
template <class T>
struct LionOp {
  T* w;
  const T* g;
  T* m;
  T lr, keep, beta1, beta2;
  bool decay, zero;
  MATOPT_HOST_DEVICE void operator()(Index i) const {
    T gi = g[i];
    if (zero && !finite_value(gi)) gi = T(0);
    rules::Lion::element(w[i], gi, m[i], lr, keep, beta1, beta2, decay);
  }
};
/// Lion's pass: LionOp (no bias correction: t unused).
template <>
struct DeviceRule<rules::Lion> {
  template <class T, class Buffers, class Options>
  static LionOp<T> op(T* w, const T* g, Buffers& b, const Options& o, std::int64_t, bool decay, bool zero) {
    return {w, g, raw(b.m), o.lr, T(1) - o.lr * o.weight_decay, o.beta1, o.beta2, decay, zero};
  }
};

}  // namespace detail

/// Lion (lion.hpp) stepping matrices in device memory with Thrust alone: the host Lion's options, validation and
/// update, element-wise on the device. Checkpoints are interchangeable with the host Lion's.
template <class T>
using DeviceLion = DeviceElementwise<T, rules::Lion>;

}  // namespace matopt

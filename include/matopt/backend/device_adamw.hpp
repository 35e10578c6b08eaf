// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// DeviceAdamW: AdamW on matrices in device memory, with Thrust alone (any Thrust device system).
// DeviceAdamW<T>: AdamW (adamw.hpp; Loshchilov & Hutter, arXiv 1711.05101) on parameters in device memory, for the
// parameters that are not hidden matrices (biases, norms, embeddings, heads: docs/math.md#presets) when the weights
// live on the device: a DeviceElementwise (backend/device_elementwise.hpp) of AdamW's rule, whose element update is
// the host's (bias corrections in double, as on the host):
//   W <- W (1 - lr lambda);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
//   W <- W - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//
//   matopt::DeviceAdamW<float> adamw;                 // AdamW<float>::Options; or (options, stream) on CUDA
//   auto state = adamw.make_state(bias);               // DeviceMatrix<float> or DeviceMatrixView
//   adamw.step(bias, grad, state);

#include <cmath>
#include <cstdint>

#include "matopt/adamw.hpp"
#include "matopt/backend/device_elementwise.hpp"

namespace matopt {
namespace detail {

/// One AdamW element update (rules::AdamW::element, as on the host); `zero` maps a non-finite g to 0.
template <class T>
struct AdamWOp {
  T* w;
  const T* g;
  T* m;
  T* v;
  AdamWCoefficients<T> k;
  bool decay, zero;
  MATOPT_HOST_DEVICE void operator()(Index i) const {
    T gi = g[i];
    if (zero && !finite_value(gi)) gi = T(0);
    rules::AdamW::element(w[i], gi, m[i], v[i], k, decay);
  }
};
/// AdamW's pass: AdamWOp at step t.
template <>
struct DeviceRule<rules::AdamW> {
  template <class T, class Buffers, class Options>
  static AdamWOp<T> op(T* w, const T* g, Buffers& b, const Options& o, std::int64_t t, bool decay, bool zero) {
    return {w, g, raw(b.m), raw(b.v), AdamWCoefficients<T>::at(o, t), decay, zero};
  }
};

}  // namespace detail

/// AdamW (adamw.hpp) stepping matrices in device memory with Thrust alone: the host AdamW's options, validation
/// and update, element-wise on the device. Checkpoints are interchangeable with the host AdamW's.
template <class T>
using DeviceAdamW = DeviceElementwise<T, rules::AdamW>;

}  // namespace matopt

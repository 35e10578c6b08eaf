// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// DeviceAdamW: AdamW on matrices in device memory, with Thrust alone (any Thrust device system).
// DeviceAdamW<T>: AdamW (adamw.hpp; Loshchilov & Hutter, arXiv 1711.05101) on parameters in device memory, for the
// parameters that are not hidden matrices (biases, norms, embeddings, heads: docs/math.md#presets) when the weights
// live on the device: a DeviceElementwise (backend/device_elementwise.hpp) of AdamW's rule, whose coefficients
// and element update are the host's (bias corrections in double, as on the host):
//   W <- W (1 - lr lambda);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
//   W <- W - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//
//   matopt::DeviceAdamW<float> adamw;                 // AdamW<float>::Options; or (options, stream) on CUDA
//   auto state = adamw.make_state(bias);               // DeviceMatrix<float> or DeviceMatrixView
//   adamw.step(bias, grad, state);

#include "matopt/adamw.hpp"
#include "matopt/backend/device_elementwise.hpp"

namespace matopt {

/// AdamW (adamw.hpp) stepping matrices in device memory with Thrust alone: the host AdamW's options, validation
/// and update, element-wise on the device. Checkpoints are interchangeable with the host AdamW's.
template <class T>
using DeviceAdamW = DeviceElementwise<T, rules::AdamW>;

}  // namespace matopt

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

#include "matopt/backend/device_elementwise.hpp"
#include "matopt/lion.hpp"

namespace matopt {

/// Lion (lion.hpp) stepping matrices in device memory with Thrust alone: the host Lion's options, validation and
/// update, element-wise on the device. Checkpoints are interchangeable with the host Lion's.
template <class T>
using DeviceLion = DeviceElementwise<T, rules::Lion>;

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// cuda::Optimizer: any matopt optimizer stepping device matrices with cuda::Engine.
// cuda::Optimizer<HostOptimizer>: any matopt optimizer (a preset or a composition) stepping device matrices
// with cuda::Engine. Options, defaults, validation and every scalar rule are the host optimizer's
// (backend/device_optimizer.hpp); the precision of the Newton–Schulz products is the engine's:
//
//   matopt::cuda::Optimizer<matopt::Muon<float>> opt(o, matopt::cuda::Engine(matopt::cuda::Precision::BF16));
//   auto state = opt.make_state(w);   // sizes the engine's scratch and the workspace: step allocates nothing
//   opt.step(w, g, state);            // queued on opt.engine().stream()

#include "matopt/backend/cuda/engine.cuh"
#include "matopt/backend/device_optimizer.hpp"

namespace matopt::cuda {

/// Any matopt optimizer (a preset or a composition) stepping device matrices with cuda::Engine: the host optimizer's
/// options, defaults, validation and scalar rules; the precision of the Newton–Schulz products is the engine's.
template <class HostOptimizer>
using Optimizer = DeviceOptimizer<HostOptimizer, Engine>;

}  // namespace matopt::cuda

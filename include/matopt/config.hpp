// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Build-wide macros (MATOPT_HOST_DEVICE, MATOPT_ASSERT) and the basic types Index and Layout.
// Build-wide macros and basic types of matopt.

#include <cstddef>
#include <cstdint>

#include <Eigen/Core>

/// Functions callable from host and device code (Thrust/CUDA backends); empty on a plain host build.
#if defined(__CUDACC__)
#define MATOPT_HOST_DEVICE __host__ __device__
#define MATOPT_EXEC_CHECK_DISABLE _Pragma("nv_exec_check_disable")
#else
#define MATOPT_HOST_DEVICE
/// Before a MATOPT_HOST_DEVICE function template written once for host types (Eigen arrays, host-only under nvcc)
/// and device types (one element): nvcc checks each instantiation only where it runs (nv_exec_check_disable, as
/// Thrust's own host-device templates); empty on a plain host build.
#define MATOPT_EXEC_CHECK_DISABLE
#endif

/// Internal invariants (never user input: that throws std::invalid_argument). Off with NDEBUG.
#include <cassert>
#define MATOPT_ASSERT(cond) assert(cond)

/// The matopt library: matrix optimizers composed as Momentum -> Preconditioner -> Scaling policies (Optimizer),
/// their published presets (presets.hpp), AdamW and Lion for the other parameters, device and distributed back ends,
/// and diagnostics. Everything in a nested `detail` namespace is internal.
namespace matopt {

/// Index type for shapes, the same as Eigen's.
using Index = Eigen::Index;

/// Storage order of a matrix in memory. The mathematics is defined on the logical matrix; every
/// storage order gives the same numbers (`docs/math.md#conventions`).
/// `ColMajor` is Eigen's default; `RowMajor` is PyTorch's, and the default of MatrixView.
enum class Layout { ColMajor, RowMajor };

}  // namespace matopt

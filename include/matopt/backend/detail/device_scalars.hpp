// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: scalar helpers of device code, shared by the Thrust engine and the CUDA kernels (namespace detail only).

#include <cfloat>

#include "matopt/config.hpp"

namespace matopt::detail {

/// Per-type limits usable in device code (std::numeric_limits is not, without relaxed constexpr).
template <class T>
struct DeviceLimits;
template <>
struct DeviceLimits<float> {
  static MATOPT_HOST_DEVICE float min() { return FLT_MIN; }
  static MATOPT_HOST_DEVICE float max() { return FLT_MAX; }
};
template <>
struct DeviceLimits<double> {
  static MATOPT_HOST_DEVICE double min() { return DBL_MIN; }
  static MATOPT_HOST_DEVICE double max() { return DBL_MAX; }
};

/// x is neither inf nor NaN (device-safe).
template <class T>
MATOPT_HOST_DEVICE bool finite_value(T x) {
  return x - x == T(0);
}

}  // namespace matopt::detail

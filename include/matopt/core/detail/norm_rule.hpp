// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: the overflow-safe norm's rule and the scalar helpers it needs, written once for host and device code
/// (namespace detail only).
// Euclidean norms that neither overflow nor underflow (docs/reliability.md). The fast path is the plain sum of
// squares; only when it leaves the normal range (inf for entries beyond sqrt(max), 0 or subnormal for entries below
// sqrt(min)) is the norm recomputed as a * ||x / a|| with a = max |x_i|, over that vector only. Zero vectors take
// that path too and give 0. `rescaled` is the rule over passes each engine supplies: the host's Eigen expressions
// (norms.hpp), the Thrust engine's loops and reductions, the CUDA kernels' group reductions.

#include <cfloat>
#include <cmath>
#include <type_traits>

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

/// sign(x) = (x > 0) - (x < 0), NaN for NaN (as Eigen's scalar sign and torch.sign): sign(0) = 0. Host and device
/// code: a rule's element update (rules::Lion), the device engines' sign, and norms.hpp's over Eigen expressions.
template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
MATOPT_HOST_DEVICE T sign_of(T x) {
  return x != x ? x : T((x > T(0)) - (x < T(0)));
}

/// Whether sqrt(sumsq) is the accurate norm (sumsq is normal and finite).
template <class T>
MATOPT_HOST_DEVICE bool normal_sumsq(T sumsq) {
  return sumsq >= DeviceLimits<T>::min() && sumsq <= DeviceLimits<T>::max();
}

/// The norm given its plain sum of squares: sqrt(sumsq) where that is accurate (or NaN), else a * sqrt(scaled(a))
/// with a = max_abs(), the largest |x_i|, and scaled(a) the sum of (x_i / a)^2; a itself for a zero or non-finite a
/// (0 for a zero vector; inf stays inf). max_abs and scaled run only in that rare case.
template <class T, class MaxAbs, class Scaled>
MATOPT_HOST_DEVICE T rescaled(T sumsq, const MaxAbs& max_abs, const Scaled& scaled) {
  using std::sqrt;
  if (normal_sumsq(sumsq) || sumsq != sumsq) return sqrt(sumsq);
  const T a = max_abs();
  if (!(a > T(0)) || !finite_value(a)) return a;
  return a * sqrt(scaled(a));
}

}  // namespace matopt::detail

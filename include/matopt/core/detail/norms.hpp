// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: Euclidean norms without overflow or underflow (namespace detail only).
// Euclidean norms that neither overflow nor underflow (docs/reliability.md). The fast path is the
// plain sum of squares; only when it leaves the normal range (inf for entries beyond sqrt(max), 0 or
// subnormal for entries below sqrt(min)) is the norm recomputed as a * ||x / a|| with a = max |x_i|,
// one more pass, over that vector only. Zero vectors take that pass too and give 0.

#include <cmath>
#include <limits>

#include <Eigen/Core>

namespace matopt::detail {

/// Whether sqrt(sumsq) is the accurate norm (sumsq is normal and finite).
template <class T>
bool normal_sumsq(T sumsq) {
  return sumsq >= std::numeric_limits<T>::min() && sumsq <= std::numeric_limits<T>::max();
}

/// The norm of x (any dense vector or matrix expression, evaluated coefficient-wise: no temporaries)
/// given its plain sum of squares.
template <class Derived>
typename Derived::Scalar rescaled_norm(const Eigen::DenseBase<Derived>& x, typename Derived::Scalar sumsq) {
  using T = typename Derived::Scalar;
  if (normal_sumsq(sumsq) || std::isnan(sumsq)) return std::sqrt(sumsq);
  const T a = x.derived().array().abs().maxCoeff();
  if (!(a > T(0)) || !std::isfinite(a)) return a;  // 0 for a zero vector; inf stays inf
  return a * std::sqrt((x.derived().array() / a).abs2().sum());
}

/// ||x||_2 (Frobenius for a matrix) without overflow or underflow.
template <class Derived>
typename Derived::Scalar robust_norm(const Eigen::DenseBase<Derived>& x) {
  if (x.size() == 0) return typename Derived::Scalar(0);
  return rescaled_norm(x, x.derived().array().abs2().sum());
}

}  // namespace matopt::detail

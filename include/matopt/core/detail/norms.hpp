// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: Euclidean norms without overflow or underflow (namespace detail only).
// Euclidean norms that neither overflow nor underflow (docs/reliability.md): norm_rule.hpp's rule over Eigen
// expressions.

#include <Eigen/Core>

#include "matopt/core/detail/norm_rule.hpp"

namespace matopt::detail {

/// The norm of x (any dense vector or matrix expression, evaluated coefficient-wise: no temporaries)
/// given its plain sum of squares.
template <class Derived>
typename Derived::Scalar rescaled_norm(const Eigen::DenseBase<Derived>& x, typename Derived::Scalar sumsq) {
  using T = typename Derived::Scalar;
  return rescaled(
      sumsq, [&] { return T(x.derived().array().abs().maxCoeff()); },
      [&](T a) { return T((x.derived().array() / a).abs2().sum()); });
}

/// ||x||_2 (Frobenius for a matrix) without overflow or underflow.
template <class Derived>
typename Derived::Scalar robust_norm(const Eigen::DenseBase<Derived>& x) {
  if (x.size() == 0) return typename Derived::Scalar(0);
  return rescaled_norm(x, x.derived().array().abs2().sum());
}

}  // namespace matopt::detail

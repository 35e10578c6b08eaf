// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// ExactPolar: the exact polar factor by SVD, the reference that Newton–Schulz approximates.

#include <algorithm>
#include <limits>
#include <string_view>

#include <Eigen/SVD>

#include "matopt/core/detail/workspace.hpp"

namespace matopt {

/// The exact polar factor U V^T of the SVD U S V^T (`docs/math.md`), an orthogonalization method of Orthogonalize
/// (Orthogonalize<ExactPolar>: PolarGrad's). Singular values at or below max(r, s) eps(T) s_max map to 0, as under
/// Newton–Schulz (p(0) = 0), so rank-deficient inputs give the partial isometry on their range. The SVD allocates:
/// meant for small matrices and as a reference (@ref policy_method).
struct ExactPolar {
  /// "ExactPolar".
  static constexpr const char* name() { return "ExactPolar"; }

  /// No options.
  struct Options {};

  /// Scratch: the input and the result.
  template <class T>
  struct Workspace {
    /// Internal: the input X and the result.
    /// @{
    detail::Buffer<T> x, y;
    /// @}
    /// Bytes held.
    std::size_t bytes() const { return x.bytes() + y.bytes(); }
  };

  /// No options.
  template <class O, class D>
  static void describe(O&, D&) {}
  /// Sizes the workspace for r x s inputs.
  template <class T>
  static void reserve(Workspace<T>& ws, const Options&, Index r, Index s) {
    ws.x.reserve(r * s);
    ws.y.reserve(r * s);
  }

  /// The r x s input in the workspace, read in storage order Order; the result in the same order.
  template <class T, int Order>
  static Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>> run(Index r, Index s, const Options&,
                                                                                 Workspace<T>& ws) {
    using Matrix = typename detail::Buffer<T>::Matrix;
    auto x = ws.x.template matrix<Order>(r, s);
    auto y = ws.y.template matrix<Order>(r, s);
    if (r == 0 || s == 0) return y;
    Eigen::BDCSVD<Matrix> svd(x, Eigen::ComputeThinU | Eigen::ComputeThinV);
    const auto& sv = svd.singularValues();
    const T tol = T(std::max(r, s)) * std::numeric_limits<T>::epsilon() * sv(0);
    Index rank = 0;
    while (rank < sv.size() && sv(rank) > tol) ++rank;
    y.noalias() = svd.matrixU().leftCols(rank) * svd.matrixV().leftCols(rank).transpose();
    return y;
  }
};

}  // namespace matopt

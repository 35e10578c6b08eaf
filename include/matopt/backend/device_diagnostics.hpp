// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Diagnostics of matrices in device memory, each computed by the host's implementation.
// Diagnostics of matrices in device memory (docs/math.md#diagnostics), each computed by the host's one implementation:
//  - diagonal dominance: the Gram matrix is formed on the device by the engine (SYRK in T, at least fp32 as
//    the definition asks), copied to the host (k x k, the input is m x n) and summarized by the host's own
//    dominance_of_gram (detail::gram_dominance, diagonal_dominance.hpp, which Adaptive's engine form also runs);
//  - the spectral diagnostics (singular-value quantiles, normalized singular values, orthogonality residual,
//    spectral flatness): the matrix is downloaded by the engine (m n elements, after the engine's earlier
//    work) and measured by diagnostics/spectrum.hpp in double. They need an SVD or an eigen-solver, which
//    neither device engine has; their O(mn min(m, n)) host cost dominates the copy.
// Each allocates its scratch: diagnostics are measurements, not part of a step.

#include <vector>

#include <Eigen/Core>
#include <thrust/device_vector.h>

#include "matopt/backend/device_matrix.hpp"
#include "matopt/backend/device_optimizer.hpp"
#include "matopt/diagnostics/diagonal_dominance.hpp"
#include "matopt/diagnostics/spectrum.hpp"

namespace matopt {

/// Diagonal dominance of P = U U^T (or the Gram on U's shorter side) for U in device memory, with the
/// device engine `e` forming P. Allocates its scratch (a diagnostic, not part of a step).
template <class Engine, class T>
DiagonalDominance diagonal_dominance(Engine& e, DeviceMatrixView<const T> u, GramSide side = GramSide::Rows) {
  if (u.rows < 0 || u.cols < 0 || (u.data == nullptr && u.size() != 0))
    detail::fail("matopt::diagonal_dominance", "bad device matrix ", detail::shape_string(u.rows, u.cols));
  const bool columns = side == GramSide::Short && u.cols < u.rows;
  const GramSide used = columns ? GramSide::Short : GramSide::Rows;
  detail::Strided<const T> x = detail::strided(u);  // k x l with P = X X^T
  if (columns) x = x.t();
  const Index k = x.rows, l = x.cols;
  DiagonalDominanceWorkspace<T> ws;
  thrust::device_vector<T> xbuf(std::size_t(k >= 2 ? k * l : 0)), pbuf(std::size_t(k >= 2 ? k * k : 0));
  const detail::Strided<T> xc = detail::col_major(detail::raw(xbuf), k, l);
  if (k >= 2) e.copy(x, xc);  // column-major, the engines' dense operand layout
  return detail::gram_dominance(e, xc, detail::raw(pbuf), ws, used);
}

namespace detail {

/// f(host copy of u) with the copy an Eigen map in u's storage order, downloaded by e after its earlier work.
template <class Engine, class T, class F>
auto on_host(Engine& e, DeviceMatrixView<const T> u, const char* where, F&& f) {
  if (u.rows < 0 || u.cols < 0 || (u.data == nullptr && u.size() != 0))
    fail(where, "bad device matrix ", shape_string(u.rows, u.cols));
  std::vector<T> h(std::size_t(u.size()));
  e.download(u.data, u.size(), h.data());
  if (u.layout == Layout::RowMajor)
    return f(Eigen::Map<const DynamicMatrix<T, Layout::RowMajor>>(h.data(), u.rows, u.cols));
  return f(Eigen::Map<const DynamicMatrix<T, Layout::ColMajor>>(h.data(), u.rows, u.cols));
}

}  // namespace detail

/// singular_value_quantiles (spectrum.hpp) of U in device memory, downloaded by the engine `e`.
template <class Engine, class T>
std::vector<double> singular_value_quantiles(Engine& e, DeviceMatrixView<const T> u, const std::vector<double>& ps) {
  return detail::on_host(e, u, "matopt::singular_value_quantiles",
                         [&](const auto& x) { return singular_value_quantiles(x, ps); });
}
/// normalized_singular_values (spectrum.hpp) of U in device memory.
template <class Engine, class T>
Eigen::VectorXd normalized_singular_values(Engine& e, DeviceMatrixView<const T> u) {
  return detail::on_host(e, u, "matopt::normalized_singular_values",
                         [](const auto& x) { return normalized_singular_values(x); });
}
/// orthogonality_residual (spectrum.hpp) of a Newton–Schulz output O in device memory.
template <class Engine, class T>
OrthogonalityResidual orthogonality_residual(Engine& e, DeviceMatrixView<const T> o) {
  return detail::on_host(e, o, "matopt::orthogonality_residual",
                         [](const auto& x) { return orthogonality_residual(x); });
}
/// spectral_flatness (spectrum.hpp) of a gradient G in device memory.
template <class Engine, class T>
SpectralFlatness spectral_flatness(Engine& e, DeviceMatrixView<const T> g) {
  return detail::on_host(e, g, "matopt::spectral_flatness", [](const auto& x) { return spectral_flatness(x); });
}

}  // namespace matopt

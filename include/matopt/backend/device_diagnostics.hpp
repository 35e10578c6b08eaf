#pragma once
// Diagnostics of matrices in device memory (spec §6): the Gram matrix is formed on the device by the
// engine (SYRK in T, at least fp32 as spec §6 asks), copied to the host (k x k, the input is m x n) and
// summarized by the host's own dominance_of_gram, so the statistics are computed by one implementation
// (detail::gram_dominance, device_optimizer.hpp, which Adaptive on device also runs).

#include <thrust/device_vector.h>

#include "matopt/backend/device_matrix.hpp"
#include "matopt/backend/device_optimizer.hpp"
#include "matopt/diagnostics/diagonal_dominance.hpp"

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

}  // namespace matopt

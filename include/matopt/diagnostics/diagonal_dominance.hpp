// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Diagonal dominance of the Gram matrix U U^T: how far Muon's orthogonalization and row normalization can differ.
// Diagonal dominance of the Gram matrix P = U U^T (docs/math.md#diagonal-dominance; the RMNP code's
// `compute_diagonal_dominance`, Dominator-Index/RMNP). When P is diagonal, Muon's (U U^T)^{-1/2} U is exactly
// RMNP's row normalization, so these ratios measure how far the two preconditioners can differ.
//
// P is formed with a symmetric rank update of its lower triangle (SYRK: about m^2 n flops, half a GEMM)
// in the workspace's scalar type, double by default; float input is widened first, so every product is
// exact and only the sums round. The definition asks for at least fp32 (docs/math.md#diagonal-dominance).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include <Eigen/Core>

#include "matopt/config.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/strided.hpp"
#include "matopt/core/detail/workspace.hpp"
#include "matopt/core/view.hpp"

namespace matopt {

/// Which Gram matrix diagonal_dominance examines.
enum class GramSide {
  Rows,   ///< P = U U^T (m x m): rows of U, the fan-in vectors of the output units (as RMNP).
  Short,  ///< the Gram on the shorter side: U U^T when m <= n, U^T U (n x n) when m > n (an option).
};

/// Diagonal-dominance statistics of one Gram matrix P (k x k). All zero when k < 2.
struct DiagonalDominance {
  /// Min, mean and max over i of r_i = |P_ii| / (mean_{j!=i} |P_ij| + 1e-10).
  /// @{
  double r_min = 0, r_avg = 0, r_max = 0;          ///< of r_i = |P_ii| / (mean_{j!=i} |P_ij| + 1e-10)
  /// @}
  double ratio_to_max_min = 0;                     ///< min_i of P_ii / (max_{j!=i} |P_ij| + 1e-10)
  double ratio_to_max_avg = 0;                     ///< mean_i of the same
  double gershgorin_min = 0;                       ///< min_i (P_ii - sum_{j!=i} |P_ij|)
  double gershgorin_relative_min = 0;              ///< min_i (P_ii - sum_{j!=i} |P_ij|) / P_ii (0 for a zero row)
  Index size = 0;                                  ///< k, the side of P
  GramSide side = GramSide::Rows;                  ///< the side used (Short resolves to Rows when m <= n)
};

/// Scratch for the allocation-free overload. `Acc` is the accumulation type (float or double, at least the
/// input's precision). Sized once with reserve<Scalar>(m, n, side); `bytes()` reports its size.
template <class Acc = double>
struct DiagonalDominanceWorkspace {
  static_assert(std::is_same_v<Acc, float> || std::is_same_v<Acc, double>,
                "DiagonalDominanceWorkspace<Acc>: Acc must be float or double");
  detail::Buffer<Acc> gram;   ///< k x k, lower triangle used
  detail::Buffer<Acc> input;  ///< m x n copy of U in Acc (only used when U's scalar is not Acc)
  detail::Buffer<Acc> rows;   ///< 2k: per-row off-diagonal sum and max

  /// Room for an m x n input of scalar type `Scalar` examined on `side`: the k x k Gram, 2k row statistics
  /// and, only when Scalar is not Acc, the widened m x n copy. Grows, never shrinks.
  template <class Scalar = float>
  void reserve(Index m, Index n, GramSide side = GramSide::Rows) {
    const Index k = (side == GramSide::Short && n < m) ? n : m;
    gram.reserve(k * k);
    rows.reserve(2 * k);
    if (!std::is_same_v<Scalar, Acc>) input.reserve(m * n);
  }
  /// Bytes held.
  std::size_t bytes() const { return gram.bytes() + input.bytes() + rows.bytes(); }
};

namespace detail {

/// Statistics of the symmetric k x k matrix whose lower triangle is in `p` (`docs/math.md#diagonal-dominance`).
template <class Acc>
DiagonalDominance dominance_of_gram(const Eigen::Map<typename Buffer<Acc>::Matrix>& p, Buffer<Acc>& rows_buf,
                                    GramSide side) {
  DiagonalDominance out;
  out.side = side;
  const Index k = p.rows();
  out.size = k;
  if (k < 2) return out;
  auto stats = rows_buf.vector(2 * k);
  auto off_sum = stats.head(k);
  auto off_max = stats.tail(k);
  off_sum.setZero();
  off_max.setZero();
  // One pass over the strict lower triangle (column-major: contiguous), each entry feeding rows i and j.
  for (Index j = 0; j < k; ++j) {
    for (Index i = j + 1; i < k; ++i) {
      const Acc v = std::abs(p(i, j));
      off_sum(i) += v;
      off_sum(j) += v;
      off_max(i) = std::max(off_max(i), v);
      off_max(j) = std::max(off_max(j), v);
    }
  }
  constexpr double guard = 1e-10;  // the RMNP code's denominator guard (absolute, so scale-dependent)
  const double inv_k1 = 1.0 / double(k - 1);
  out.r_min = out.ratio_to_max_min = out.gershgorin_min = out.gershgorin_relative_min =
      std::numeric_limits<double>::infinity();
  out.r_max = -std::numeric_limits<double>::infinity();
  double r_sum = 0, rm_sum = 0;
  for (Index i = 0; i < k; ++i) {
    const double d = std::abs(double(p(i, i)));
    const double s = double(off_sum(i));
    const double r = d / (s * inv_k1 + guard);
    const double rm = d / (double(off_max(i)) + guard);
    const double g = d - s;
    const double g_rel = d > 0 ? g / d : 0.0;
    out.r_min = std::min(out.r_min, r);
    out.r_max = std::max(out.r_max, r);
    r_sum += r;
    out.ratio_to_max_min = std::min(out.ratio_to_max_min, rm);
    rm_sum += rm;
    out.gershgorin_min = std::min(out.gershgorin_min, g);
    out.gershgorin_relative_min = std::min(out.gershgorin_relative_min, g_rel);
  }
  out.r_avg = r_sum / double(k);
  out.ratio_to_max_avg = rm_sum / double(k);
  return out;
}

/// Diagonal dominance of P = X X^T for a column-major k x l X in engine memory: P formed by the engine (gram_lower:
/// SYRK in T's own precision, whatever the engine's product precision) in the k x k engine scratch p, copied into
/// host_ws and summarized by dominance_of_gram. The one implementation behind diagonal_dominance(engine, view)
/// (backend/device_diagnostics.hpp) and Adaptive's engine form; allocates nothing once host_ws is reserved for (k, l).
template <class Engine, class T>
DiagonalDominance gram_dominance(Engine& e, Strided<T> x, T* p, DiagonalDominanceWorkspace<T>& host_ws,
                                 GramSide side) {
  const Index k = x.rows;
  host_ws.template reserve<T>(k, x.cols);
  auto ph = host_ws.gram.matrix(k, k);
  if (k >= 2) {
    Strided<T> pc = col_major(p, k, k);
    e.gram_lower(x, pc);
    e.download(static_cast<const T*>(p), k * k, ph.data());
  }
  return dominance_of_gram<T>(ph, host_ws.rows, side);
}
}  // namespace detail

/// Diagonal dominance of P = U U^T (or, with GramSide::Short, of the Gram on U's shorter side), computed in
/// the workspace's precision `Acc`. Allocates nothing once `ws.reserve<Scalar>(m, n, side)` has been called
/// (Scalar = U's scalar), beyond what Eigen's own matrix product allocates for packing at large sizes
/// (`docs/design.md#workspace-and-allocation`) and what evaluating a non-plain expression `u` costs. U may be any
/// Eigen expression of any storage order; its scalar must not be more precise than Acc. Call it on U, the matrix
/// the preconditioner receives (`docs/math.md#diagonal-dominance`).
template <class Derived, class Acc>
DiagonalDominance diagonal_dominance(const Eigen::MatrixBase<Derived>& u, DiagonalDominanceWorkspace<Acc>& ws,
                                     GramSide side = GramSide::Rows) {
  using Scalar = typename Derived::Scalar;
  static_assert(std::is_floating_point_v<Scalar>, "matopt::diagonal_dominance needs a float or double matrix");
  static_assert(sizeof(Acc) >= sizeof(Scalar),
                "matopt::diagonal_dominance: accumulate at least in the input's precision "
                "(use DiagonalDominanceWorkspace<double> for double input)");
  const Index m = u.rows(), n = u.cols();
  const bool columns = side == GramSide::Short && n < m;
  const GramSide used = columns ? GramSide::Short : GramSide::Rows;
  const Index k = columns ? n : m;
  ws.template reserve<Scalar>(m, n, side);
  auto p = ws.gram.matrix(k, k);
  if (k < 2) return detail::dominance_of_gram<Acc>(p, ws.rows, used);
  p.template triangularView<Eigen::Lower>().setZero();
  auto update = [&](const auto& x) {
    if (columns)
      p.template selfadjointView<Eigen::Lower>().rankUpdate(x.transpose());
    else
      p.template selfadjointView<Eigen::Lower>().rankUpdate(x);
  };
  if constexpr (std::is_same_v<Scalar, Acc>) {
    update(u.derived());
  } else {
    auto x = ws.input.matrix(m, n);
    x = u.template cast<Acc>();
    update(x);
  }
  return detail::dominance_of_gram<Acc>(p, ws.rows, used);
}

/// Diagonal dominance of P = U U^T (docs/math.md) accumulated in double, with a workspace of its own (allocates).
template <class Derived>
DiagonalDominance diagonal_dominance(const Eigen::MatrixBase<Derived>& u, GramSide side = GramSide::Rows) {
  DiagonalDominanceWorkspace<double> ws;
  return diagonal_dominance(u, ws, side);
}

/// Diagonal dominance of a framework buffer seen through a MatrixView (either storage order).
template <class T>
DiagonalDominance diagonal_dominance(MatrixView<T> u, GramSide side = GramSide::Rows) {
  return detail::with_map(u, [&](const auto& map) { return diagonal_dominance(map, side); });
}

/// Model-wide averages r̄_min, r̄_avg, r̄_max of the per-matrix statistics (the RMNP paper's plots).
struct DiagonalDominanceMean {
  /// Averages of r_min, r_avg and r_max over the matrices added.
  /// @{
  double r_min = 0, r_avg = 0, r_max = 0;
  /// @}
  Index matrices = 0;  ///< matrices averaged (those with a Gram of side >= 2)
  Index skipped = 0;   ///< matrices left out because their Gram has side < 2 (their statistics are all 0)
};

/// Running average of DiagonalDominance results across the matrices of a model. Matrices whose Gram has
/// side < 2 are counted in `skipped` and left out of the averages (their zeros carry no information).
class DiagonalDominanceAccumulator {
 public:
  /// Adds one matrix's statistics (a Gram of side < 2 is counted in `skipped` only).
  void add(const DiagonalDominance& d) {
    if (d.size < 2) {
      ++mean_.skipped;
      return;
    }
    ++mean_.matrices;
    sum_min_ += d.r_min;
    sum_avg_ += d.r_avg;
    sum_max_ += d.r_max;
    const double c = double(mean_.matrices);
    mean_.r_min = sum_min_ / c;
    mean_.r_avg = sum_avg_ / c;
    mean_.r_max = sum_max_ / c;
  }
  /// The averages so far.
  const DiagonalDominanceMean& mean() const { return mean_; }
  /// Starts over.
  void reset() { *this = DiagonalDominanceAccumulator{}; }

 private:
  DiagonalDominanceMean mean_;
  double sum_min_ = 0, sum_avg_ = 0, sum_max_ = 0;
};

/// r̄_min, r̄_avg, r̄_max over a range of DiagonalDominance results.
template <class Range>
DiagonalDominanceMean mean_diagonal_dominance(const Range& results) {
  DiagonalDominanceAccumulator acc;
  for (const DiagonalDominance& d : results) acc.add(d);
  return acc.mean();
}

}  // namespace matopt

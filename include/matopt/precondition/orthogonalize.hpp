// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Orthogonalize: D = the polar factor of U (Muon), by Newton–Schulz or an exact SVD, optionally per row block.
// Orthogonalize: D = polar factor of U (Muon; docs/math.md), computed by `Method` (NewtonSchulz<Schedule>,
// GramNewtonSchulz<Schedule> or ExactPolar), which works on r x s with r = min(m, n) <= s. U is copied into
// the workspace in its own storage order (a straight copy) and that memory is read as X = U (wide) or
// X = U^T (tall), which is the same memory in the opposite order; D comes back as a view of the workspace in
// U's order. So no storage order or shape costs a transposing copy, and polar(U^T) = polar(U)^T.

#include <string>
#include <string_view>

#include "matopt/config.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/distributed/plan.hpp"
#include "matopt/precondition/newton_schulz.hpp"
#include "matopt/precondition/row_blocks.hpp"

namespace matopt {

/// D = polar(U), the orthogonalized direction of Muon (KellerJordan/Muon), computed by `Method` on r x s with
/// r = min(m, n) <= s; a tall U is read transposed, at no copy. With RowBlocks options (heads, split_sizes), each
/// block of rows is orthogonalized on its own (@ref policy_preconditioner).
/// @tparam Method NewtonSchulz<Schedule> (default), GramNewtonSchulz or ExactPolar (@ref policy_method).
template <class Method = NewtonSchulz<>>
struct Orthogonalize {
  /// The method's options and the row blocks (heads, split_sizes, split_groups).
  struct Options : Method::Options, RowBlocks {};
  /// The method's workspace.
  template <class T>
  using Workspace = typename Method::template Workspace<T>;

  /// "Orthogonalize".
  static constexpr const char* name() { return "Orthogonalize"; }
  /// The planner's cost (distributed/plan.hpp): m n min(m, n), the Newton–Schulz (or polar) products.
  static double cost(Index m, Index n) { return orthogonalize_cost(m, n); }
  /// "Orthogonalize<Method>".
  static std::string identity() { return std::string("Orthogonalize<") + Method::name() + ">"; }

  /// Optimizer steps each block of rows (RowBlocks: per-head, split QKV) through apply() on its own.
  static constexpr bool splits_rows = true;

  /// Sizes `ws` for an m x n parameter and for its row blocks (grows only; run() then allocates nothing).
  template <class T>
  static void reserve(Workspace<T>& ws, const Options& o, Index m, Index n) {
    Method::reserve(ws, o, m < n ? m : n, m < n ? n : m);
    if (o.blocked() && o.fits(m))
      o.for_each(m, [&](const RowSet& b) {
        const Index rows = b.size();
        Method::reserve(ws, o, rows < n ? rows : n, rows < n ? n : rows);
      });
  }

  /// The method's options, then the row blocks' (core/options.hpp).
  template <class O, class D>
  static void describe(O& o, D& d) {
    Method::describe(o, d);
    RowBlocks::describe(o, d);
  }

  /// Calls sink(D) with D the m x n orthogonalized direction of the expression U.
  template <class T, class UExpr, class Sink>
  static void apply(const UExpr& u, const Options& o, Workspace<T>& ws, Sink&& sink) {
    constexpr int order = detail::eigen_order_v<detail::layout_of_v<UExpr>>;
    const Index m = u.rows(), n = u.cols();
    const bool tall = m > n;
    const Index r = tall ? n : m, s = tall ? m : n;
    ws.template input<order>(m, n).noalias() = u;
    // X = U keeps U's order; X = U^T (tall) reads the same memory in the other order.
    const bool x_col_major = tall == (order == Eigen::RowMajor);
    const T* d = x_col_major ? Method::template run<T, Eigen::ColMajor>(r, s, o, ws).data()
                             : Method::template run<T, Eigen::RowMajor>(r, s, o, ws).data();
    sink(Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, order>>(d, m, n));
  }
};

}  // namespace matopt

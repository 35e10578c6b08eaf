// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// RowNormalize: each row of U divided by its norm (RMNP, arXiv 2603.20527), and NormalizeLines, its template.
// RowNormalize (RMNP, arXiv 2603.20527; code Dominator-Index/RMNP; docs/math.md#row-normalization-rmnp):
// D_i = U_i / max(||U_i||_2, eps) for each row i, i.e. normalization over the input dimension.
// Equal to Muon's (U U^T)^(-1/2) U when U U^T is diagonal, at Theta(mn) instead of Theta(mn min(m,n)).
// Zero rows give zero rows. No transpose for tall matrices (the authors found it worse).
// ColNormalize (col_normalize.hpp) is the same policy over columns: both are NormalizeLines.

#include <string_view>

#include "matopt/core/detail/engine_form.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/norms.hpp"
#include "matopt/core/detail/parse.hpp"
#include "matopt/core/detail/workspace.hpp"
#include "matopt/distributed/plan.hpp"
#include "matopt/precondition/detail/fused_normalize.hpp"

namespace matopt {

namespace detail {
/// RowNormalize's and ColNormalize's options: the normalizing eps (F.normalize's 1e-12 by default).
struct NormalizeOptions {
  double eps = 1e-12;
};
}  // namespace detail

/// Each line of U divided by its norm, max(||line||_2, eps): rows (RowNormalize, RMNP) or columns
/// (ColNormalize, Scion's column normalization). Zero lines stay zero (@ref policy_preconditioner).
template <bool Columns>
struct NormalizeLines {
  /// Whether the lines are columns (ColNormalize) rather than rows (RowNormalize).
  static constexpr bool columns = Columns;
  /// One option: `eps`, the norm floor (default 1e-12, as torch's F.normalize; key norm_eps; > 0).
  using Options = detail::NormalizeOptions;
  /// Scratch: per-line scales, and partial sums for the fused step across the storage order (HostEngine).
  template <class T>
  struct Workspace {
    /// Internal: 1 / max(||line||, eps), one per line.
    detail::Buffer<T> scale;
    /// Internal: the fused step's partial sums of squares.
    detail::Buffer<T> partial;
    /// Bytes held.
    std::size_t bytes() const { return scale.bytes() + partial.bytes(); }
  };

  /// "RowNormalize" or "ColNormalize".
  static constexpr const char* name() { return Columns ? "ColNormalize" : "RowNormalize"; }
  /// The planner's cost (distributed/plan.hpp): m n, one pass over the entries.
  static double cost(Index m, Index n) { return elementwise_cost(m, n); }
  /// Sizes the scales for the lines (m rows or n columns) and the fused step's partial sums.
  template <class T>
  static void reserve(Workspace<T>& ws, const Options&, Index m, Index n) {
    const Index lines = Columns ? n : m, length = Columns ? m : n;
    ws.scale.reserve(lines);
    ws.partial.reserve(lines * detail::across_blocks(length));
  }
  /// The option (core/options.hpp): norm_eps.
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("norm_eps", o.eps, checks::Positive{}, "epsilon in max(||u||, epsilon) of row / column normalization");
  }

  /// Calls sink(D), the lines of U normalized.
  template <class T, class UExpr, class Sink>
  static void apply(const UExpr& u, const Options& o, Workspace<T>& ws, Sink&& sink) {
    auto scale = ws.scale.vector(Columns ? u.cols() : u.rows());
    if constexpr (Columns)
      scale.noalias() = u.colwise().squaredNorm().transpose();
    else
      scale.noalias() = u.rowwise().squaredNorm();
    for (Index i = 0; i < scale.size(); ++i)
      scale(i) = Columns ? detail::rescaled_norm(u.col(i), scale(i)) : detail::rescaled_norm(u.row(i), scale(i));
    scale = scale.cwiseMax(T(o.eps)).cwiseInverse();
    if constexpr (Columns)
      sink(u * scale.asDiagonal());
    else
      sink(scale.asDiagonal() * u);
  }

  /// The engine form (core/detail/engine_form.hpp): U in the workspace and one scale per line.
  template <class WS>
  static void reserve_on(WS& ws, const Options&, Index m, Index n) {
    ws.grow(ws.u, m * n);
    ws.grow(ws.scale, Columns ? n : m);
  }
  /// D = U / max(||U_i||, eps) per row, or per column as the rows of U^T, in place on U formed in W's order.
  template <class E, class WS, class FormU>
  static detail::Strided<typename WS::Scalar> apply_on(E& e, WS& ws, const Options& o, Index m, Index n,
                                                       Layout layout, FormU&& form_u) {
    using T = typename WS::Scalar;
    const detail::Strided<T> u = detail::form_in_workspace(ws, m, n, layout, form_u);
    const detail::Strided<T> lines = Columns ? u.t() : u;
    e.inverse_row_norms(detail::Strided<const T>(lines), T(o.eps), WS::ptr(ws.scale));  // 1 / max(||line||, eps)
    e.scale_rows(lines, static_cast<const T*>(WS::ptr(ws.scale)));
    return u;
  }
};

namespace detail {
/// Whether P is RowNormalize or ColNormalize: under Static scaling with a momentum buffer its whole step is one pass of
/// the engine's fused_normalize_rows (fused_normalize.hpp; Driver::fused), and ShardedOptimizer may cut its rows.
template <class P>
inline constexpr bool is_normalize_lines_v = false;
template <bool Columns>
inline constexpr bool is_normalize_lines_v<NormalizeLines<Columns>> = true;
}  // namespace detail

/// D_i = U_i / max(||U_i||_2, eps) for each row i (RMNP, arXiv 2603.20527): Muon's (U U^T)^(-1/2) U when U U^T is
/// diagonal, at Theta(mn). Zero rows stay zero; no transpose for tall matrices (@ref policy_preconditioner).
using RowNormalize = NormalizeLines<false>;

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// RowNormalize: each row of U divided by its norm (RMNP, arXiv 2603.20527).
// RowNormalize (RMNP, arXiv 2603.20527; code Dominator-Index/RMNP; docs/math.md#row-normalization-rmnp):
// D_i = U_i / max(||U_i||_2, eps) for each row i, i.e. normalization over the input dimension.
// Equal to Muon's (U U^T)^(-1/2) U when U U^T is diagonal, at Theta(mn) instead of Theta(mn min(m,n)).
// Zero rows give zero rows. No transpose for tall matrices (the authors found it worse).

#include <string_view>

#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/norms.hpp"
#include "matopt/core/detail/parse.hpp"
#include "matopt/core/detail/workspace.hpp"
#include "matopt/distributed/plan.hpp"
#include "matopt/precondition/detail/fused_normalize.hpp"

namespace matopt {

namespace detail {
/// Shared by RowNormalize and ColNormalize: the normalizing eps (F.normalize's 1e-12 by default).
struct NormalizeOptions {
  double eps = 1e-12;
};
inline void validate_normalize(const NormalizeOptions& o, std::string_view where) {
  require_positive(where, "norm_eps", o.eps);
}
inline bool set_normalize_option(NormalizeOptions& o, std::string_view key, std::string_view value) {
  if (key != "norm_eps") return false;
  o.eps = parse_double(key, value);
  return true;
}
}  // namespace detail

/// D_i = U_i / max(||U_i||_2, eps) for each row i (RMNP, arXiv 2603.20527): Muon's (U U^T)^(-1/2) U when U U^T is
/// diagonal, at Theta(mn). Zero rows stay zero; no transpose for tall matrices (@ref policy_preconditioner).
struct RowNormalize {
  /// One option: `eps`, the norm floor (default 1e-12, as torch's F.normalize; key norm_eps; > 0).
  using Options = detail::NormalizeOptions;
  /// Scratch: per-row scales, and partial sums for the fused step on column-major storage.
  template <class T>
  struct Workspace {
    /// Internal: 1 / max(||U_i||, eps), one per row.
    detail::Buffer<T> scale;    // 1 / max(||U_i||, eps), one per row
    /// Internal: the fused step's partial sums of squares.
    detail::Buffer<T> partial;  // fused step on column-major storage: partial sums of squares
    /// Bytes held.
    std::size_t bytes() const { return scale.bytes() + partial.bytes(); }
  };

  /// "RowNormalize".
  static constexpr const char* name() { return "RowNormalize"; }
  /// The planner's cost (distributed/plan.hpp): m n, one pass over the entries.
  static double cost(Index m, Index n) { return elementwise_cost(m, n); }
  /// Sizes the scales for m rows and the fused step's partial sums.
  template <class T>
  static void reserve(Workspace<T>& ws, const Options&, Index m, Index n) {
    ws.scale.reserve(m);
    ws.partial.reserve(m * detail::across_blocks(n));
  }
  /// Throws std::invalid_argument unless norm_eps is finite and > 0.
  static void validate(const Options& o, std::string_view where) { detail::validate_normalize(o, where); }
  /// Key norm_eps.
  static bool set_option(Options& o, std::string_view key, std::string_view value) {
    return detail::set_normalize_option(o, key, value);
  }
  /// "norm_eps".
  static constexpr const char* option_keys() { return "norm_eps"; }

  /// Calls sink(D), the rows of U normalized.
  template <class T, class UExpr, class Sink>
  static void apply(const UExpr& u, const Options& o, Workspace<T>& ws, Sink&& sink) {
    auto scale = ws.scale.vector(u.rows());
    scale.noalias() = u.rowwise().squaredNorm();
    for (Index i = 0; i < u.rows(); ++i) scale(i) = detail::rescaled_norm(u.row(i), scale(i));
    scale = scale.cwiseMax(T(o.eps)).cwiseInverse();
    sink(scale.asDiagonal() * u);
  }

  /// The whole step in one pass (Static scaling, contiguous W, G, V of layout L): see fused_normalize.hpp.
  static constexpr bool has_fused_step = true;
  /// Momentum, normalization, weight decay and update of W (m x n, layout L) in one pass over memory.
  template <Layout L, class T>
  static void fused_step(T* w, const T* g, T* v, Index m, Index n, const detail::FusedStep<T>& f,
                         Workspace<T>& ws) {
    if constexpr (L == Layout::RowMajor)
      detail::fused_normalize_along(w, g, v, m, n, f);
    else
      detail::fused_normalize_across(w, g, v, n, m, f, ws.partial.data(), ws.scale.data());
  }
};

}  // namespace matopt

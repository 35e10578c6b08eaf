// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// ColNormalize: each column of U divided by its norm (Scion's column normalization, arXiv 2502.07529).
// ColNormalize (docs/math.md#column-normalization): D_{:,j} = U_{:,j} / max(||U_{:,j}||_2, eps) for each column j, i.e.
// normalization over the output dimension. Scion (arXiv 2502.07529) pairs it with the radius sqrt(m)
// (shape::ScionColumn: each column gets unit RMS). Zero columns give zero columns.

#include <string_view>

#include "matopt/distributed/plan.hpp"
#include "matopt/precondition/row_normalize.hpp"

namespace matopt {

/// D_:j = U_:j / max(||U_:j||_2, eps) for each column j: normalization over the output dimension. Scion
/// (arXiv 2502.07529) pairs it with the radius sqrt(m) (shape::ScionColumn). Zero columns stay zero
/// (@ref policy_preconditioner).
struct ColNormalize {
  /// One option: `eps`, the norm floor (default 1e-12; key norm_eps; > 0).
  using Options = detail::NormalizeOptions;
  /// Scratch: per-column scales, and partial sums for the fused step on row-major storage.
  template <class T>
  struct Workspace {
    /// Internal: 1 / max(||U_:j||, eps), one per column.
    detail::Buffer<T> scale;    // 1 / max(||U_{:,j}||, eps), one per column
    /// Internal: the fused step's partial sums of squares.
    detail::Buffer<T> partial;  // fused step on row-major storage: partial sums of squares
    /// Bytes held.
    std::size_t bytes() const { return scale.bytes() + partial.bytes(); }
  };

  /// "ColNormalize".
  static constexpr const char* name() { return "ColNormalize"; }
  /// The planner's cost (distributed/plan.hpp): m n, one pass over the entries.
  static double cost(Index m, Index n) { return elementwise_cost(m, n); }
  /// Sizes the scales for n columns and the fused step's partial sums.
  template <class T>
  static void reserve(Workspace<T>& ws, const Options&, Index m, Index n) {
    ws.scale.reserve(n);
    ws.partial.reserve(n * detail::across_blocks(m));
  }
  /// Throws std::invalid_argument unless norm_eps is finite and > 0.
  static void validate(const Options& o, std::string_view where) { detail::validate_normalize(o, where); }
  /// Key norm_eps.
  static bool set_option(Options& o, std::string_view key, std::string_view value) {
    return detail::set_normalize_option(o, key, value);
  }
  /// "norm_eps".
  static constexpr const char* option_keys() { return "norm_eps"; }

  /// Calls sink(D), the columns of U normalized.
  template <class T, class UExpr, class Sink>
  static void apply(const UExpr& u, const Options& o, Workspace<T>& ws, Sink&& sink) {
    auto scale = ws.scale.vector(u.cols());
    scale.noalias() = u.colwise().squaredNorm().transpose();
    for (Index j = 0; j < u.cols(); ++j) scale(j) = detail::rescaled_norm(u.col(j), scale(j));
    scale = scale.cwiseMax(T(o.eps)).cwiseInverse();
    sink(u * scale.asDiagonal());
  }

  /// The whole step in one pass (Static scaling, contiguous W, G, V of layout L): see fused_normalize.hpp.
  static constexpr bool has_fused_step = true;
  /// Momentum, normalization, weight decay and update of W (m x n, layout L) in one pass over memory.
  template <Layout L, class T>
  static void fused_step(T* w, const T* g, T* v, Index m, Index n, const detail::FusedStep<T>& f,
                         Workspace<T>& ws) {
    if constexpr (L == Layout::ColMajor)
      detail::fused_normalize_along(w, g, v, n, m, f);
    else
      detail::fused_normalize_across(w, g, v, m, n, f, ws.partial.data(), ws.scale.data());
  }
};

}  // namespace matopt

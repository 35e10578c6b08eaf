// SPDX-License-Identifier: MIT
#pragma once
// ColNormalize (spec §2.3): D_{:,j} = U_{:,j} / max(||U_{:,j}||_2, eps) for each column j, i.e.
// normalization over the output dimension. Scion (arXiv 2502.07529) pairs it with the radius sqrt(m)
// (shape::ScionColumn: each column gets unit RMS). Zero columns give zero columns.

#include <string_view>

#include "matopt/precondition/row_normalize.hpp"

namespace matopt {

struct ColNormalize {
  using Options = detail::NormalizeOptions;
  template <class T>
  struct Workspace {
    detail::Buffer<T> scale;    // 1 / max(||U_{:,j}||, eps), one per column
    detail::Buffer<T> partial;  // fused step on row-major storage: partial sums of squares
    std::size_t bytes() const { return scale.bytes() + partial.bytes(); }
  };

  static constexpr const char* name() { return "ColNormalize"; }
  template <class T>
  static void reserve(Workspace<T>& ws, const Options&, Index m, Index n) {
    ws.scale.reserve(n);
    ws.partial.reserve(n * detail::across_blocks(m));
  }
  static void validate(const Options& o, std::string_view where) { detail::validate_normalize(o, where); }
  static bool set_option(Options& o, std::string_view key, std::string_view value) {
    return detail::set_normalize_option(o, key, value);
  }
  static constexpr const char* option_keys() { return "norm_eps"; }

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

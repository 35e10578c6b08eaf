// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: one-pass kernels of a whole RowNormalize / ColNormalize step (namespace detail only).
// One-pass kernels for a whole normalization step (RowNormalize / ColNormalize with Static scaling):
// momentum, normalization, decoupled weight decay and the update, reading G, V, W and writing V, W once
// (20 bytes per fp32 element when the normalized vectors are contiguous).
//
//   U = u_g G + u_v V;  D = U / max(||U||, eps) per normalized vector;  W <- keep W - step D;
//   V <- v_v V + v_g G
// (cautious weight decay: keep W only where D . W >= 0, W elsewhere; scaling/step_rules.hpp).
//
// Two memory shapes cover both policies and both storage orders. A matrix is stored as `lines` lines of
// `len` contiguous elements (rows of a row-major matrix, columns of a column-major one):
//  - along:  each line is one normalized vector (RowNormalize on row-major, ColNormalize on column-major).
//            Per line: its norm, then the update while the line is still in cache.
//  - across: normalized vector k is element k of every line (RowNormalize on column-major, ColNormalize on
//            row-major). No norm is known before every line has been read, so two streaming sweeps: sums of
//            squares (reading G, V: 8 bytes per fp32 element), then the update (20 bytes), 28 in all; the
//            bound is 20/28 = 0.71 of streaming bandwidth unless the matrix fits in cache.
// Pieces (line blocks, partial-sum blocks) depend only on the shape, never on the thread count: results are bitwise
// identical for any number of threads.

#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Core>

#include "matopt/core/detail/norms.hpp"
#include "matopt/core/detail/parallel.hpp"
#include "matopt/momentum/momentum.hpp"

namespace matopt::detail {

/// Scalars of a fused normalization step.
template <class T>
struct FusedStep {
  MomentumCoefficients<T> c;
  T eps;   ///< normalization floor
  T keep;  ///< 1 - lr * lambda
  T step;  ///< lr * s(m, n)
  bool cautious = false;  ///< apply `keep` only where D . W >= 0

  /// One entry of W after the step, keep w - scale u (scale > 0: D . W >= 0 exactly where U . W >= 0), for the device
  /// engines' passes; fused_update below is the same on Eigen arrays.
  MATOPT_HOST_DEVICE T updated(T w, T scale, T u) const {
    return cautious && !(w * u >= T(0)) ? w - scale * u : keep * w - scale * u;
  }
};

/// W <- keep W - scale U on one line (scale > 0, so D . W >= 0 exactly where U . W >= 0).
template <class WLine, class UExpr, class Scale, class T>
void fused_update(WLine& wl, const UExpr& u, const Scale& scale, const FusedStep<T>& f) {
  if (f.cautious)
    wl = (wl * u >= T(0)).select(f.keep * wl, wl) - scale * u;
  else
    wl = f.keep * wl - scale * u;
}

/// Lines of W, G and V start lw, lg and lv elements apart (at least len: a block of a larger matrix, a dense copy).
template <class T>
void fused_normalize_along(T* w, Index lw, const T* g, Index lg, T* v, Index lv, Index lines, Index len,
                           const FusedStep<T>& f) {
  using Line = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
  using ConstLine = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
  constexpr Index block = 16;  // lines per parallel piece
  parallel_for((lines + block - 1) / block, [&](Index b) {
    const Index end = std::min(lines, (b + 1) * block);
    for (Index l = b * block; l < end; ++l) {
      Line wl(w + l * lw, len), vl(v + l * lv, len);
      ConstLine gl(g + l * lg, len);
      const auto u = f.c.u_g * gl + f.c.u_v * vl;
      const T norm = rescaled_norm(u, u.square().sum());
      const T scale = f.step / std::max(norm, f.eps);
      fused_update(wl, f.c.u_g * gl + f.c.u_v * vl, scale, f);
      vl = f.c.v_v * vl + f.c.v_g * gl;
    }
  });
}

/// Pieces of the first sweep of fused_normalize_across: a fixed count (never the thread count).
inline Index across_blocks(Index lines) { return std::min<Index>(lines, 16); }

/// `partial` holds len * across_blocks(lines) elements, `scale` len; line strides as in fused_normalize_along.
template <class T>
void fused_normalize_across(T* w, Index lw, const T* g, Index lg, T* v, Index lv, Index lines, Index len,
                            const FusedStep<T>& f, T* partial, T* scale) {
  using Seg = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
  using ConstSeg = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
  if (lines == 0 || len == 0) return;
  // Sweep 1 (reads G, V): per block of lines, the partial sums of squares of U for every vector k.
  const Index blocks = across_blocks(lines), per_block = (lines + blocks - 1) / blocks;
  parallel_for(blocks, [&](Index b) {
    Seg acc(partial + b * len, len);
    acc.setZero();
    for (Index l = b * per_block; l < std::min(lines, (b + 1) * per_block); ++l)
      acc += (f.c.u_g * ConstSeg(g + l * lg, len) + f.c.u_v * ConstSeg(v + l * lv, len)).square();
  });
  // The blocks' sums in a fixed order, then the scale step / max(||U_k||, eps) of each vector.
  constexpr Index chunk = 1024;
  parallel_for((len + chunk - 1) / chunk, [&](Index c) {
    const Index k0 = c * chunk, n = std::min(chunk, len - k0);
    Seg sum(scale + k0, n);
    sum = ConstSeg(partial + k0, n);
    for (Index b = 1; b < blocks; ++b) sum += ConstSeg(partial + b * len + k0, n);
    for (Index k = k0; k < k0 + n; ++k) {
      T norm = std::sqrt(scale[k]);
      if (!normal_sumsq(scale[k])) {  // left the normal range: recompute rescaled (rare; norms.hpp)
        using Strided = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>, 0, Eigen::InnerStride<>>;
        const Strided gk(g + k, lines, Eigen::InnerStride<>(lg)), vk(v + k, lines, Eigen::InnerStride<>(lv));
        norm = rescaled_norm(f.c.u_g * gk + f.c.u_v * vk, scale[k]);
      }
      scale[k] = f.step / std::max(norm, f.eps);
    }
  });
  // Sweep 2 (reads G, V, W; writes W, V): the update, line by line.
  const ConstSeg sc(scale, len);
  constexpr Index line_block = 16;
  parallel_for((lines + line_block - 1) / line_block, [&](Index b) {
    for (Index l = b * line_block; l < std::min(lines, (b + 1) * line_block); ++l) {
      Seg wl(w + l * lw, len), vl(v + l * lv, len);
      ConstSeg gl(g + l * lg, len);
      fused_update(wl, f.c.u_g * gl + f.c.u_v * vl, sc, f);
      vl = f.c.v_v * vl + f.c.v_g * gl;
    }
  });
}

}  // namespace matopt::detail

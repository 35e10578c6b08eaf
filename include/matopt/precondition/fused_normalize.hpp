#pragma once
// One-pass kernels for a whole normalization step (RowNormalize / ColNormalize with Static scaling):
// momentum, normalization, decoupled weight decay and the update, reading G, V, W and writing V, W once
// (20 bytes per fp32 element when the normalized vectors are contiguous).
//
//   U = u_g G + u_v V;  D = U / max(||U||, eps) per normalized vector;  W <- keep W - step D;
//   V <- v_v V + v_g G
//
// Two memory shapes cover both policies and both storage orders. A matrix is stored as `lines` lines of
// `len` contiguous elements (rows of a row-major matrix, columns of a column-major one):
//  - along:  each line is one normalized vector (RowNormalize on row-major, ColNormalize on column-major).
//            Per line: its norm, then the update while the line is still in cache.
//  - across: normalized vector k is element k of every line (RowNormalize on column-major, ColNormalize on
//            row-major). Per panel of consecutive k: norms over all lines, then the update; the panel width
//            is chosen so the panel stays in L2 between the two sweeps.
// Pieces (line blocks, panels) depend only on the shape, never on the thread count: results are bitwise
// identical for any number of threads.

#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Core>

#include "matopt/core/norms.hpp"
#include "matopt/core/parallel.hpp"
#include "matopt/momentum/momentum.hpp"

namespace matopt::detail {

/// Scalars of a fused normalization step.
template <class T>
struct FusedStep {
  MomentumCoefficients<T> c;
  T eps;   ///< normalization floor
  T keep;  ///< 1 - lr * lambda
  T step;  ///< lr * s(m, n)
};

template <class T>
void fused_normalize_along(T* w, const T* g, T* v, Index lines, Index len, const FusedStep<T>& f) {
  using Line = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
  using ConstLine = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
  constexpr Index block = 16;  // lines per parallel piece
  parallel_for((lines + block - 1) / block, [&](Index b) {
    const Index end = std::min(lines, (b + 1) * block);
    for (Index l = b * block; l < end; ++l) {
      Line wl(w + l * len, len), vl(v + l * len, len);
      ConstLine gl(g + l * len, len);
      const auto u = f.c.u_g * gl + f.c.u_v * vl;
      const T norm = rescaled_norm(u, u.square().sum());
      const T scale = f.step / std::max(norm, f.eps);
      wl = f.keep * wl - scale * (f.c.u_g * gl + f.c.u_v * vl);
      vl = f.c.v_v * vl + f.c.v_g * gl;
    }
  });
}

template <class T>
void fused_normalize_across(T* w, const T* g, T* v, Index lines, Index len, const FusedStep<T>& f) {
  using Seg = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
  using ConstSeg = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
  // Panel width: the panel of G, V, W (3 * lines * width elements) fits in ~768 KiB of L2; a multiple of 16.
  constexpr Index max_width = 256;
  const Index budget = Index(768 * 1024) / (3 * Index(sizeof(T)) * std::max<Index>(lines, 1));
  const Index width = std::clamp<Index>(budget / 16 * 16, 16, max_width);
  parallel_for((len + width - 1) / width, [&](Index p) {
    const Index k0 = p * width, n = std::min(width, len - k0);
    Eigen::Array<T, max_width, 1> sumsq_buf;
    auto sumsq = sumsq_buf.head(n);
    sumsq.setZero();
    for (Index l = 0; l < lines; ++l) {
      const Index at = l * len + k0;
      sumsq += (f.c.u_g * ConstSeg(g + at, n) + f.c.u_v * Seg(v + at, n)).square();
    }
    Eigen::Array<T, max_width, 1> norm_buf;
    auto norm = norm_buf.head(n);
    norm = sumsq.sqrt();
    // Columns whose sum of squares left the normal range: recompute rescaled (rare; norms.hpp).
    for (Index k = 0; k < n; ++k) {
      if (normal_sumsq(sumsq(k))) continue;
      using Strided = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>, 0, Eigen::InnerStride<>>;
      const Strided gk(g + k0 + k, lines, Eigen::InnerStride<>(len));
      const Strided vk(v + k0 + k, lines, Eigen::InnerStride<>(len));
      norm(k) = rescaled_norm(f.c.u_g * gk + f.c.u_v * vk, sumsq(k));
    }
    Eigen::Array<T, max_width, 1> scale_buf;
    auto scale = scale_buf.head(n);
    scale = f.step / norm.max(f.eps);
    for (Index l = 0; l < lines; ++l) {
      const Index at = l * len + k0;
      Seg wl(w + at, n), vl(v + at, n);
      ConstSeg gl(g + at, n);
      wl = f.keep * wl - scale * (f.c.u_g * gl + f.c.u_v * vl);
      vl = f.c.v_v * vl + f.c.v_g * gl;
    }
  });
}

}  // namespace matopt::detail

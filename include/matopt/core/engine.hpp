#pragma once
// The dense products of Newton–Schulz, on column-major contiguous matrices, with the engine chosen at
// configure time: Eigen's own (default) or BLAS (MATOPT_USE_BLAS: cblas sgemm/ssyrk and double versions,
// e.g. Debian's OpenBLAS). Cost model and targets: shared/design/performance.md.
//
// Eigen engine: the products are cut into fixed tiles (kTile, never derived from the thread count), each
// computed by one thread with Eigen's single-threaded kernels, so results are bitwise identical for any
// number of threads. BLAS engine: one call per product; the BLAS library threads it.

#include <algorithm>

#include <Eigen/Core>

#include "matopt/config.hpp"
#include "matopt/core/norms.hpp"
#include "matopt/core/parallel.hpp"

#if defined(MATOPT_USE_BLAS)
#include <cblas.h>
#endif

namespace matopt::detail {

template <class T>
using ColMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>>;

/// Edge of the square tiles of the Eigen engine's products.
inline constexpr Index kTile = 256;

/// The name of the configured engine.
inline constexpr const char* gemm_engine_name() {
#if defined(MATOPT_USE_BLAS)
  return "blas";
#else
  return "eigen";
#endif
}

namespace tiles {
inline Index count(Index n) { return (n + kTile - 1) / kTile; }
inline Index begin(Index t) { return t * kTile; }
inline Index size(Index t, Index n) { return std::min(kTile, n - t * kTile); }
/// Lower-triangle tile t of an nt x nt tiling as (row, col), row >= col.
inline void lower(Index t, Index& i, Index& j) {
  i = 0;
  while ((i + 1) * (i + 2) / 2 <= t) ++i;
  j = t - i * (i + 1) / 2;
}
}  // namespace tiles

/// C <- alpha L R + beta C for one tile, without temporaries: Eigen rewrites `alpha * (L * R)` as
/// `(alpha * L) * R`, and its matrix-vector kernel copies a scaled operand into a heap temporary.
template <class T, class C, class L, class R>
void product_tile(T alpha, const L& l, const R& r, T beta, C&& c) {
  if (alpha == T(0)) {
    if (beta == T(0))
      c.setZero();
    else
      c *= beta;
    return;
  }
  if (beta == T(0)) {
    c.noalias() = l * r;
  } else {
    c *= beta / alpha;
    c.noalias() += l * r;
  }
  if (alpha != T(1)) c *= alpha;
}

/// Lower triangle of C (n x n) <- alpha * A A^T + beta * C, A n x k (beta == 0: C's old values ignored).
/// The strict upper triangle of C is not referenced.
template <class T>
void syrk_lower(T alpha, const ColMap<T>& a, T beta, ColMap<T>& c) {
  const Index n = a.rows();
#if defined(MATOPT_USE_BLAS)
  if constexpr (std::is_same_v<T, float>)
    cblas_ssyrk(CblasColMajor, CblasLower, CblasNoTrans, int(n), int(a.cols()), alpha, a.data(), int(n), beta,
                c.data(), int(n));
  else
    cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, int(n), int(a.cols()), alpha, a.data(), int(n), beta,
                c.data(), int(n));
#else
  const Index nt = tiles::count(n);
  parallel_for(nt * (nt + 1) / 2, [&](Index t) {
    Index i, j;
    tiles::lower(t, i, j);
    const Index r0 = tiles::begin(i), rn = tiles::size(i, n), c0 = tiles::begin(j), cn = tiles::size(j, n);
    auto cij = c.block(r0, c0, rn, cn);
    if (i == j) {
      if (beta == T(0))
        cij.template triangularView<Eigen::Lower>().setZero();
      else
        cij.template triangularView<Eigen::Lower>() *= beta;
      cij.template selfadjointView<Eigen::Lower>().rankUpdate(a.middleRows(r0, rn), alpha);
    } else {
      product_tile(alpha, a.middleRows(r0, rn), a.middleRows(c0, cn).transpose(), beta, cij);
    }
  });
#endif
}

/// C (m x n) <- alpha * A B + beta * C with A m x k, B k x n (beta == 0: C's old values ignored).
template <class T>
void gemm(T alpha, const ColMap<T>& a, const ColMap<T>& b, T beta, ColMap<T>& c) {
  const Index m = a.rows(), k = a.cols(), n = b.cols();
#if defined(MATOPT_USE_BLAS)
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), alpha, a.data(), int(m),
                b.data(), int(k), beta, c.data(), int(m));
  else
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), alpha, a.data(), int(m),
                b.data(), int(k), beta, c.data(), int(m));
#else
  (void)k;
  const Index mt = tiles::count(m), nt = tiles::count(n);
  parallel_for(mt * nt, [&](Index t) {
    const Index i = t % mt, j = t / mt;
    const Index r0 = tiles::begin(i), rn = tiles::size(i, m), c0 = tiles::begin(j), cn = tiles::size(j, n);
    product_tile(alpha, a.middleRows(r0, rn), b.middleCols(c0, cn), beta, c.block(r0, c0, rn, cn));
  });
#endif
}

/// Copies the lower triangle of the square matrix C onto its upper triangle.
template <class T>
void mirror_lower(ColMap<T>& c) {
  c.template triangularView<Eigen::StrictlyUpper>() = c.transpose();
}

/// The Eigen path's engine for the backend-generic algorithms (precondition/ns_algorithm.hpp): the
/// configured GEMM engine's products on column-major maps.
struct HostEngine {
  template <class M>
  using scalar_t = typename M::Scalar;

  template <class T>
  static T norm(const ColMap<T>& x) { return robust_norm(x); }
  template <class T>
  static void scale(ColMap<T>& x, T s) { x *= s; }
  template <class T>
  static bool empty(const ColMap<T>& x) { return x.size() == 0; }
  template <class T>
  static void syrk_lower(T alpha, const ColMap<T>& a, T beta, ColMap<T>& c) { detail::syrk_lower(alpha, a, beta, c); }
  template <class T>
  static void gemm(T alpha, const ColMap<T>& a, const ColMap<T>& b, T beta, ColMap<T>& c) {
    detail::gemm(alpha, a, b, beta, c);
  }
  template <class T>
  static void mirror_lower(ColMap<T>& c) { detail::mirror_lower(c); }
  template <class T>
  static void copy_lower(const ColMap<T>& src, ColMap<T>& dst) {
    dst.template triangularView<Eigen::Lower>() = src;
  }
  template <class T>
  static void add_diagonal(ColMap<T>& c, T v) { c.diagonal().array() += v; }
  template <class T>
  static void copy(const ColMap<T>& src, ColMap<T>& dst) { dst = src; }
};

}  // namespace matopt::detail

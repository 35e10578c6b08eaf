// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: the host engine: Newton–Schulz's dense products (Eigen or BLAS) and the scalings' updates (namespace
/// detail only).
// The dense products of Newton–Schulz, on contiguous matrices of either storage order (all operands of
// one call in the same order), with the engine chosen at
// configure time (CMake MATOPT_GEMM_ENGINE: auto, the default, takes BLAS when one is found): Eigen's own or BLAS
// (MATOPT_USE_BLAS: cblas sgemm/ssyrk and double versions, e.g. Debian's OpenBLAS; float GEMMs of at most
// kBlasSmallFloatProduct multiply-adds still use Eigen's kernel). Cost model and targets:
// docs/performance.md#targets-and-cost-model.
//
// Eigen engine: the products are cut into fixed tiles (kTile, never derived from the thread count), each
// computed by one thread with Eigen's single-threaded kernels, so results are bitwise identical for any
// number of threads. BLAS engine: one call per product; the BLAS library threads it. The batched step
// (core/optimizer.hpp) calls it from several threads at once only inside a SerialEngineScope.

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <Eigen/Core>

#include "matopt/config.hpp"
#include "matopt/core/detail/norms.hpp"
#include "matopt/core/detail/parallel.hpp"
#include "matopt/core/detail/strided.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/precondition/detail/fused_normalize.hpp"

#if defined(MATOPT_USE_BLAS)
#include <mutex>

#include <cblas.h>
#endif

namespace matopt::detail {

/// A contiguous matrix in storage order Order (Eigen::ColMajor or Eigen::RowMajor).
template <class T, int Order = Eigen::ColMajor>
using DenseMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>>;
template <class T>
using ColMap = DenseMap<T, Eigen::ColMajor>;

/// Edge of the square tiles of the Eigen engine's products.
inline constexpr Index kTile = 256;

/// Whether the configured engine threads its products itself (BLAS) rather than through matopt's tiles.
#if defined(MATOPT_USE_BLAS)
inline constexpr bool kEngineThreads = true;
#else
inline constexpr bool kEngineThreads = false;
#endif

/// While alive, the configured engine computes each product on the calling thread alone, so that several
/// of matopt's threads may call it at once without oversubscribing the cores (the batched step). The Eigen
/// engine's tiles need nothing. Under the BLAS engine only OpenBLAS can be told so: its thread count is
/// set to 1 (openblas_set_num_threads, a process-wide setting) while any scope is alive, and restored when
/// the last one ends. A product computed by single-threaded OpenBLAS may differ in the last bits from the
/// threaded one (its kernels and blocking differ), never with the number of matopt's threads.
#if defined(MATOPT_USE_BLAS) && defined(OPENBLAS_VERSION)
inline constexpr bool kEngineSerializable = true;
class SerialEngineScope {
 public:
  SerialEngineScope() {
    const std::lock_guard<std::mutex> lock(shared().mutex);
    if (shared().holders++ == 0) {
      shared().saved = openblas_get_num_threads();
      openblas_set_num_threads(1);
    }
  }
  ~SerialEngineScope() {
    const std::lock_guard<std::mutex> lock(shared().mutex);
    if (--shared().holders == 0) openblas_set_num_threads(shared().saved);
  }
  SerialEngineScope(const SerialEngineScope&) = delete;
  SerialEngineScope& operator=(const SerialEngineScope&) = delete;

 private:
  struct Shared {  // one per process: scopes of optimizers stepping in different threads nest correctly
    std::mutex mutex;
    int holders = 0;
    int saved = 1;
  };
  static Shared& shared() {
    static Shared s;
    return s;
  }
};
#else
inline constexpr bool kEngineSerializable = !kEngineThreads;
struct SerialEngineScope {};
#endif

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
template <class T, int Order>
void syrk_lower(T alpha, const DenseMap<T, Order>& a, T beta, DenseMap<T, Order>& c) {
  const Index n = a.rows();
#if defined(MATOPT_USE_BLAS)
  const auto order = Order == Eigen::RowMajor ? CblasRowMajor : CblasColMajor;
  const int lda = int(a.outerStride()), ldc = int(c.outerStride());
  if constexpr (std::is_same_v<T, float>)
    cblas_ssyrk(order, CblasLower, CblasNoTrans, int(n), int(a.cols()), alpha, a.data(), lda, beta, c.data(), ldc);
  else
    cblas_dsyrk(order, CblasLower, CblasNoTrans, int(n), int(a.cols()), alpha, a.data(), lda, beta, c.data(), ldc);
#else
  const Index nt = tiles::count(n);
  parallel_for_products(nt * (nt + 1) / 2, [&](Index t) {
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

/// Under the BLAS engine, float products of at most this many multiply-adds (m n k) use Eigen's kernel instead:
/// OpenBLAS's small-matrix SGEMM kernel for AVX-512 CPUs (0.3.21, sgemm_small_kernel_nn_SKYLAKEX) mallocs a buffer
/// on every call (every allocating shape of a sweep had m n k below 1e6: `docs/design.md#workspace-and-allocation`),
/// and a step allocates nothing
/// (tests/test_allocation.cpp). Eigen's kernel allocates nothing at these sizes.
inline constexpr double kBlasSmallFloatProduct = 1e6;

/// C (m x n) <- alpha * A B + beta * C with A m x k, B k x n (beta == 0: C's old values ignored).
template <class T, int Order>
void gemm(T alpha, const DenseMap<T, Order>& a, const DenseMap<T, Order>& b, T beta, DenseMap<T, Order>& c) {
  const Index m = a.rows(), n = b.cols(), k = a.cols();
#if defined(MATOPT_USE_BLAS)
  const auto order = Order == Eigen::RowMajor ? CblasRowMajor : CblasColMajor;
  const int lda = int(a.outerStride()), ldb = int(b.outerStride()), ldc = int(c.outerStride());
  if constexpr (std::is_same_v<T, float>) {
    if (double(m) * double(n) * double(k) > kBlasSmallFloatProduct) {
      cblas_sgemm(order, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), alpha, a.data(), lda, b.data(), ldb,
                  beta, c.data(), ldc);
      return;
    }
  } else {
    cblas_dgemm(order, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), alpha, a.data(), lda, b.data(), ldb, beta,
                c.data(), ldc);
    return;
  }
#endif
  (void)k;
  const Index mt = tiles::count(m), nt = tiles::count(n);
  parallel_for_products(mt * nt, [&](Index t) {
    const Index i = t % mt, j = t / mt;
    const Index r0 = tiles::begin(i), rn = tiles::size(i, m), c0 = tiles::begin(j), cn = tiles::size(j, n);
    product_tile(alpha, a.middleRows(r0, rn), b.middleCols(c0, cn), beta, c.block(r0, c0, rn, cn));
  });
}

/// In the n x n column-major array c, copies the strictly lower triangle onto the strictly upper one
/// (from_lower) or the other way round, in 64 x 64 blocks. Each off-diagonal block goes through a local
/// buffer, so that both the copy in and the copy out run along contiguous columns: a direct transposed copy
/// walks one matrix with a stride of n elements, which for power-of-two n maps every row of a block onto
/// the same few cache sets (about 3x slower at 2048^2: docs/results/performance-log.md). Serial: a second
/// thread gained too little to pay for an OpenMP region between two BLAS calls.
template <class T>
void mirror_triangle(T* c, Index n, bool from_lower) {
  constexpr Index kBlock = 64;
  ColMap<T> m(c, n, n);
  Eigen::Matrix<T, kBlock, kBlock> buffer;
  for (Index j0 = 0; j0 < n; j0 += kBlock) {
    const Index bj = std::min(kBlock, n - j0);
    for (Index i0 = j0; i0 < n; i0 += kBlock) {  // block (i0, j0) of the lower triangle and its mirror (j0, i0)
      const Index bi = std::min(kBlock, n - i0);
      if (i0 == j0) {
        auto d = m.block(i0, i0, bi, bi);
        if (from_lower)
          d.template triangularView<Eigen::StrictlyUpper>() = d.transpose();
        else
          d.template triangularView<Eigen::StrictlyLower>() = d.transpose();
      } else if (from_lower) {
        auto t = buffer.topLeftCorner(bi, bj);
        t = m.block(i0, j0, bi, bj);
        m.block(j0, i0, bj, bi) = t.transpose();
      } else {
        auto t = buffer.topLeftCorner(bj, bi);
        t = m.block(j0, i0, bj, bi);
        m.block(i0, j0, bi, bj) = t.transpose();
      }
    }
  }
}

/// Copies the lower triangle of the square matrix C onto its upper triangle. (The lower triangle of a
/// row-major matrix is the upper triangle of the same memory read column-major.)
template <class T, int Order>
void mirror_lower(DenseMap<T, Order>& c) {
  mirror_triangle(c.data(), c.rows(), Order == Eigen::ColMajor);
}

/// lower(dst) <- lower(src), both square, contiguous, in the same storage order.
template <class T, int Order>
void copy_lower(const DenseMap<T, Order>& src, DenseMap<T, Order>& dst) {
  const Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>> s(src.data(), src.rows(), src.cols());
  ColMap<T> d(dst.data(), dst.rows(), dst.cols());
  if constexpr (Order == Eigen::RowMajor)
    d.template triangularView<Eigen::Upper>() = s;
  else
    d.template triangularView<Eigen::Lower>() = s;
}

/// The host's engine for the backend-generic algorithms: Newton–Schulz (precondition/detail/ns_algorithm.hpp) and
/// OnEngine policies with the configured GEMM engine's products on contiguous maps (M = DenseMap<T, Order>, one
/// order per run), a scaling's update on Eigen expressions (behind a host form), and the operations on views
/// (Strided) of the engine step (core/detail/engine_step.hpp) and the engine forms.
struct HostEngine {
  template <class M>
  using scalar_t = typename M::Scalar;

  template <class M, class = typename M::Scalar>
  static auto norm(const M& x) { return robust_norm(x); }
  template <class M>
  static void scale(M& x, typename M::Scalar s) { x *= s; }
  template <class M, class = typename M::Scalar>
  static bool empty(const M& x) { return x.size() == 0; }
  template <class M>
  static void syrk_lower(typename M::Scalar alpha, const M& a, typename M::Scalar beta, M& c) {
    detail::syrk_lower(alpha, a, beta, c);
  }
  template <class M>
  static void gemm(typename M::Scalar alpha, const M& a, const M& b, typename M::Scalar beta, M& c) {
    detail::gemm(alpha, a, b, beta, c);
  }
  template <class M>
  static void mirror_lower(M& c) { detail::mirror_lower(c); }
  template <class M>
  static void copy_lower(const M& src, M& dst) { detail::copy_lower(src, dst); }
  template <class M>
  static void add_diagonal(M& c, typename M::Scalar v) { c.diagonal().array() += v; }
  template <class M, class = typename M::Scalar>
  static void copy(const M& src, M& dst) { dst = src; }
  /// Turbo-Muon's AOL scaling (ns_algorithm.hpp): d = 1 / sqrt(max(row sums of |A|, eps)) in scratch's first
  /// column; X <- diag(d) X, A <- diag(d) A diag(d).
  template <class M>
  static void aol_scale(M& x, M& a, M& scratch, typename M::Scalar eps) {
    auto d = scratch.col(0);
    d = a.cwiseAbs().rowwise().sum().cwiseMax(eps).cwiseSqrt().cwiseInverse();
    x.array().colwise() *= d.array();
    a.array().colwise() *= d.array();
    a.array().rowwise() *= d.transpose().array();
  }

  // The scaling operations (a scaling's update(e, w, d, g, ...), scaling/*.hpp), on Eigen expressions: W any
  // writable matrix (a Map, a Block, a row block's indexed view), D and G any expressions, evaluated
  // coefficient-wise and never stored.
  template <class M>
  static Index rows(const M& x) { return x.rows(); }
  template <class M>
  static Index cols(const M& x) { return x.cols(); }
  /// W <- keep W - step D. Always inlined: GCC 12 kept this loop out of line behind a host form on Eigen maps, where
  /// it ran 1.3x slower (D = sign(U) at 256^2: bench/results/2026-12-05-driver-ab.txt).
  template <class W, class D>
  EIGEN_ALWAYS_INLINE static void update(W& w, typename W::Scalar keep, typename W::Scalar step, const D& d) {
    if (keep != typename W::Scalar(1))
      w = keep * w - step * d;
    else
      w -= step * d;
  }
  /// W <- keep W - step D where D . W >= 0, W - step D elsewhere: one loop in W's storage order (an Eigen select
  /// expression per direction type cost 5 s of compile time per preset; cautious decay is opt-in).
  template <class W, class D>
  static void cautious_update(W& w, typename W::Scalar keep, typename W::Scalar step, const D& d) {
    using T = typename W::Scalar;
    constexpr bool row_major = bool(W::Flags & Eigen::RowMajorBit);
    const Index outer = row_major ? w.rows() : w.cols(), inner = row_major ? w.cols() : w.rows();
    for (Index o = 0; o < outer; ++o)
      for (Index i = 0; i < inner; ++i) {
        const Index r = row_major ? o : i, c = row_major ? i : o;
        const T x = w(r, c), u = d(r, c);
        w(r, c) = (x * u >= T(0) ? keep * x : x) - step * u;
      }
  }
  /// a W + b D, an expression of W and D, read when it is evaluated (a device engine writes it over D instead).
  template <class W, class D>
  static auto combined(typename W::Scalar a, const W& w, typename W::Scalar b, const D& d) {
    return a * w + b * d;
  }
  /// A power iteration's vectors u (W's rows) and v (its columns) behind a host form: the caller's own
  /// (SpectralCap's State).
  template <class W, class V>
  struct Vectors {
    const W& w;
    V& u;
    V& v;
    using T = typename V::Scalar;
    T forward() {  // u <- W v
      u.noalias() = w * v;
      return u.norm();
    }
    void normalize_u(T norm) { u /= norm; }
    T backward() {  // v <- W^T u
      v.noalias() = w.transpose() * u;
      return v.norm();
    }
    void normalize_v(T norm) { v /= norm; }
    /// Copies u and v back to the caller's vectors (nothing to do here).
    void store(V&, V&) const {}
    /// u^T D v, one coefficient-wise pass over D.
    template <class D>
    T bilinear(const D& d) const {
      return T(d.cwiseProduct(u.lazyProduct(v.transpose())).sum());
    }
    /// D - c u v^T, an expression.
    template <class D>
    auto minus_rank1(const D& d, T c) const {
      return d - c * u.lazyProduct(v.transpose());
    }
  };
  /// The vectors of a power iteration on W, starting from v (u sized as W's rows).
  template <class W, class V>
  static Vectors<W, V> singular_vectors(const W& w, V& u, V& v) {
    return {w, u, v};
  }

  // Views of host memory on any dense strides (Strided): the operations, as the device engines name them, of the
  // policies written once over views for every engine (DionPowerIteration::run).
  /// f(x as an Eigen map): a column-major map with x's column stride, or the transpose of one.
  template <class T, class F>
  static decltype(auto) as_map(const Strided<T>& x, F&& f) {
    using Plain = Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, Eigen::Dynamic>;
    using Map = Eigen::Map<std::conditional_t<std::is_const_v<T>, const Plain, Plain>, 0, Eigen::OuterStride<>>;
    MATOPT_ASSERT(x.rs == 1 || x.cs == 1);
    if (x.rs == 1) return f(Map(x.data, x.rows, x.cols, Eigen::OuterStride<>(std::max(x.cs, x.rows))));
    return f(Map(x.data, x.cols, x.rows, Eigen::OuterStride<>(std::max(x.rs, x.cols))).transpose());
  }
  /// f(maps of the views) for an element-wise operation: one vector each where every view is dense and laid out
  /// alike (one linear pass, as on contiguous matrices), else as_map of each.
  template <class F, class V0, class... V>
  static void elementwise(F&& f, const V0& v0, const V&... v) {
    const auto dense = [&](const auto& x) {
      return x.rs == v0.rs && x.cs == v0.cs && is_dense(x);
    };
    if (dense(v0) && (dense(v) && ...)) return f(as_vector(v0), as_vector(v)...);
    maps(f, v0, v...);
  }
  template <class T>
  static auto as_vector(const Strided<T>& x) {
    using Plain = Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, 1>;
    return Eigen::Map<std::conditional_t<std::is_const_v<T>, const Plain, Plain>>(x.data, x.size());
  }
  template <class F, class V0, class... V>
  static void maps(F& f, const V0& v0, const V&... v) {
    as_map(v0, [&](auto&& m0) {
      if constexpr (sizeof...(V) == 0) {
        f(m0);
      } else {
        auto rest = [&](auto&&... ms) { f(m0, ms...); };
        maps(rest, v...);
      }
    });
  }
  /// out = a x + b y, element-wise.
  template <class T>
  static void combine(const Strided<T>& out, NotDeduced<T> a, ConstView<T> x, NotDeduced<T> b, ConstView<T> y) {
    elementwise([&](auto&& o, const auto& xm, const auto& ym) { o = a * xm + b * ym; }, out, x, y);
  }
  /// out = x.
  template <class T>
  static void copy(ConstView<T> x, const Strided<T>& out) {
    elementwise([&](auto&& o, const auto& xm) { o = xm; }, out, x);
  }
  /// out = g with its non-finite entries zeroed (NonFinite::Zero).
  template <class T>
  static void clean(const Strided<T>& out, ConstView<T> g) {
    elementwise([](auto&& o, const auto& gm) { o = gm.unaryExpr([](T x) { return std::isfinite(x) ? x : T(0); }); },
                out, g);
  }
  /// Whether every entry of x is finite (traits.hpp's all_finite: one vectorized pass, in parallel when dense).
  template <class T>
  static bool all_finite(const Strided<T>& x) {
    bool finite = true;
    elementwise([&](const auto& m) { finite = detail::all_finite(m); }, x);
    return finite;
  }
  /// Frobenius norm without overflow or underflow (norms.hpp); a dense x as one vector, summed in the order of a
  /// contiguous matrix.
  template <class T>
  static std::remove_const_t<T> norm(const Strided<T>& x) {
    if (is_dense(x)) return robust_norm(as_vector(x));
    return as_map(x, [](const auto& m) { return robust_norm(m); });
  }
  /// C = alpha A B + beta C (beta = 0: C not read; C overlaps neither A nor B): Eigen's product, the operands'
  /// transposes folded into it (a row-major C as C^T = B^T A^T).
  template <class T>
  static void gemm(NotDeduced<T> alpha, ConstView<T> a, ConstView<T> b, NotDeduced<T> beta, const Strided<T>& c) {
    if (c.rs != 1) return gemm<T>(alpha, b.t(), a.t(), beta, c.t());
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>, 0, Eigen::OuterStride<>> cm(
        c.data, c.rows, c.cols, Eigen::OuterStride<>(std::max(c.cs, c.rows)));
    as_map(a, [&](const auto& am) {
      as_map(b, [&](const auto& bm) {
        if (beta == T(0)) {
          cm.noalias() = alpha * am * bm;
        } else {
          if (beta != T(1)) cm *= beta;
          cm.noalias() += alpha * am * bm;
        }
      });
    });
  }
  // The rest of the operations of the preconditioners' engine forms (core/detail/engine_form.hpp) on host memory.
  /// Newton–Schulz runs on either storage order: Orthogonalize's engine form lays X out as U is, so that forming it
  /// is a straight copy (the device engines' products are column-major).
  static constexpr bool any_order = true;
  /// Host memory is the engine's: n elements copied (nothing when both are one buffer).
  template <class T>
  static void download(const T* from, Index n, T* to) {
    if (from != to) std::copy_n(from, n, to);
  }
  template <class T>
  static void upload(const T* from, Index n, T* to) {
    download(from, n, to);
  }
  /// X <- sign(X) (sign(0) = 0), in place.
  template <class T>
  static void sign(const Strided<T>& x) {
    elementwise([](auto&& m) { m = sign_of(m); }, x);
  }
  /// X <- s X, in place.
  template <class T>
  static void scale(const Strided<T>& x, NotDeduced<T> s) {
    elementwise([&](auto&& m) { m *= s; }, x);
  }
  /// inv[i] = 1 / max(||row i of U||, eps), each norm without overflow or underflow (norms.hpp).
  template <class T>
  static void inverse_row_norms(ConstView<T> u, NotDeduced<T> eps, T* inv) {
    as_map(u, [&](const auto& m) {
      for (Index i = 0; i < m.rows(); ++i)
        inv[i] = T(1) / std::max(rescaled_norm(m.row(i), m.row(i).squaredNorm()), T(eps));
    });
  }
  /// Row i of X times s[i], in place.
  template <class T>
  static void scale_rows(const Strided<T>& x, const T* s) {
    as_map(x, [&](auto&& m) {
      m.array().colwise() *= Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(s, m.rows()).array();
    });
  }
  /// A whole RowNormalize + Static step in one pass over W, G and V, each laid out as W with unit inner stride, lines
  /// at least their length apart (ColNormalize: pass transposes): along it where W is stored by rows, across it
  /// otherwise, with ws's `partial` and `scale` scratch (NormalizeLines::reserve). A single row or column takes the
  /// pass of its storage order, told by W's strides (a column-major 1 x n has both strides 1), so that a row block
  /// steps as the rows of the whole matrix do.
  template <class T, class WS>
  static void fused_normalize_rows(const Strided<T>& w, ConstView<T> g, const Strided<T>& v, const FusedStep<T>& f,
                                   WS& ws) {
    // Lines (rows, or columns) of contiguous elements, at least their length apart; a single row or column is both.
    [[maybe_unused]] const auto by_rows = [](const auto& x) {
      return (x.cols <= 1 || x.cs == 1) && (x.rows <= 1 || x.rs >= x.cols);
    };
    [[maybe_unused]] const auto by_cols = [](const auto& x) {
      return (x.rows <= 1 || x.rs == 1) && (x.cols <= 1 || x.cs >= x.rows);
    };
    if (w.cs == 1 && (w.rs != 1 || w.rows > 1 || w.cols == 1)) {
      MATOPT_ASSERT(by_rows(w) && by_rows(g) && by_rows(v));
      fused_normalize_along(w.data, w.rs, g.data, g.rs, v.data, v.rs, w.rows, w.cols, f);
    } else {
      MATOPT_ASSERT(by_cols(w) && by_cols(g) && by_cols(v));
      fused_normalize_across(w.data, w.cs, g.data, g.cs, v.data, v.cs, w.cols, w.rows, f, ws.partial.data(),
                             ws.scale.data());
    }
  }
  /// A whole step of an entry-wise preconditioner (D = direction(U): Identity, Sign) under Static in one element-wise
  /// pass over W, G and V (laid out alike): W <- keep W - step D (cautious: keep only where D . W >= 0), then
  /// V <- v_v V + v_g G, chunk by chunk so that G and V are read from memory once (dense views: in parallel pieces of
  /// a fixed size); U is never stored.
  template <class T, class Direction>
  static void fused_update_entries(const Strided<T>& w, ConstView<T> g, const Strided<T>& v, const FusedStep<T>& f,
                                   const Direction& direction) {
    const auto step = [&f, &direction](auto&& wm, const auto& gm, auto&& vm) {
      const auto u = f.c.u_g * gm + f.c.u_v * vm;
      const auto d = direction(u);
      if (f.cautious) cautious_update(wm, f.keep, f.step, d);
      else update(wm, f.keep, f.step, d);
      vm = f.c.v_v * vm + f.c.v_g * gm;
    };
    elementwise(
        [&](auto&& wm, const auto& gm, auto&& vm) {
          if constexpr (remove_cvref_t<decltype(wm)>::ColsAtCompileTime == 1) {  // dense: one vector each
            constexpr Index chunk = 4096;
            parallel_for((wm.size() + chunk - 1) / chunk, [&](Index c) {
              const Index at = c * chunk, k = std::min(chunk, wm.size() - at);
              auto wc = wm.segment(at, k);
              auto vc = vm.segment(at, k);
              step(wc, gm.segment(at, k), vc);
            });
          } else {
            step(wm, gm, vm);
          }
        },
        w, g, v);
  }
  /// out[i] = ||row i of U||^2.
  template <class T>
  static void row_squared_norms(ConstView<T> u, T* out) {
    as_map(u, [&](const auto& m) {
      Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(out, m.rows()) = m.rowwise().squaredNorm();
    });
  }
  /// S <- b S + (1 - b) D.D, then D <- D / (sqrt(S) + eps), S laid out as D.
  template <class T>
  static void moment_normalize(const Strided<T>& d, const Strided<T>& s, NotDeduced<T> b, NotDeduced<T> eps) {
    elementwise(
        [&](auto&& dm, auto&& sm) {
          sm = b * sm + (T(1) - b) * dm.cwiseAbs2();
          dm = (dm.array() / (sm.array().sqrt() + eps)).matrix();
        },
        d, s);
  }
  /// sum(x . y) over n contiguous elements.
  template <class T>
  static T dot(const T* x, const T* y, Index n) {
    using V = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>;
    return V(x, n).dot(V(y, n));
  }
  /// The host engine keeps no scratch of its own.
  static void reserve(Index, Index) {}
  /// W <- keep W - step D, and its cautious form, on views (row blocks' runs, the engine forms' scalings).
  template <class T>
  static void update(const Strided<T>& w, NotDeduced<T> keep, NotDeduced<T> step, ConstView<T> d) {
    elementwise([&](auto&& wm, const auto& dm) { update(wm, keep, step, dm); }, w, d);
  }
  template <class T>
  static void cautious_update(const Strided<T>& w, NotDeduced<T> keep, NotDeduced<T> step, ConstView<T> d) {
    elementwise([&](auto&& wm, const auto& dm) { cautious_update(wm, keep, step, dm); }, w, d);
  }
  /// y = alpha A x + beta y (y not read when beta = 0; x: A's columns, y: its rows; y overlaps neither A nor x).
  template <class T>
  static void gemv(NotDeduced<T> alpha, ConstView<T> a, const T* x, NotDeduced<T> beta, T* y) {
    MATOPT_ASSERT(y + a.rows <= x || x + a.cols <= y);
    as_map(a, [&](const auto& am) {
      Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>> ym(y, am.rows());
      const Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>> xm(x, am.cols());
      if (beta == T(0)) {
        ym.noalias() = alpha * am * xm;
      } else {
        ym *= beta;
        ym.noalias() += alpha * am * xm;
      }
    });
  }
  /// u^T D v, one coefficient-wise pass over D.
  template <class T>
  static T bilinear(const T* u, ConstView<T> d, const T* v) {
    return as_map(d, [&](const auto& dm) {
      const Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>> um(u, dm.rows()), vm(v, dm.cols());
      return T(dm.cwiseProduct(um.lazyProduct(vm.transpose())).sum());
    });
  }
  /// D <- D + alpha x y^T, in place.
  template <class T>
  static void rank1(const Strided<T>& d, NotDeduced<T> alpha, const T* x, const T* y) {
    as_map(d, [&](auto&& dm) {
      const Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>> xm(x, dm.rows()), ym(y, dm.cols());
      dm += alpha * xm.lazyProduct(ym.transpose());
    });
  }
  /// lower(C) = X X^T in T for the column-major k x l X and k x k C (Adaptive's Gram).
  template <class T>
  static void gram_lower(const Strided<T>& x, const Strided<T>& c) {
    MATOPT_ASSERT(x.rs == 1 && c.rs == 1);
    const ColMap<T> xm(x.data, x.rows, x.cols);
    ColMap<T> cm(c.data, c.rows, c.cols);
    detail::syrk_lower(T(1), xm, T(0), cm);
  }
};

}  // namespace matopt::detail

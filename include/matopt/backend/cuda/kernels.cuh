// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: the CUDA backend's kernels, launched by cuda::Engine (namespace cuda::detail only).
// The CUDA backend's kernels (launched by cuda::Engine, engine.cuh). Every kernel is a grid-stride loop,
// so any shape runs with a bounded grid; every reduction has a fixed shape-derived layout (never the
// device's SM count), so results are bitwise repeatable run to run.
//
//  - element-wise: one 2-D kernel, for_each_element, over (inner, outer, batch) where `inner` is the
//    output's unit-stride dimension: coalesced, no integer division; the operation is a functor on (i, j, b).
//  - norms (core/detail/norms.hpp's overflow-safe rule, per segment = per matrix of a batch): partial sums of
//    squares and maxima per fixed chunk, a per-segment finish, then (only where the plain sum left the
//    normal range) a rescaled pass a * ||x / a||. Results stay on the device; the engine copies one value
//    to pinned memory.
//  - rows (RowNormalize / ColNormalize, fused_normalize.hpp's shapes): "along" when a row is contiguous, one
//    warp or one block per row, the row held in registers, so G and V are read once (20 B per fp32 element
//    for the whole fused step); "across" (strided rows) in two passes: partial sums of squares over column
//    chunks (thread per row, coalesced over rows), then the per-row finish, then the element-wise update.
//  - triangles: mirror_lower through 32 x 32 shared-memory tiles (coalesced reads and writes).
//  - sums (dot products, u^T D v): the norms' fixed chunks, then one block for the chunk sums.

#include <cstddef>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "matopt/backend/cuda/errors.cuh"
#include "matopt/backend/detail/element_ops.hpp"
#include "matopt/backend/device_optimizer.hpp"
#include "matopt/core/detail/norm_rule.hpp"
#include "matopt/precondition/detail/fused_normalize.hpp"

namespace matopt::cuda::detail {

using matopt::detail::finite_value;
using matopt::detail::normal_sumsq;
using matopt::detail::rescaled;
using matopt::detail::FusedStep;
using matopt::detail::Strided;
// The element-wise operations shared with the Thrust engine (backend/detail/element_ops.hpp).
using matopt::detail::AddDiagonalOp;
using matopt::detail::AxpbyOp;
using matopt::detail::CautiousUpdateOp;
using matopt::detail::CleanOp;
using matopt::detail::CopyLowerOp;
using matopt::detail::CopyOp;
using matopt::detail::Mat;
using matopt::detail::mat;
using matopt::detail::MirrorOp;
using matopt::detail::MomentNormalizeOp;
using matopt::detail::Rank1Op;
using matopt::detail::ScaleBothOp;
using matopt::detail::ScaleOp;
using matopt::detail::ScaleRowsOp;
using matopt::detail::SignOp;

inline constexpr int kWarp = 32;
inline constexpr int kBlock = 256;            ///< threads per block of the element-wise and reduction kernels
inline constexpr unsigned kMaxGridY = 65535;  ///< CUDA's limit on gridDim.y and gridDim.z

MATOPT_HOST_DEVICE inline Index ceil_div(Index a, Index b) { return (a + b - 1) / b; }
MATOPT_HOST_DEVICE inline Index index_min(Index a, Index b) { return a < b ? a : b; }
MATOPT_HOST_DEVICE inline Index index_max(Index a, Index b) { return a > b ? a : b; }

// Correctly rounded arithmetic without FMA contraction: a per-matrix scalar evaluated on the device equals
// the host's T arithmetic bit for bit.
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double div_rn(double a, double b) { return __ddiv_rn(a, b); }

struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return fmax(a, b);
  }
};

/// Reduces v over the warp; every lane returns lane 0's total (one association order for all lanes).
template <class T, class Op>
__device__ T warp_reduce(T v, Op op) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  return __shfl_sync(0xffffffffu, v, 0);
}

/// Reduces v over a 1-D block (blockDim.x a multiple of 32); every thread returns the same total. `shared`
/// holds kWarp values; the trailing barrier lets the caller reuse it at once.
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T identity, T* shared) {
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp, warps = int(blockDim.x) / kWarp;
  v = warp_reduce(v, op);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : identity;
  v = warp_reduce(v, op);
  __syncthreads();
  return v;
}

/// A reduction over a group of TPR threads: one warp (TPR = 32) or the whole block (TPR = blockDim.x).
template <int TPR, class T, class Op>
__device__ T group_reduce(T v, Op op, T identity, T* shared) {
  if constexpr (TPR == kWarp)
    return warp_reduce(v, op);
  else
    return block_reduce(v, op, identity, shared);
}

// ---------------------------------------------------------------------------------------------------------
// Element-wise operations

/// The iteration space of an element-wise kernel: inner (unit stride of the output) x outer x count.
struct Space {
  Index inner = 0, outer = 0, count = 1;
  bool rows_inner = true;  ///< inner runs over i (rows) when true, over j when false
};

/// The iteration space of `out` (its shape; its unit-stride dimension innermost), `count` matrices.
template <class T>
Space space_of(const Strided<T>& out, Index count = 1) {
  bool rows_inner;
  if (out.rows <= 1)
    rows_inner = false;
  else if (out.cols <= 1)
    rows_inner = true;
  else
    rows_inner = out.rs <= out.cs;
  return rows_inner ? Space{out.rows, out.cols, count, true} : Space{out.cols, out.rows, count, false};
}

template <class Op>
__global__ void __launch_bounds__(kBlock) for_each_element(Op op, Space s) {
  const Index i0 = Index(blockIdx.x) * blockDim.x + threadIdx.x, di = Index(gridDim.x) * blockDim.x;
  const Index o0 = Index(blockIdx.y) * blockDim.y + threadIdx.y, dout = Index(gridDim.y) * blockDim.y;
  for (Index b = blockIdx.z; b < s.count; b += gridDim.z)
    for (Index o = o0; o < s.outer; o += dout)
      for (Index in = i0; in < s.inner; in += di) {
        if (s.rows_inner)
          op(in, o, b);
        else
          op(o, in, b);
      }
}

/// Launches op over the space: blocks of 256 threads shaped (bx, 256 / bx) with bx >= the inner extent
/// (rounded to a power of two, 32..256), so short inner extents still fill the block.
template <class Op>
void launch_elements(const Op& op, Space s, cudaStream_t stream) {
  if (s.inner <= 0 || s.outer <= 0 || s.count <= 0) return;
  unsigned bx = kWarp;
  while (bx < unsigned(kBlock) && Index(bx) < s.inner) bx *= 2;
  const unsigned by = unsigned(kBlock) / bx;
  const dim3 block(bx, by);
  const dim3 grid(unsigned(index_min(ceil_div(s.inner, bx), 1 << 20)),
                  unsigned(index_min(ceil_div(s.outer, by), kMaxGridY)), unsigned(index_min(s.count, kMaxGridY)));
  for_each_element<<<grid, block, 0, stream>>>(op, s);
  MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::for_each_element");
}

template <class T>
struct ToBf16Op {  // out = x rounded to bf16 (nearest, ties to even)
  Mat<__nv_bfloat16> out;
  Mat<const T> x;
  __device__ void operator()(Index i, Index j, Index b) const { out(i, j, b) = __float2bfloat16_rn(x(i, j, b)); }
};
/// x_b *= s.at(b): a per-matrix factor (BatchScalar, batched.cuh).
template <class T, class S>
struct BatchScaleOp {
  Mat<T> x;
  S s;
  __device__ void operator()(Index i, Index j, Index b) const { x(i, j, b) *= s.at(b); }
};
/// The update sweep of the two-pass fused step (the scales are known).
template <class T>
struct FusedUpdateOp {
  Mat<T> w, v;
  Mat<const T> g;
  const T* scale;  ///< step / max(||U_i||, eps) per row
  FusedStep<T> f;
  __device__ void operator()(Index i, Index j, Index) const {
    const T gij = g(i, j, 0), vij = v(i, j, 0);
    w(i, j, 0) = f.updated(w(i, j, 0), scale[i], f.c.u_g * gij + f.c.u_v * vij);
    v(i, j, 0) = f.c.v_v * vij + f.c.v_g * gij;
  }
};

/// Lower triangle mirrored into the upper one, column-major (element (i, j) at c[b * stride + i + j * ld]),
/// through 32 x 32 tiles: block (ti, tj), ti <= tj, reads tile (tj, ti) coalesced and writes its transpose.
template <class T>
__global__ void __launch_bounds__(kWarp * 8) mirror_lower_tiles(T* c, Index n, Index ld, Index stride, Index count) {
  __shared__ T tile[kWarp][kWarp + 1];
  const Index ti = blockIdx.y, tj = blockIdx.x;
  if (ti > tj) return;  // the whole block: no barrier is skipped by part of it
  for (Index b = blockIdx.z; b < count; b += gridDim.z) {
    T* cb = c + b * stride;
    for (int k = 0; k < kWarp; k += 8) {
      const Index row = tj * kWarp + threadIdx.x, col = ti * kWarp + threadIdx.y + k;
      if (row < n && col < n)
        tile[threadIdx.y + k][threadIdx.x] = cb[row + col * ld];  // tile[p][q] = c(tj*32+q, ti*32+p)
    }
    __syncthreads();
    for (int k = 0; k < kWarp; k += 8) {
      const Index i = ti * kWarp + threadIdx.x, j = tj * kWarp + threadIdx.y + k;
      if (i < j && j < n) cb[i + j * ld] = tile[threadIdx.x][threadIdx.y + k];  // c(i, j) = c(j, i)
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------------------------------------
// Norms of segments (a whole matrix, or each matrix of a batch)

/// Element k of segment b of dense storage (any order: a Frobenius norm does not depend on it).
template <class T>
struct DenseSegments {
  const T* data;
  Index stride;  ///< elements between segments
  __device__ T operator()(Index b, Index k) const { return data[b * stride + k]; }
};
/// Element k of a (non-dense) strided matrix, column by column: one segment.
template <class T>
struct StridedElements {
  Strided<const T> x;
  __device__ T operator()(Index, Index k) const {
    const Index i = k % x.rows, j = k / x.rows;
    return x(i, j);
  }
};

/// Chunks per segment of the norm kernels: a function of the size only (results never depend on the device).
inline Index norm_chunks(Index size) { return index_max(1, index_min(1024, ceil_div(size, 8192))); }

/// Pass 1: per (chunk c, segment b), the sum of squares and max |x| of the chunk.
template <class T, class Acc>
__global__ void __launch_bounds__(kBlock)
    norm_partials(Acc x, Index size, Index count, Index chunks, T* psum, T* pmax) {
  __shared__ T shared[kWarp];
  const Index per = ceil_div(size, chunks), c = blockIdx.x;
  const Index begin = c * per, end = index_min(size, begin + per);
  for (Index b = blockIdx.y; b < count; b += gridDim.y) {
    T s = T(0), m = T(0);
    for (Index k = begin + threadIdx.x; k < end; k += blockDim.x) {
      const T v = x(b, k);
      s += v * v;
      m = fmax(m, fabs(v));
    }
    s = block_reduce(s, SumOp{}, T(0), shared);
    m = block_reduce(m, MaxOp{}, T(0), shared);
    if (threadIdx.x == 0) {
      psum[b * chunks + c] = s;
      pmax[b * chunks + c] = m;
    }
  }
}

/// Pass 2, per segment: norm = sqrt(sum) when the sum is normal (or NaN); otherwise a = max |x| and either
/// norm = a (zero or non-finite a) or aux = a > 0, which asks pass 3 for the rescaled sum.
template <class T>
__global__ void __launch_bounds__(kBlock)
    norm_finish(Index count, Index chunks, const T* psum, const T* pmax, T* norm, T* aux) {
  __shared__ T shared[kWarp];
  for (Index b = blockIdx.x; b < count; b += gridDim.x) {
    T s = T(0), m = T(0);
    for (Index c = threadIdx.x; c < chunks; c += blockDim.x) {
      s += psum[b * chunks + c];
      m = fmax(m, pmax[b * chunks + c]);
    }
    s = block_reduce(s, SumOp{}, T(0), shared);
    m = block_reduce(m, MaxOp{}, T(0), shared);
    if (threadIdx.x == 0) {
      T n = sqrt(s), a = T(0);
      if (!(normal_sumsq(s) || s != s)) {
        if (m > T(0) && finite_value(m))
          a = m;
        else
          n = m;
      }
      norm[b] = n;
      aux[b] = a;
    }
  }
}

/// Pass 3: partial sums of (x / a)^2 for the segments with aux = a > 0 (others return at once).
template <class T, class Acc>
__global__ void __launch_bounds__(kBlock)
    norm_rescaled_partials(Acc x, Index size, Index count, Index chunks, const T* aux, T* psum) {
  __shared__ T shared[kWarp];
  const Index per = ceil_div(size, chunks), c = blockIdx.x;
  const Index begin = c * per, end = index_min(size, begin + per);
  for (Index b = blockIdx.y; b < count; b += gridDim.y) {
    const T a = aux[b];
    if (a == T(0)) continue;  // uniform over the block
    T s = T(0);
    for (Index k = begin + threadIdx.x; k < end; k += blockDim.x) {
      const T v = x(b, k) / a;
      s += v * v;
    }
    s = block_reduce(s, SumOp{}, T(0), shared);
    if (threadIdx.x == 0) psum[b * chunks + c] = s;
  }
}

/// Pass 4, per segment with aux = a > 0: norm = a * sqrt(sum of the rescaled partials).
template <class T>
__global__ void __launch_bounds__(kBlock)
    norm_rescaled_finish(Index count, Index chunks, const T* psum, const T* aux, T* norm) {
  __shared__ T shared[kWarp];
  for (Index b = blockIdx.x; b < count; b += gridDim.x) {
    const T a = aux[b];
    if (a == T(0)) continue;
    T s = T(0);
    for (Index c = threadIdx.x; c < chunks; c += blockDim.x) s += psum[b * chunks + c];
    s = block_reduce(s, SumOp{}, T(0), shared);
    if (threadIdx.x == 0) norm[b] = a * sqrt(s);
  }
}

/// Segment norms into norm[0..count): the four passes above, stream-ordered, no host synchronization.
/// psum and pmax hold count * norm_chunks(size) values, norm and aux count values.
template <class T, class Acc>
void launch_norms(const Acc& x, Index size, Index count, T* psum, T* pmax, T* norm, T* aux, cudaStream_t stream) {
  const Index chunks = norm_chunks(size);
  const dim3 grid(unsigned(chunks), unsigned(index_min(count, kMaxGridY)));
  const unsigned per_segment = unsigned(index_min(count, 1 << 20));
  norm_partials<T><<<grid, kBlock, 0, stream>>>(x, size, count, chunks, psum, pmax);
  MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::norm_partials");
  norm_finish<T><<<per_segment, kBlock, 0, stream>>>(count, chunks, psum, pmax, norm, aux);
  MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::norm_finish");
  norm_rescaled_partials<T><<<grid, kBlock, 0, stream>>>(x, size, count, chunks, aux, psum);
  MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::norm_rescaled_partials");
  norm_rescaled_finish<T><<<per_segment, kBlock, 0, stream>>>(count, chunks, psum, aux, norm);
  MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::norm_rescaled_finish");
}

// ---------------------------------------------------------------------------------------------------------
// Sums (dot products and u^T D v: SpectralCap's power iteration), in T, with the norms' fixed chunk layout

/// Term k of x^T y.
template <class T>
struct DotTerms {
  const T* x;
  const T* y;
  __device__ T operator()(Index k) const { return x[k] * y[k]; }
};
/// Term k of u^T D v, d(i, j) (u[i] v[j]) as SpectralCap's host sum forms it, k running over D in its memory
/// order (coalesced).
template <class T>
struct BilinearTerms {
  Strided<const T> d;
  const T* u;
  const T* v;
  __device__ T operator()(Index k) const {
    Index i, j;
    if (d.cols <= 1 || (d.rows > 1 && d.rs <= d.cs)) {
      i = k % d.rows;
      j = k / d.rows;
    } else {
      i = k / d.cols;
      j = k % d.cols;
    }
    return d(i, j) * (u[i] * v[j]);
  }
};

/// Pass 1: psum[c] = the sum of chunk c's terms.
template <class T, class Terms>
__global__ void __launch_bounds__(kBlock) sum_partials(Terms x, Index size, Index chunks, T* psum) {
  __shared__ T shared[kWarp];
  const Index per = ceil_div(size, chunks);
  for (Index c = blockIdx.x; c < chunks; c += gridDim.x) {
    const Index begin = c * per, end = index_min(size, begin + per);
    T s = T(0);
    for (Index k = begin + threadIdx.x; k < end; k += blockDim.x) s += x(k);
    s = block_reduce(s, SumOp{}, T(0), shared);
    if (threadIdx.x == 0) psum[c] = s;
  }
}
/// Pass 2 (one block): *out = the sum of the partials.
template <class T>
__global__ void __launch_bounds__(kBlock) sum_finish(Index chunks, const T* psum, T* out) {
  __shared__ T shared[kWarp];
  T s = T(0);
  for (Index c = threadIdx.x; c < chunks; c += blockDim.x) s += psum[c];
  s = block_reduce(s, SumOp{}, T(0), shared);
  if (threadIdx.x == 0) *out = s;
}
/// *out = the sum of `size` terms (size > 0): psum holds norm_chunks(size) values. Stream-ordered.
template <class T, class Terms>
void launch_sum(const Terms& x, Index size, T* psum, T* out, cudaStream_t stream) {
  const Index chunks = norm_chunks(size);
  sum_partials<T><<<unsigned(chunks), kBlock, 0, stream>>>(x, size, chunks, psum);
  MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::sum_partials");
  sum_finish<T><<<1, kBlock, 0, stream>>>(chunks, psum, out);
  MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::sum_finish");
}

/// flag |= 1 when any element is NaN or infinite (the caller zeroes flag first).
template <class T, class Acc>
__global__ void __launch_bounds__(kBlock) find_non_finite(Acc x, Index size, int* flag) {
  bool bad = false;
  for (Index k = Index(blockIdx.x) * blockDim.x + threadIdx.x; k < size; k += Index(gridDim.x) * blockDim.x)
    bad = bad || !finite_value(x(0, k));
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(flag, 1);
}

// ---------------------------------------------------------------------------------------------------------
// Row norms and the fused normalization step

/// Row i's U: a plain matrix ...
template <class T>
struct PlainRows {
  Strided<const T> u;
  __device__ T operator()(Index i, Index j) const { return u(i, j); }
};
/// ... or u_g G + u_v V (the fused step's U, never stored).
template <class T>
struct MomentumRows {
  Strided<const T> g, v;
  T u_g, u_v;
  __device__ T operator()(Index i, Index j) const { return u_g * g(i, j) + u_v * v(i, j); }
};

/// ||U_i|| over the TPR threads of a group, core/detail/norm_rule.hpp's rule (the rescaled passes re-read the row).
template <int TPR, class T, class Src>
__device__ T group_row_norm(const Src& src, Index i, Index len, int lane, T* shared) {
  T s = T(0);
  for (Index j = lane; j < len; j += TPR) {
    const T u = src(i, j);
    s += u * u;
  }
  return rescaled(
      group_reduce<TPR>(s, SumOp{}, T(0), shared),
      [&] {
        T a = T(0);
        for (Index j = lane; j < len; j += TPR) a = fmax(a, fabs(src(i, j)));
        return group_reduce<TPR>(a, MaxOp{}, T(0), shared);
      },
      [&](T a) {
        T t = T(0);
        for (Index j = lane; j < len; j += TPR) {
          const T u = src(i, j) / a;
          t += u * u;
        }
        return group_reduce<TPR>(t, SumOp{}, T(0), shared);
      });
}

/// Threads per block of a row kernel with TPR threads per row: 8 warps (8 rows) for TPR = 32, else TPR.
template <int TPR>
inline constexpr int row_block_threads = TPR == kWarp ? kBlock : TPR;

/// inv[i] = 1 / max(||u_i||, eps), one group per contiguous row.
template <class T, int TPR>
__global__ void __launch_bounds__(row_block_threads<TPR>) inverse_row_norms_along(Strided<const T> u, T eps, T* inv) {
  __shared__ T shared[kWarp];
  constexpr int rows_per_block = row_block_threads<TPR> / TPR;
  const int lane = int(threadIdx.x) % TPR, group = int(threadIdx.x) / TPR;
  for (Index i0 = Index(blockIdx.x) * rows_per_block; i0 < u.rows; i0 += Index(gridDim.x) * rows_per_block) {
    const Index i = i0 + group;
    if (i >= u.rows) continue;  // TPR = 32 only (else rows_per_block = 1): whole warps, no block barrier
    const T norm = group_row_norm<TPR>(PlainRows<T>{u}, i, u.cols, lane, shared);
    if (lane == 0) inv[i] = T(1) / (norm > eps ? norm : eps);
  }
}

/// The whole fused step of one contiguous row per group: U's norm, then W and V, with G and V held in
/// registers (CACHE elements per thread; CACHE = 0: rows longer than TPR * 8, re-read from L2).
template <class T, int TPR, int CACHE>
__global__ void __launch_bounds__(row_block_threads<TPR>)
    fused_rows_along(Strided<T> w, Strided<const T> g, Strided<T> v, FusedStep<T> f) {
  __shared__ T shared[kWarp];
  constexpr int rows_per_block = row_block_threads<TPR> / TPR;
  constexpr int slots = CACHE > 0 ? CACHE : 1;
  const int lane = int(threadIdx.x) % TPR, group = int(threadIdx.x) / TPR;
  const Index len = w.cols;
  for (Index i0 = Index(blockIdx.x) * rows_per_block; i0 < w.rows; i0 += Index(gridDim.x) * rows_per_block) {
    const Index i = i0 + group;
    if (i >= w.rows) continue;  // as above
    T* wr = &w(i, 0);           // rows are contiguous (cs == 1 or a single column)
    T* vr = &v(i, 0);
    const T* gr = &g(i, 0);
    [[maybe_unused]] T gc[slots], vc[slots];
    T s = T(0);
    if constexpr (CACHE > 0) {
#pragma unroll
      for (int c = 0; c < CACHE; ++c) {
        const Index j = lane + Index(c) * TPR;
        gc[c] = T(0);
        vc[c] = T(0);
        if (j < len) {
          gc[c] = gr[j];
          vc[c] = vr[j];
          const T u = f.c.u_g * gc[c] + f.c.u_v * vc[c];
          s += u * u;
        }
      }
    } else {
      for (Index j = lane; j < len; j += TPR) {
        const T u = f.c.u_g * gr[j] + f.c.u_v * vr[j];
        s += u * u;
      }
    }
    const T norm = rescaled(  // the rescaled passes only where the sum left the normal range (rare)
        group_reduce<TPR>(s, SumOp{}, T(0), shared),
        [&] {
          T a = T(0);
          if constexpr (CACHE > 0) {
#pragma unroll
            for (int c = 0; c < CACHE; ++c)
              if (lane + Index(c) * TPR < len) a = fmax(a, fabs(f.c.u_g * gc[c] + f.c.u_v * vc[c]));
          } else {
            for (Index j = lane; j < len; j += TPR) a = fmax(a, fabs(f.c.u_g * gr[j] + f.c.u_v * vr[j]));
          }
          return group_reduce<TPR>(a, MaxOp{}, T(0), shared);
        },
        [&](T a) {
          T t = T(0);
          if constexpr (CACHE > 0) {
#pragma unroll
            for (int c = 0; c < CACHE; ++c)
              if (lane + Index(c) * TPR < len) {
                const T u = (f.c.u_g * gc[c] + f.c.u_v * vc[c]) / a;
                t += u * u;
              }
          } else {
            for (Index j = lane; j < len; j += TPR) {
              const T u = (f.c.u_g * gr[j] + f.c.u_v * vr[j]) / a;
              t += u * u;
            }
          }
          return group_reduce<TPR>(t, SumOp{}, T(0), shared);
        });
    const T scale = f.step / (norm > f.eps ? norm : f.eps);
    if constexpr (CACHE > 0) {
#pragma unroll
      for (int c = 0; c < CACHE; ++c) {
        const Index j = lane + Index(c) * TPR;
        if (j < len) {
          wr[j] = f.updated(wr[j], scale, f.c.u_g * gc[c] + f.c.u_v * vc[c]);
          vr[j] = f.c.v_v * vc[c] + f.c.v_g * gc[c];
        }
      }
    } else {
      for (Index j = lane; j < len; j += TPR) {
        const T gij = gr[j], vij = vr[j];
        wr[j] = f.updated(wr[j], scale, f.c.u_g * gij + f.c.u_v * vij);
        vr[j] = f.c.v_v * vij + f.c.v_g * gij;
      }
    }
  }
}

/// Column chunks of the two-pass row scheme (a function of the shape only). Contiguous rows: chunks of
/// 8192 elements, a block each; strided rows: enough chunks for >= 2^18 threads (one per row and chunk).
inline Index row_chunks(Index rows, Index cols, bool contiguous) {
  if (rows <= 0 || cols <= 0) return 1;
  if (contiguous) return index_max(1, index_min(1024, ceil_div(cols, 8192)));
  return index_max(1, index_min(index_min(cols, 1024), ceil_div(Index(1) << 18, rows)));
}

/// Two-pass, pass 1, contiguous rows: partial[c * rows + i] = sum over chunk c of row i of U^2, a block each.
template <class T, class Src>
__global__ void __launch_bounds__(kBlock)
    row_partials_along(Src src, Index rows, Index cols, Index chunks, T* partial) {
  __shared__ T shared[kWarp];
  const Index per = ceil_div(cols, chunks), c = blockIdx.x;
  const Index begin = c * per, end = index_min(cols, begin + per);
  for (Index i = blockIdx.y; i < rows; i += gridDim.y) {
    T s = T(0);
    for (Index j = begin + threadIdx.x; j < end; j += blockDim.x) {
      const T u = src(i, j);
      s += u * u;
    }
    s = block_reduce(s, SumOp{}, T(0), shared);
    if (threadIdx.x == 0) partial[c * rows + i] = s;
  }
}

/// Two-pass, pass 1, strided rows: a thread per (row, chunk), coalesced over rows.
template <class T, class Src>
__global__ void __launch_bounds__(kBlock)
    row_partials_across(Src src, Index rows, Index cols, Index chunks, T* partial) {
  const Index per = ceil_div(cols, chunks);
  for (Index c = blockIdx.y; c < chunks; c += gridDim.y)
    for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < rows; i += Index(gridDim.x) * blockDim.x) {
      T s = T(0);
      for (Index j = c * per; j < index_min(cols, (c + 1) * per); ++j) {
        const T u = src(i, j);
        s += u * u;
      }
      partial[c * rows + i] = s;
    }
}

/// Two-pass, pass 2: out[i] = numerator / max(||U_i||, eps), the partials summed in chunk order; a row whose
/// sum left the normal range is rescaled by its own thread (rare).
template <class T, class Src>
__global__ void __launch_bounds__(kBlock)
    row_finish(Src src, Index rows, Index cols, Index chunks, const T* partial, T numerator, T eps, T* out) {
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < rows; i += Index(gridDim.x) * blockDim.x) {
    T s = T(0);
    for (Index c = 0; c < chunks; ++c) s += partial[c * rows + i];
    const T norm = rescaled(
        s,
        [&] {
          T a = T(0);
          for (Index j = 0; j < cols; ++j) a = fmax(a, fabs(src(i, j)));
          return a;
        },
        [&](T a) {
          T t = T(0);
          for (Index j = 0; j < cols; ++j) {
            const T u = src(i, j) / a;
            t += u * u;
          }
          return t;
        });
    out[i] = numerator / (norm > eps ? norm : eps);
  }
}

/// Pass 1 of the two-pass row scheme: partial[c * rows + i] = the sum of squares of chunk c of row i (empty rows: a
/// single zero chunk). Returns the number of chunks.
template <class T, class Src>
Index launch_row_partials(const Src& src, Index rows, Index cols, bool contiguous, T* partial, cudaStream_t stream) {
  const Index chunks = row_chunks(rows, cols, contiguous);
  if (cols <= 0) {
    MATOPT_CUDA_CHECK(cudaMemsetAsync(partial, 0, sizeof(T) * std::size_t(rows), stream));  // empty rows: norm 0
  } else if (contiguous) {
    row_partials_along<T><<<dim3(unsigned(chunks), unsigned(index_min(rows, kMaxGridY))), kBlock, 0, stream>>>(
        src, rows, cols, chunks, partial);
    MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::row_partials_along");
  } else {
    row_partials_across<T>
        <<<dim3(unsigned(index_min(ceil_div(rows, kBlock), 1 << 20)), unsigned(index_min(chunks, kMaxGridY))), kBlock, 0,
           stream>>>(src, rows, cols, chunks, partial);
    MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::row_partials_across");
  }
  return chunks;
}

/// The two-pass row scheme's passes 1 and 2 (out = numerator / max(||U_i||, eps)); `partial` holds
/// rows * row_chunks(rows, cols, contiguous) values.
template <class T, class Src>
void launch_row_scales(const Src& src, Index rows, Index cols, bool contiguous, T* partial, T numerator, T eps, T* out,
                       cudaStream_t stream) {
  if (rows <= 0) return;
  const Index chunks = launch_row_partials(src, rows, cols, contiguous, partial, stream);
  row_finish<T><<<unsigned(index_min(ceil_div(rows, kBlock), 1 << 20)), kBlock, 0, stream>>>(
      src, rows, cols, chunks, partial, numerator, eps, out);
  MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::row_finish");
}

/// out[i] = the sum of row i's partials (the two-pass scheme's pass 1): ||U_i||^2, in chunk order.
template <class T>
__global__ void __launch_bounds__(kBlock) row_sums_finish(Index rows, Index chunks, const T* partial, T* out) {
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < rows; i += Index(gridDim.x) * blockDim.x) {
    T s = T(0);
    for (Index c = 0; c < chunks; ++c) s += partial[c * rows + i];
    out[i] = s;
  }
}

/// out[i] = ||u_i||^2 (NorMuon's line statistics): pass 1 of the row scheme, then the chunk sums.
template <class T>
void launch_row_squared_norms(Strided<const T> u, bool contiguous, T* partial, T* out, cudaStream_t stream) {
  if (u.rows <= 0) return;
  const Index chunks = launch_row_partials(PlainRows<T>{u}, u.rows, u.cols, contiguous, partial, stream);
  row_sums_finish<T><<<unsigned(index_min(ceil_div(u.rows, kBlock), 1 << 20)), kBlock, 0, stream>>>(u.rows, chunks,
                                                                                                   partial, out);
  MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::row_sums_finish");
}

/// Turbo-Muon's AOL factors (schedule.hpp) of each column-major r x r A of a batch (matrix b at a + b * stride):
/// d_b[i] = 1 / sqrt(max(sum_j |A_b(i, j)|, eps)), written to d + b * d_stride. A thread per row, reading
/// down the columns (coalesced over the rows); r^2 reads once per orthogonalization.
template <class T>
__global__ void __launch_bounds__(kBlock)
    aol_factors(const T* a, Index r, Index stride, Index count, T eps, T* d, Index d_stride) {
  for (Index b = blockIdx.y; b < count; b += gridDim.y)
    for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < r; i += Index(gridDim.x) * blockDim.x) {
      const T* ab = a + b * stride;
      T s = T(0);
      for (Index j = 0; j < r; ++j) s += fabs(ab[i + j * r]);
      d[b * d_stride + i] = T(1) / sqrt(s > eps ? s : eps);
    }
}

// ---------------------------------------------------------------------------------------------------------
// cuBLAS support

/// Up to kMaxPointerBatch (A, B, C) pointer triples for cublasGemmBatchedEx, written to device memory by a
/// kernel (stream-ordered: no host copy, no synchronization).
inline constexpr int kMaxPointerBatch = 16;
struct PointerBatch {
  const void* a[kMaxPointerBatch];
  const void* b[kMaxPointerBatch];
  void* c[kMaxPointerBatch];
  int count;
};
template <class Batch>  // a template: a header's kernel needs no out-of-line definition
__global__ void write_pointer_batch(Batch p, const void** a, const void** b, void** c) {
  const int t = int(threadIdx.x);
  if (t < p.count) {
    a[t] = p.a[t];
    b[t] = p.b[t];
    c[t] = p.c[t];
  }
}

}  // namespace matopt::cuda::detail

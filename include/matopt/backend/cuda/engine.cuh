// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// cuda::Engine: the CUDA engine of DeviceOptimizer and Newton–Schulz (cuBLAS products, fused kernels, FP32/TF32/BF16).
// cuda::Engine: the CUDA backend's engine for DeviceOptimizer (backend/device_optimizer.hpp) and for the
// one Newton–Schulz algorithm (precondition/detail/ns_algorithm.hpp). It has ThrustEngine's operations
// (backend/thrust.hpp) with cuBLAS for the dense products and the kernels of kernels.cuh for the rest, on
// `detail::Strided<T>` handles, T = float or double; and the same dense operations on `Batched<T>` handles
// (batched.cuh: strided-batched cuBLAS), so NsMatrices<Batched<T>> runs a whole batch of same-shape
// matrices (orthogonalize_batched, orthogonalize.cuh).
//
// Resources: one cudaStream_t (created per engine, or the caller's), one cublasHandle_t bound to it with its
// own cuBLAS workspace, pinned host memory for reduction results, and device scratch sized by reserve(m, n)
// (DeviceOptimizer::make_state calls it) and reserve_batched. After that no operation allocates: not the
// engine, not cuBLAS (its workspace is set), not Thrust (not used here). An operation that would need more
// scratch than reserved throws std::logic_error instead of allocating.
//
// Precision (the Newton–Schulz products; float only: double always runs cublasD*, FP64):
//   FP32  cublasSgemm / cublasSsyrk, CUBLAS_DEFAULT_MATH (no TF32).
//   TF32  the same calls under CUBLAS_TF32_TENSOR_OP_MATH (cuBLAS uses TF32 tensor cores where it has them),
//         except that A A^T is one full cublasSgemm: cuBLAS's SSYRK has no TF32 tensor-core path (the whole C
//         written; only its lower triangle carries meaning, as for BF16 below).
//   BF16  operands converted to __nv_bfloat16 copies in engine scratch; cublasGemmEx / GemmBatchedEx /
//         GemmStridedBatchedEx with CUBLAS_COMPUTE_32F, fp32 outputs and fp32 alpha/beta (the beta-fused adds
//         of ns_algorithm.hpp stay fp32). cuBLAS has no bf16 SYRK, so A A^T is the lower triangle by blocks:
//         n split into nb = 2 (n >= 1024) or 4 (n >= 8192) equal blocks, the nb(nb+1)/2 lower blocks (diagonal
//         blocks whole) in one cublasGemmBatchedEx call: (nb+1)/(2 nb) of the full product's FLOPs (75% at
//         nb = 2) in one launch with enough tiles to fill the GPU. Other n (small, or not a multiple of 8 nb):
//         one full GEMM. Either way the strict upper triangle of C's diagonal blocks is overwritten (and read
//         when beta != 0); ns_algorithm.hpp mirrors the lower triangle after every syrk_lower, so only the
//         lower triangle carries meaning, as the engine contract says. Norms are always fp32/fp64.
// Reductions (norm, all_finite, dot, bilinear) run in the engine's own kernels into engine scratch; the host
// gets the result by one cudaMemcpyAsync to pinned memory and one stream synchronization.
// Vectors (SpectralCap's power iteration): gemv by cublas<t>gemv and the Gram of diagnostics / Adaptive
// (gram_lower) by cublas<t>syrk, both under CUBLAS_DEFAULT_MATH whatever the Precision (T's own arithmetic;
// the diagnostics need at least fp32: docs/math.md#diagonal-dominance); u^T D v and D += alpha x y^T by kernels.
//
// Streams: an engine-created stream is a blocking stream (cudaStreamCreate), so it is ordered with the legacy
// default stream that Thrust's device_vector copies use (DeviceMatrix, to_host): no extra synchronization is
// needed around DeviceOptimizer::step. With a caller's stream, ordering with other streams is the caller's.
// Operations return when their work is queued, except norm, all_finite, dot, bilinear and download (which wait
// for their result).

#include <algorithm>
#include <climits>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "matopt/backend/cuda/batched.cuh"
#include "matopt/backend/cuda/buffer.cuh"
#include "matopt/backend/cuda/errors.cuh"
#include "matopt/backend/cuda/kernels.cuh"
#include "matopt/core/detail/errors.hpp"

namespace matopt::cuda {

/// The arithmetic of the Newton–Schulz products (see the file comment).
/// `FP32`: cuBLAS FP32 (no TF32); `TF32`: TF32 tensor cores; `BF16`: bf16 operands, fp32 accumulation and outputs.
/// Float products only: double always runs FP64.
enum class Precision { FP32, TF32, BF16 };

/// "fp32", "tf32" or "bf16".
inline const char* precision_name(Precision p) {
  switch (p) {
    case Precision::FP32:
      return "fp32";
    case Precision::TF32:
      return "tf32";
    case Precision::BF16:
      return "bf16";
  }
  return "unknown";
}

namespace detail {

/// cuBLAS workspace per handle: 32 MiB, the size NVIDIA's cuBLAS documentation recommends for Hopper
/// (cublasSetWorkspace); set explicitly so that cuBLAS never allocates inside a step.
inline constexpr std::size_t kCublasWorkspaceBytes = std::size_t(32) << 20;

/// Blocks of the BF16 lower-triangle product A A^T (n x n) (file comment). Not tuned by measurement yet:
/// chosen so that each block GEMM is >= 512 x 512 and the batched call has >= 3 full output tiles per SM.
inline int bf16_syrk_blocks(Index n) {
  if (n >= 8192 && n % (4 * 8) == 0) return 4;
  if (n >= 1024 && n % (2 * 8) == 0) return 2;
  return 1;
}

/// Contiguous rows take the one-pass kernels (a group per row) when they are at most this long, or when there
/// are enough of them to fill an H100/H200 (256 rows of up to 1024 threads: ~270k threads, 132 SMs x 2048);
/// otherwise the two-pass scheme splits rows into chunks. A function of the shape only, never of the device.
inline constexpr Index kAlongMaxLength = 8192;
inline constexpr Index kAlongMinRows = 256;

inline int to_int(Index v, const char* what) {
  if (v < 0 || v > Index(INT_MAX))
    throw std::invalid_argument(std::string("matopt::cuda::Engine: ") + what + " = " + std::to_string(v) +
                                " does not fit cuBLAS's int");
  return int(v);
}

/// Contiguous in one of the two storage orders (every handle matopt makes is).
template <class T>
bool is_dense(const Strided<T>& h) {
  return (h.rs == 1 && (h.cols <= 1 || h.cs == h.rows)) || (h.cs == 1 && (h.rows <= 1 || h.rs == h.cols));
}
/// Each row's elements are adjacent (RowNormalize's "along" shape).
template <class T>
bool row_contiguous(const Strided<T>& h) {
  return h.cs == 1 || h.cols <= 1;
}
/// Both handles have the same unit-stride dimension (an element-wise kernel is coalesced on both).
template <class T, class U>
bool same_order(const Strided<T>& p, const Strided<U>& q) {
  if (p.rows <= 1 || p.cols <= 1) return true;
  return (p.rs <= p.cs) == (q.rs <= q.cs);
}

/// A dense handle as a cuBLAS operand: column-major storage (op N) or row-major storage, which is the
/// column-major transpose (op T); ld >= 1 as cuBLAS requires.
struct BlasOperand {
  cublasOperation_t op;
  int ld;
};
template <class T>
BlasOperand blas_operand(const Strided<T>& h) {
  if (h.rs == 1 && (h.cols <= 1 || h.cs >= h.rows))
    return {CUBLAS_OP_N, to_int(index_max(1, h.cols <= 1 ? h.rows : h.cs), "leading dimension")};
  if (h.cs == 1 && (h.rows <= 1 || h.rs >= h.cols))
    return {CUBLAS_OP_T, to_int(index_max(1, h.rows <= 1 ? h.cols : h.rs), "leading dimension")};
  throw std::logic_error("matopt::cuda::Engine: a cuBLAS operand must be a dense row- or column-major matrix");
}

}  // namespace detail

/// The engine-owned Newton–Schulz workspace of orthogonalize / orthogonalize_batched (x, y: r x s; a, b, q,
/// t: r x r; `count` matrices each).
template <class T>
struct NsWorkspace {
  /// Handles of the iterates (x, y: r x s) and the r x r products (a, b; q, t for Gram).
  /// @{
  Batched<T> x, y, a, b, q, t;
  /// @}
};

/// The CUDA engine of DeviceOptimizer (cuda::Optimizer) and of the Newton–Schulz algorithm: ThrustEngine's operations
/// with cuBLAS for the dense products (FP32, TF32 or BF16: Precision) and matopt's kernels for the rest, on strided
/// handles and on Batched handles (strided-batched cuBLAS, orthogonalize_batched). It owns one stream (or uses the
/// caller's), one cuBLAS handle with its workspace, and device scratch sized by reserve: after that no operation
/// allocates (one that would need more throws std::logic_error). Operations return when queued, except norm,
/// all_finite, dot, bilinear and download, which wait for their result. Move-only.
class Engine {
 public:
  /// The strided device-matrix handle.
  template <class T>
  using Strided = matopt::detail::Strided<T>;
  /// T for Strided<T> handles, BatchScalar<T> (one value per matrix) for Batched<T> handles.
  template <class M>
  using scalar_t = typename detail::HandleScalar<M>::type;
  /// "cuda".
  static constexpr const char* name() { return "cuda"; }

  /// An engine with its own stream, on the current device.
  explicit Engine(Precision precision = Precision::FP32) { init(nullptr, true, precision); }
  /// An engine on the caller's stream (not destroyed by the engine; 0 is the legacy default stream).
  explicit Engine(cudaStream_t stream, Precision precision = Precision::FP32) { init(stream, false, precision); }

  /// Not copyable (it owns its stream, handle and scratch); movable.
  Engine(const Engine&) = delete;
  /// Not copyable.
  Engine& operator=(const Engine&) = delete;
  /// Takes o's stream, handle and scratch (o is left empty).
  Engine(Engine&& o) noexcept { take(o); }
  /// Releases this engine's resources and takes o's.
  Engine& operator=(Engine&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  /// Destroys the cuBLAS handle, the stream if the engine created it, and the scratch.
  ~Engine() { release(); }

  /// The stream every operation is queued on.
  cudaStream_t stream() const { return stream_; }
  /// The cuBLAS handle (bound to stream()).
  cublasHandle_t cublas() const { return blas_; }
  /// The precision of the Newton–Schulz products.
  Precision precision() const { return precision_; }
  /// Changes the precision of the products; BF16 sizes its operand scratch for the shapes reserved so far.
  void set_precision(Precision p) {
    MATOPT_CUDA_CHECK(
        cublasSetMathMode(blas_, p == Precision::TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    precision_ = p;
    reserve_bf16(bf16_elements_);
  }
  /// Waits for all work queued on the engine's stream.
  void synchronize() { MATOPT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  /// Sizes the scratch for m x n parameters (grows only; DeviceOptimizer::make_state calls it).
  void reserve(Index m, Index n) {
    if (m < 0 || n < 0) matopt::detail::fail("matopt::cuda::Engine::reserve", "negative shape ", m, "x", n);
    Index partial = 0;
    for (const auto& [rows, cols] : {std::pair<Index, Index>{m, n}, std::pair<Index, Index>{n, m}})
      for (const bool contiguous : {true, false})
        partial = detail::index_max(partial, rows * detail::row_chunks(rows, cols, contiguous));
    row_partials_.reserve(scalar_bytes(partial));
    row_scales_.reserve(scalar_bytes(detail::index_max(m, n)));
    reserve_bf16((m < n ? m : n) * (m < n ? n : m));
  }
  /// Sizes the scratch and the Newton–Schulz workspace for `count` m x n matrices of type T
  /// (orthogonalize_batched calls it: it allocates only when the shape grows).
  template <class T>
  void reserve_batched(Index count, Index m, Index n) {
    if (count < 0 || m < 0 || n < 0)
      matopt::detail::fail("matopt::cuda::Engine::reserve_batched", "negative count or shape: ", count, " of ", m, "x",
                           n);
    const Index r = m < n ? m : n, s = m < n ? n : m;
    for (int k = 0; k < 2; ++k) ns_[k].reserve(std::size_t(count * r * s) * sizeof(T));
    for (int k = 2; k < 6; ++k) ns_[k].reserve(std::size_t(count * r * r) * sizeof(T));
    reserve_bf16(count * r * s);
    norm_partials_.reserve(std::size_t(2 * detail::index_max(count * detail::norm_chunks(r * s), 1024)) * sizeof(T));
    norm_values_.reserve(std::size_t(2 * detail::index_max(count, 1)) * sizeof(T));
  }
  /// Bytes of device scratch the engine owns (cuBLAS workspace included).
  std::size_t scratch_bytes() const {
    std::size_t total = cublas_ws_.bytes() + norm_partials_.bytes() + norm_values_.bytes() + flag_.bytes() +
                        row_partials_.bytes() + row_scales_.bytes() + bf16_a_.bytes() + bf16_b_.bytes() +
                        pointers_.bytes();
    for (const auto& b : ns_) total += b.bytes();
    return total;
  }
  /// Fills every engine-owned scratch buffer (not cuBLAS's workspace) with 0xFF bytes, a NaN in fp32, fp64 and
  /// bf16: tests call it before a run to show that no result depends on stale scratch.
  void poison_scratch() {
    for (detail::DeviceBuffer* b : {&norm_partials_, &norm_values_, &flag_, &row_partials_, &row_scales_, &bf16_a_,
                                    &bf16_b_, &pointers_, &ns_[0], &ns_[1], &ns_[2], &ns_[3], &ns_[4], &ns_[5]})
      if (b->bytes() > 0) MATOPT_CUDA_CHECK(cudaMemsetAsync(b->as<void>(), 0xFF, b->bytes(), stream_));
  }
  /// The Newton–Schulz workspace for `count` r x s inputs (reserve_batched<T>(count, ...) sized it).
  template <class T>
  NsWorkspace<T> ns_workspace(Index count, Index r, Index s) {
    require(ns_[0], std::size_t(count * r * s) * sizeof(T), "ns_workspace");
    require(ns_[2], std::size_t(count * r * r) * sizeof(T), "ns_workspace");
    auto at = [&](int k, Index rows, Index cols) { return Batched<T>{ns_[k].as<T>(), rows, cols, count, rows * cols}; };
    return {at(0, r, s), at(1, r, s), at(2, r, r), at(3, r, r), at(4, r, r), at(5, r, r)};
  }

  /// Newton–Schulz (precondition/detail/ns_algorithm.hpp) over `count` column-major r x s matrices at once in the
  /// batched workspace (reserve_batched<T>(count, r, s) first): form(b, x_b) writes matrix b; returns the
  /// results' handle, matrix b at data + b r s (engine memory, valid until the next batched call). DeviceOptimizer
  /// orthogonalizes row blocks of one shape (heads) this way: each product one strided-batched call for all.
  static constexpr bool has_batched_ns = true;
  /// Newton–Schulz on column-major operands, as cuBLAS runs them (Orthogonalize's engine form lays X out so).
  static constexpr bool any_order = false;
  /// Runs the batched Newton–Schulz (see has_batched_ns).
  template <class T, class Options, class Form>
  Strided<T> ns_batched(Index count, Index r, Index s, const Options& o, bool gram, Form&& form) {
    NsWorkspace<T> ws = ns_workspace<T>(count, r, s);
    for (Index b = 0; b < count; ++b) form(b, matopt::detail::col_major(ws.x.data + b * r * s, r, s));
    const Batched<T>& d =
        matopt::detail::NsMatrices<Batched<T>>{&ws.x, &ws.y, &ws.a, &ws.b, &ws.q, &ws.t}.run(*this, o, gram && r > 0);
    return d.matrix();
  }

  // ---- Element-wise operations on any strides (out's shape is the iteration space) --------------------

  /// out = a x + b y
  template <class T>
  void combine(Strided<T> out, T a, Strided<const T> x, T b, Strided<const T> y) {
    axpby(out, a, x, b, y);
  }
  /// out = x, element-wise.
  template <class T>
  void copy(Strided<const T> x, Strided<T> out) {
    check_float<T>();
    if (out.size() == 0) return;
    if (!detail::same_order(out, x) && detail::is_dense(out) && detail::is_dense(x)) {
      geam(out, T(1), x, T(0), x);  // a transposing copy: cuBLAS's tiled geam
      return;
    }
    detail::launch_elements(detail::CopyOp<T>{detail::mat(out), detail::mat(x)}, detail::space_of(out), stream_);
  }
  /// w = keep w - step d
  template <class T>
  void update(Strided<T> w, T keep, T step, Strided<const T> d) {
    axpby(w, keep, Strided<const T>(w), -step, d);
  }
  /// x = s x.
  template <class T>
  void scale(Strided<T> x, T s) {
    check_float<T>();
    detail::launch_elements(detail::ScaleOp<T>{detail::mat(x), s}, detail::space_of(x), stream_);
  }
  /// w = keep w - step d where w d >= 0, w - step d elsewhere (cautious weight decay).
  template <class T>
  void cautious_update(Strided<T> w, T keep, T step, Strided<const T> d) {
    check_float<T>();
    detail::launch_elements(detail::CautiousUpdateOp<T>{detail::mat(w), detail::mat(d), keep, step},
                            detail::space_of(w), stream_);
  }
  /// s = b s + (1 - b) d^2, then d = d / (sqrt(s) + eps), element-wise (AdaMuon's second moment).
  template <class T>
  void moment_normalize(Strided<T> d, Strided<T> s, T b, T eps) {
    check_float<T>();
    detail::launch_elements(detail::MomentNormalizeOp<T>{detail::mat(d), detail::mat(s), b, eps}, detail::space_of(d),
                            stream_);
  }
  /// out = finite(g) ? g : 0
  template <class T>
  void clean(Strided<T> out, Strided<const T> g) {
    check_float<T>();
    detail::launch_elements(detail::CleanOp<T>{detail::mat(out), detail::mat(g)}, detail::space_of(out), stream_);
  }
  /// x = sign(x), element-wise (sign(0) = 0).
  template <class T>
  void sign(Strided<T> x) {
    check_float<T>();
    detail::launch_elements(detail::SignOp<T>{detail::mat(x)}, detail::space_of(x), stream_);
  }

  // ---- Reductions (one device-to-host copy of the result, one stream synchronization) --------------------

  /// Whether every entry of x is finite (waits for the result).
  template <class T>
  bool all_finite(Strided<const T> x) {
    check_float<T>();
    const Index size = x.size();
    if (size == 0) return true;
    int* flag = flag_.as<int>();
    MATOPT_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream_));
    const unsigned blocks = unsigned(detail::index_min(detail::ceil_div(size, detail::kBlock * 8), 4096));
    if (detail::is_dense(x))
      detail::find_non_finite<T>
          <<<blocks, detail::kBlock, 0, stream_>>>(detail::DenseSegments<T>{x.data, 0}, size, flag);
    else
      detail::find_non_finite<T><<<blocks, detail::kBlock, 0, stream_>>>(detail::StridedElements<T>{x}, size, flag);
    MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::find_non_finite");
    return fetch(static_cast<const int*>(flag)) == 0;
  }
  /// Frobenius norm without overflow or underflow (core/detail/norms.hpp's rule).
  template <class T>
  T norm(Strided<const T> x) {
    check_float<T>();
    const Index size = x.size();
    if (size == 0) return T(0);
    const Index chunks = detail::norm_chunks(size);
    T* psum = norm_partials_.as<T>();
    T* values = norm_values_.as<T>();
    if (detail::is_dense(x))
      detail::launch_norms(detail::DenseSegments<T>{x.data, 0}, size, 1, psum, psum + chunks, values, values + 1,
                           stream_);
    else
      detail::launch_norms(detail::StridedElements<T>{x}, size, 1, psum, psum + chunks, values, values + 1, stream_);
    return fetch(static_cast<const T*>(values));
  }
  /// The norm of a mutable handle (the same as the const overload).
  template <class T>
  T norm(Strided<T> x) {
    return norm(Strided<const T>(x));
  }
  /// Whether x has no elements.
  template <class T>
  static bool empty(const Strided<T>& x) {
    return x.size() == 0;
  }

  // ---- Row normalization ---------------------------------------------------------------------------------

  /// inv[i] = 1 / max(||u_i||, eps) for each row of u (columns: pass u.t()).
  template <class T>
  void inverse_row_norms(Strided<const T> u, T eps, T* inv) {
    check_float<T>();
    const Index rows = u.rows, len = u.cols;
    if (rows == 0) return;
    if (detail::row_contiguous(u) && (len <= detail::kAlongMaxLength || rows >= detail::kAlongMinRows)) {
      if (len <= 256)
        detail::inverse_row_norms_along<T, detail::kWarp>
            <<<grid_rows(rows, detail::kBlock / detail::kWarp), detail::kBlock, 0, stream_>>>(u, eps, inv);
      else
        detail::inverse_row_norms_along<T, detail::kBlock>
            <<<grid_rows(rows, 1), detail::kBlock, 0, stream_>>>(u, eps, inv);
      MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::inverse_row_norms_along");
      return;
    }
    const bool contiguous = detail::row_contiguous(u);
    require(row_partials_, scalar_bytes(rows * detail::row_chunks(rows, len, contiguous)), "inverse_row_norms");
    detail::launch_row_scales(detail::PlainRows<T>{u}, rows, len, contiguous, row_partials_.as<T>(), T(1), eps, inv,
                              stream_);
  }
  /// Multiplies row i of x by s[i] (s in device memory).
  template <class T>
  void scale_rows(Strided<T> x, const T* s) {
    check_float<T>();
    detail::launch_elements(detail::ScaleRowsOp<T>{detail::mat(x), s}, detail::space_of(x), stream_);
  }
  /// out[i] = ||u_i||^2, the sum of squares of each row (columns: pass u.t()); NorMuon's line statistics.
  template <class T>
  void row_squared_norms(Strided<const T> u, T* out) {
    check_float<T>();
    const bool contiguous = detail::row_contiguous(u);
    require(row_partials_, scalar_bytes(u.rows * detail::row_chunks(u.rows, u.cols, contiguous)), "row_squared_norms");
    detail::launch_row_squared_norms(u, contiguous, row_partials_.as<T>(), out, stream_);
  }
  /// A whole RowNormalize + Static step (ColNormalize: pass transposes): one pass reading G, V, W and
  /// writing W, V when rows are contiguous; otherwise two passes (sums of squares over column chunks, then
  /// the update), as fused_normalize.hpp's "across" shape. The engine's own scratch, not the workspace, holds the sums.
  template <class T, class WS>
  void fused_normalize_rows(Strided<T> w, Strided<const T> g, Strided<T> v, const matopt::detail::FusedStep<T>& f,
                            WS&) {
    check_float<T>();
    const Index rows = w.rows, len = w.cols;
    if (rows == 0 || len == 0) return;
    const bool along = detail::row_contiguous(w) && detail::row_contiguous(g) && detail::row_contiguous(v);
    if (along && (len <= detail::kAlongMaxLength || rows >= detail::kAlongMinRows)) {
      constexpr int kB = detail::kBlock, kW = detail::kWarp;
      if (len <= kW * 8)
        detail::fused_rows_along<T, kW, 8><<<grid_rows(rows, kB / kW), kB, 0, stream_>>>(w, g, v, f);
      else if (len <= kB * 16)
        detail::fused_rows_along<T, kB, 16><<<grid_rows(rows, 1), kB, 0, stream_>>>(w, g, v, f);
      else if (len <= 1024 * 8)
        detail::fused_rows_along<T, 1024, 8><<<grid_rows(rows, 1), 1024, 0, stream_>>>(w, g, v, f);
      else
        detail::fused_rows_along<T, 1024, 0><<<grid_rows(rows, 1), 1024, 0, stream_>>>(w, g, v, f);
      MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::fused_rows_along");
      return;
    }
    const bool contiguous = detail::row_contiguous(g) && detail::row_contiguous(v);
    require(row_partials_, scalar_bytes(rows * detail::row_chunks(rows, len, contiguous)), "fused_normalize_rows");
    require(row_scales_, scalar_bytes(rows), "fused_normalize_rows");
    T* scales = row_scales_.as<T>();
    detail::launch_row_scales(detail::MomentumRows<T>{g, Strided<const T>(v), f.c.u_g, f.c.u_v}, rows, len, contiguous,
                              row_partials_.as<T>(), f.step, f.eps, scales, stream_);
    detail::launch_elements(detail::FusedUpdateOp<T>{detail::mat(w), detail::mat(v), detail::mat(g), scales, f},
                            detail::space_of(w), stream_);
  }

  // ---- Dense products (precondition/detail/ns_algorithm.hpp's engine interface) ---------------------------------

  /// C <- alpha A B + beta C (beta = 0: C not read).
  template <class T>
  void gemm(T alpha, const Strided<T>& a, const Strided<T>& b, T beta, Strided<T>& c) {
    check_float<T>();
    if (a.rows != c.rows || b.cols != c.cols || a.cols != b.rows)
      throw std::logic_error("matopt::cuda::Engine::gemm: operand shapes do not match");
    if (c.size() == 0) return;
    const detail::BlasOperand oc = detail::blas_operand(c);
    if (oc.op != CUBLAS_OP_N) {  // a row-major C is the column-major C^T = B^T A^T
      Strided<T> ct = c.t();
      gemm(alpha, b.t(), a.t(), beta, ct);
      return;
    }
    const int m = detail::to_int(c.rows, "m"), n = detail::to_int(c.cols, "n"), k = detail::to_int(a.cols, "k");
    if constexpr (std::is_same_v<T, float>) {
      if (precision_ == Precision::BF16) {
        const __nv_bfloat16* a16 = to_bf16(detail::mat(Strided<const T>(a)), a.rows, a.cols, 1, bf16_a_, "gemm");
        const __nv_bfloat16* b16 = to_bf16(detail::mat(Strided<const T>(b)), b.rows, b.cols, 1, bf16_b_, "gemm");
        MATOPT_CUDA_CHECK(cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a16, CUDA_R_16BF,
                                       std::max(1, m), b16, CUDA_R_16BF, std::max(1, k), &beta, c.data, CUDA_R_32F,
                                       oc.ld, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return;
      }
    }
    const detail::BlasOperand oa = detail::blas_operand(a), ob = detail::blas_operand(b);
    if constexpr (std::is_same_v<T, float>)
      MATOPT_CUDA_CHECK(
          cublasSgemm(blas_, oa.op, ob.op, m, n, k, &alpha, a.data, oa.ld, b.data, ob.ld, &beta, c.data, oc.ld));
    else
      MATOPT_CUDA_CHECK(
          cublasDgemm(blas_, oa.op, ob.op, m, n, k, &alpha, a.data, oa.ld, b.data, ob.ld, &beta, c.data, oc.ld));
  }
  /// lower(C) <- alpha A A^T + beta lower(C) (beta = 0: C not read). BF16 and TF32 also write the strict upper
  /// triangle (BF16: of C's diagonal blocks; file comment).
  template <class T>
  void syrk_lower(T alpha, const Strided<T>& a, T beta, Strided<T>& c) {
    syrk(alpha, a, beta, c, precision_ != Precision::FP32, "syrk_lower");
  }
  /// c(i, j) = c(j, i) for i < j.
  template <class T>
  void mirror_lower(Strided<T>& c) {
    check_float<T>();
    if (c.rows == 0) return;
    if (c.rs == 1) {
      mirror_tiles(c.data, c.rows, index_ld(c), 0, 1);
      return;
    }
    detail::launch_elements(detail::MirrorOp<T>{detail::mat(c)}, detail::space_of(c), stream_);
  }
  /// dst(i, j) = src(i, j) for i >= j.
  template <class T>
  void copy_lower(const Strided<T>& src, Strided<T>& dst) {
    check_float<T>();
    detail::launch_elements(detail::CopyLowerOp<T>{detail::mat(dst), detail::mat(Strided<const T>(src))},
                            detail::space_of(dst), stream_);
  }
  /// C = C + v I.
  template <class T>
  void add_diagonal(Strided<T>& c, T v) {
    check_float<T>();
    detail::launch_elements(detail::AddDiagonalOp<T>{detail::mat(c), v},
                            detail::Space{detail::index_min(c.rows, c.cols), 1, 1, true}, stream_);
  }
  /// dst = src.
  template <class T>
  void copy(const Strided<T>& src, Strided<T>& dst) {
    copy(Strided<const T>(src), dst);
  }
  /// Turbo-Muon's AOL scaling (schedule.hpp; precondition/detail/ns_algorithm.hpp): d = 1 / sqrt(max(row sums of |A|,
  /// eps)) into scratch's first column (at least a.rows elements), then X <- diag(d) X and A <- diag(d) A diag(d). A
  /// is symmetric (mirrored).
  template <class T>
  void aol_scale(Strided<T>& x, Strided<T>& a, Strided<T>& scratch, T eps) {
    aol(x, a, scratch.data, 1, 0, 0, 0, eps);
  }
  /// The AOL scaling of a batch (eps a constant).
  template <class T>
  void aol_scale(Batched<T>& x, Batched<T>& a, Batched<T>& scratch, const BatchScalar<T>& eps) {
    aol(x.matrix(), a.matrix(), scratch.data, x.count, x.stride, a.stride, scratch.stride, eps.constant("aol_scale"));
  }

  /// lower(C) <- A A^T in T's own precision (cublas<t>syrk under CUBLAS_DEFAULT_MATH, never TF32 or BF16): the
  /// Gram of diagnostics and of Adaptive (at least fp32: `docs/math.md#diagonal-dominance`). C column-major.
  template <class T>
  void gram_lower(const Strided<T>& a, Strided<T>& c) {
    default_math([&] { syrk(T(1), a, T(0), c, false, "gram_lower"); });
  }

  // ---- Vectors (SpectralCap's power iteration: contiguous device vectors of the lengths the shapes imply) --

  /// y = alpha A x + beta y (beta = 0: y not read) by cublas<t>gemv in T (CUBLAS_DEFAULT_MATH); A dense in either
  /// storage order (W, or W.t() for W^T u).
  template <class T>
  void gemv(T alpha, Strided<const T> a, const T* x, T beta, T* y) {
    check_float<T>();
    if (a.rows == 0) return;
    if (a.cols == 0) {  // y = beta y (cuBLAS would leave y as it is)
      if (beta == T(0))
        MATOPT_CUDA_CHECK(cudaMemsetAsync(y, 0, sizeof(T) * std::size_t(a.rows), stream_));
      else
        scale(matopt::detail::col_major(y, a.rows, 1), beta);
      return;
    }
    const detail::BlasOperand oa = detail::blas_operand(a);  // op T: the storage is the column-major A^T
    const bool plain = oa.op == CUBLAS_OP_N;
    const int m = detail::to_int(plain ? a.rows : a.cols, "m"), n = detail::to_int(plain ? a.cols : a.rows, "n");
    default_math([&] {
      if constexpr (std::is_same_v<T, float>)
        MATOPT_CUDA_CHECK(cublasSgemv(blas_, oa.op, m, n, &alpha, a.data, oa.ld, x, 1, &beta, y, 1));
      else
        MATOPT_CUDA_CHECK(cublasDgemv(blas_, oa.op, m, n, &alpha, a.data, oa.ld, x, 1, &beta, y, 1));
    });
  }
  /// x^T y of n elements, summed in T.
  template <class T>
  T dot(const T* x, const T* y, Index n) {
    check_float<T>();
    if (n <= 0) return T(0);
    T* values = norm_values_.as<T>();
    detail::launch_sum(detail::DotTerms<T>{x, y}, n, norm_partials_.as<T>(), values, stream_);
    return fetch(static_cast<const T*>(values));
  }
  /// u^T D v (u: D.rows elements, v: D.cols), summed in T over D's elements in its memory order.
  template <class T>
  T bilinear(const T* u, Strided<const T> d, const T* v) {
    check_float<T>();
    const Index size = d.size();
    if (size == 0) return T(0);
    T* values = norm_values_.as<T>();
    detail::launch_sum(detail::BilinearTerms<T>{d, u, v}, size, norm_partials_.as<T>(), values, stream_);
    return fetch(static_cast<const T*>(values));
  }
  /// D += alpha x y^T (x: D.rows elements, y: D.cols).
  template <class T>
  void rank1(Strided<T> d, T alpha, const T* x, const T* y) {
    check_float<T>();
    detail::launch_elements(detail::Rank1Op<T>{detail::mat(d), x, y, alpha}, detail::space_of(d), stream_);
  }
  /// n elements from (pageable) host memory to device memory, on the engine's stream (the host data is staged
  /// before the call returns).
  template <class T>
  void upload(const T* host, Index n, T* device) {
    check_float<T>();
    if (n <= 0) return;
    MATOPT_CUDA_CHECK(cudaMemcpyAsync(device, host, sizeof(T) * std::size_t(n), cudaMemcpyHostToDevice, stream_));
  }
  /// n elements from device memory to host memory, after the stream's earlier work; returns when they are there.
  template <class T>
  void download(const T* device, Index n, T* host) {
    check_float<T>();
    if (n <= 0) return;
    MATOPT_CUDA_CHECK(cudaMemcpyAsync(host, device, sizeof(T) * std::size_t(n), cudaMemcpyDeviceToHost, stream_));
    MATOPT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // ---- The same on Batched<T> handles: strided-batched cuBLAS, kernels over (i, j, matrix) ---------------

  /// Per-matrix norms, left on the device (valid until the next norm call).
  template <class T>
  BatchScalar<T> norm(const Batched<T>& x) {
    check_float<T>();
    if (x.count == 0) return BatchScalar<T>(0.0);
    const Index size = x.size(), chunks = detail::norm_chunks(size);
    require(norm_partials_, std::size_t(2 * x.count * chunks) * sizeof(T), "batched norm");
    require(norm_values_, std::size_t(2 * x.count) * sizeof(T), "batched norm");
    T* psum = norm_partials_.as<T>();
    T* values = norm_values_.as<T>();
    detail::launch_norms(detail::DenseSegments<T>{x.data, x.stride}, size, x.count, psum, psum + x.count * chunks,
                         values, values + x.count, stream_);
    return BatchScalar<T>::per_matrix(values);
  }
  /// x_b = s_b x_b for each matrix b of the batch.
  template <class T>
  void scale(Batched<T>& x, const BatchScalar<T>& s) {
    check_float<T>();
    const auto xm = detail::mat(x.matrix(), x.stride);
    if (s.is_constant())
      detail::launch_elements(detail::ScaleOp<T>{xm, s.constant("scale")}, detail::space_of(x.matrix(), x.count),
                              stream_);
    else
      detail::launch_elements(detail::BatchScaleOp<T, BatchScalar<T>>{xm, s}, detail::space_of(x.matrix(), x.count),
                              stream_);
  }
  /// Whether the batch has no elements.
  template <class T>
  static bool empty(const Batched<T>& x) {
    return x.size() == 0 || x.count == 0;
  }
  /// C_b <- alpha A_b A_b^T + beta C_b for every matrix: cuBLAS has no batched SYRK, so one strided-batched
  /// GEMM computes the full products (both triangles; ns_algorithm.hpp uses the lower one).
  template <class T>
  void syrk_lower(const BatchScalar<T>& alpha, const Batched<T>& a, const BatchScalar<T>& beta, Batched<T>& c) {
    check_float<T>();
    if (c.rows != a.rows || c.cols != a.rows || c.count != a.count)
      throw std::logic_error("matopt::cuda::Engine::syrk_lower (batched): C must be count x n x n");
    if (c.rows == 0 || c.count == 0) return;
    gemm_strided_batched(CUBLAS_OP_T, alpha.constant("syrk_lower"), a, a, beta.constant("syrk_lower"), c,
                         "syrk_lower");
  }
  /// C_b <- alpha A_b B_b + beta C_b for every matrix.
  template <class T>
  void gemm(const BatchScalar<T>& alpha, const Batched<T>& a, const Batched<T>& b, const BatchScalar<T>& beta,
            Batched<T>& c) {
    check_float<T>();
    if (a.rows != c.rows || b.cols != c.cols || a.cols != b.rows || a.count != c.count || b.count != c.count)
      throw std::logic_error("matopt::cuda::Engine::gemm (batched): operand shapes do not match");
    if (c.size() == 0 || c.count == 0) return;
    gemm_strided_batched(CUBLAS_OP_N, alpha.constant("gemm"), a, b, beta.constant("gemm"), c, "gemm");
  }
  /// Copies each matrix's lower triangle onto its upper one.
  template <class T>
  void mirror_lower(Batched<T>& c) {
    check_float<T>();
    if (c.rows == 0 || c.count == 0) return;
    mirror_tiles(c.data, c.rows, c.rows, c.stride, c.count);
  }
  /// Copies each matrix's lower triangle (diagonal included) from src into dst.
  template <class T>
  void copy_lower(const Batched<T>& src, Batched<T>& dst) {
    check_float<T>();
    detail::launch_elements(detail::CopyLowerOp<T>{detail::mat(dst.matrix(), dst.stride),
                                                   detail::mat(Strided<const T>(src.matrix()), src.stride)},
                            detail::space_of(dst.matrix(), dst.count), stream_);
  }
  /// C_b = C_b + v I for each matrix b (v a constant).
  template <class T>
  void add_diagonal(Batched<T>& c, const BatchScalar<T>& v) {
    check_float<T>();
    detail::launch_elements(detail::AddDiagonalOp<T>{detail::mat(c.matrix(), c.stride), v.constant("add_diagonal")},
                            detail::Space{detail::index_min(c.rows, c.cols), 1, c.count, true}, stream_);
  }
  /// dst = src, matrix by matrix.
  template <class T>
  void copy(const Batched<T>& src, Batched<T>& dst) {
    copy_batched(Strided<const T>(src.matrix()), src.stride, dst.matrix(), dst.stride, dst.count);
  }
  /// dst_b = src_b for b < count: matrix b of src at src.data + b * src_stride (any strides; the batched
  /// copies in and out of orthogonalize_batched, transposing where the storage orders differ).
  template <class T>
  void copy_batched(Strided<const T> src, Index src_stride, Strided<T> dst, Index dst_stride, Index count) {
    check_float<T>();
    detail::launch_elements(detail::CopyOp<T>{detail::mat(dst, dst_stride), detail::mat(src, src_stride)},
                            detail::space_of(dst, count), stream_);
  }

 private:
  /// aol_scale for `count` matrices: X_b at x + b * x_stride, A_b (r x r) at a + b * a_stride, d_b at d + b * d_stride.
  template <class T>
  void aol(Strided<T> x, Strided<T> a, T* d, Index count, Index x_stride, Index a_stride, Index d_stride, T eps) {
    check_float<T>();
    const Index r = a.rows;
    if (r <= 0 || count <= 0) return;
    MATOPT_ASSERT(a.rs == 1 && a.cs == r);  // aol_factors reads A column-major with ld = r
    detail::aol_factors<T><<<dim3(unsigned(detail::index_min(detail::ceil_div(r, detail::kBlock), 1 << 20)),
                                  unsigned(detail::index_min(count, detail::kMaxGridY))),
                             detail::kBlock, 0, stream_>>>(a.data, r, a_stride, count, eps, d, d_stride);
    MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::aol_factors");
    const T* dc = d;
    detail::launch_elements(detail::ScaleRowsOp<T>{detail::mat(x, x_stride), dc, d_stride},
                            detail::space_of(x, count), stream_);
    detail::launch_elements(detail::ScaleBothOp<T>{detail::mat(a, a_stride), dc, d_stride}, detail::space_of(a, count),
                            stream_);
  }

  template <class T>
  static void check_float() {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "matopt::cuda::Engine: the element type must be float or double");
  }
  /// Runs f (cuBLAS calls) under CUBLAS_DEFAULT_MATH: T's own arithmetic even when the products are TF32.
  template <class F>
  void default_math(F&& f) {
    if (precision_ != Precision::TF32) {
      f();
      return;
    }
    MATOPT_CUDA_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    try {
      f();
    } catch (...) {
      cublasSetMathMode(blas_, CUBLAS_TF32_TENSOR_OP_MATH);
      throw;
    }
    MATOPT_CUDA_CHECK(cublasSetMathMode(blas_, CUBLAS_TF32_TENSOR_OP_MATH));
  }
  /// Bytes of `count` scalars of the largest element type (scratch is shared by float and double calls).
  static std::size_t scalar_bytes(Index count) { return std::size_t(detail::index_max(count, 0)) * sizeof(double); }
  /// Blocks for `rows` rows at `rows_per_block` per block (the row kernels loop over the rest).
  static unsigned grid_rows(Index rows, Index rows_per_block) {
    return unsigned(detail::index_max(1, detail::index_min(detail::ceil_div(rows, rows_per_block), 1 << 20)));
  }
  template <class T>
  static Index index_ld(const Strided<T>& c) {
    return detail::index_max(1, c.cols <= 1 ? c.rows : c.cs);
  }

  void require(const detail::DeviceBuffer& b, std::size_t bytes, const char* what) const {
    if (b.bytes() < bytes)
      throw std::logic_error(std::string("matopt::cuda::Engine: ") + what + " needs " + std::to_string(bytes) +
                             " bytes of scratch but only " + std::to_string(b.bytes()) +
                             " are reserved; call reserve(m, n) (DeviceOptimizer::make_state does) or "
                             "reserve_batched for the largest shape first");
  }
  /// Records the largest bf16 operand (elements) and, with BF16 precision, sizes both operand buffers for it.
  void reserve_bf16(Index elements) {
    const Index need = detail::index_max(bf16_elements_, elements);
    if (precision_ == Precision::BF16) {
      bf16_a_.reserve(std::size_t(need) * sizeof(__nv_bfloat16));
      bf16_b_.reserve(std::size_t(need) * sizeof(__nv_bfloat16));
    }
    bf16_elements_ = need;  // after the allocations: a failed reserve records nothing
  }

  /// The value at device pointer p, through pinned memory.
  template <class V>
  V fetch(const V* p) {
    V* host = pinned_.as<V>();
    MATOPT_CUDA_CHECK(cudaMemcpyAsync(host, p, sizeof(V), cudaMemcpyDeviceToHost, stream_));
    MATOPT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return *host;
  }

  template <class T>
  void axpby(Strided<T> out, T a, Strided<const T> x, T b, Strided<const T> y) {
    check_float<T>();
    if (out.size() == 0) return;
    if (!(detail::same_order(out, x) && detail::same_order(out, y)) && detail::is_dense(out) && detail::is_dense(x) &&
        detail::is_dense(y)) {
      geam(out, a, x, b, y);  // storage orders differ: cuBLAS's transposing geam keeps both sides coalesced
      return;
    }
    detail::launch_elements(detail::AxpbyOp<T>{detail::mat(out), detail::mat(x), detail::mat(y), a, b},
                            detail::space_of(out), stream_);
  }
  /// out = a op(x) + b op(y) by cublas<t>geam (dense handles; a row-major out is handled as its transpose).
  /// In place only as cuBLAS allows it: out aliasing an operand of the same storage order.
  template <class T>
  void geam(Strided<T> out, T a, Strided<const T> x, T b, Strided<const T> y) {
    if (detail::blas_operand(out).op != CUBLAS_OP_N) {
      out = out.t();
      x = x.t();
      y = y.t();
    }
    const detail::BlasOperand oo = detail::blas_operand(out), ox = detail::blas_operand(x),
                              oy = detail::blas_operand(y);
    const int m = detail::to_int(out.rows, "m"), n = detail::to_int(out.cols, "n");
    if constexpr (std::is_same_v<T, float>)
      MATOPT_CUDA_CHECK(cublasSgeam(blas_, ox.op, oy.op, m, n, &a, x.data, ox.ld, &b, y.data, oy.ld, out.data, oo.ld));
    else
      MATOPT_CUDA_CHECK(cublasDgeam(blas_, ox.op, oy.op, m, n, &a, x.data, ox.ld, &b, y.data, oy.ld, out.data, oo.ld));
  }

  /// lower(C) <- alpha A A^T + beta lower(C) for syrk_lower and gram_lower: cublas<t>syrk, or on tensor cores
  /// (`tensor_cores`, T float): syrk_bf16 in BF16, one full cublasSgemm in TF32 (cuBLAS's SSYRK has no TF32
  /// tensor-core path: on an H200 it held TF32 Newton–Schulz at 3.9x the GEMM floor). C column-major.
  template <class T>
  void syrk(T alpha, const Strided<T>& a, T beta, Strided<T>& c, bool tensor_cores, const char* what) {
    check_float<T>();
    if (c.rows != a.rows || c.cols != a.rows)
      throw std::logic_error(std::string("matopt::cuda::Engine::") + what + ": C must be n x n");
    if (c.rows == 0) return;
    const detail::BlasOperand oc = detail::blas_operand(c), oa = detail::blas_operand(a);
    if (oc.op != CUBLAS_OP_N)
      throw std::logic_error(std::string("matopt::cuda::Engine::") + what + ": C must be column-major");
    const int n = detail::to_int(a.rows, "n"), k = detail::to_int(a.cols, "k");
    if constexpr (std::is_same_v<T, float>) {
      if (tensor_cores && precision_ == Precision::BF16) {
        syrk_bf16(alpha, a, beta, c, oc.ld);
        return;
      }
      if (tensor_cores) {  // op(A) op(A)^T as a GEMM: op(A) is A (n x k) for CUBLAS_OP_N, else A^T
        const cublasOperation_t op_t = oa.op == CUBLAS_OP_N ? CUBLAS_OP_T : CUBLAS_OP_N;
        MATOPT_CUDA_CHECK(cublasSgemm(blas_, oa.op, op_t, n, n, k, &alpha, a.data, oa.ld, a.data, oa.ld, &beta,
                                      c.data, oc.ld));
        return;
      }
    }
    if constexpr (std::is_same_v<T, float>)
      MATOPT_CUDA_CHECK(
          cublasSsyrk(blas_, CUBLAS_FILL_MODE_LOWER, oa.op, n, k, &alpha, a.data, oa.ld, &beta, c.data, oc.ld));
    else
      MATOPT_CUDA_CHECK(
          cublasDsyrk(blas_, CUBLAS_FILL_MODE_LOWER, oa.op, n, k, &alpha, a.data, oa.ld, &beta, c.data, oc.ld));
  }
  /// C_b <- alpha A_b op(B_b) + beta C_b for every matrix of the batches (op: CUBLAS_OP_N, or CUBLAS_OP_T for the
  /// batched SYRK's A A^T), as one strided-batched cuBLAS call in the engine's precision: BF16 converts A and B
  /// (once where B is A) and accumulates in FP32.
  template <class T>
  void gemm_strided_batched(cublasOperation_t op_b, T alpha, const Batched<T>& a, const Batched<T>& b, T beta,
                            Batched<T>& c, const char* what) {
    const int m = detail::to_int(c.rows, "m"), n = detail::to_int(c.cols, "n"), k = detail::to_int(a.cols, "k");
    const int count = detail::to_int(c.count, "count"), lda = std::max(1, m);
    const int ldb = std::max(1, detail::to_int(b.rows, "ldb"));
    if constexpr (std::is_same_v<T, float>) {
      if (precision_ == Precision::BF16) {
        const __nv_bfloat16* a16 =
            to_bf16(detail::mat(Strided<const T>(a.matrix()), a.stride), a.rows, a.cols, a.count, bf16_a_, what);
        const __nv_bfloat16* b16 =
            &b == &a ? a16
                     : to_bf16(detail::mat(Strided<const T>(b.matrix()), b.stride), b.rows, b.cols, b.count, bf16_b_,
                               what);
        MATOPT_CUDA_CHECK(cublasGemmStridedBatchedEx(
            blas_, CUBLAS_OP_N, op_b, m, n, k, &alpha, a16, CUDA_R_16BF, lda, a.size(), b16, CUDA_R_16BF, ldb,
            b.size(), &beta, c.data, CUDA_R_32F, m, c.stride, count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return;
      }
      MATOPT_CUDA_CHECK(cublasSgemmStridedBatched(blas_, CUBLAS_OP_N, op_b, m, n, k, &alpha, a.data, lda, a.stride,
                                                  b.data, ldb, b.stride, &beta, c.data, m, c.stride, count));
    } else {
      MATOPT_CUDA_CHECK(cublasDgemmStridedBatched(blas_, CUBLAS_OP_N, op_b, m, n, k, &alpha, a.data, lda, a.stride,
                                                  b.data, ldb, b.stride, &beta, c.data, m, c.stride, count));
    }
  }
  /// A bf16 column-major copy (count matrices of rows x cols, contiguous) of src in `buffer`.
  template <class T>
  const __nv_bfloat16* to_bf16(detail::Mat<const T> src, Index rows, Index cols, Index count,
                               detail::DeviceBuffer& buffer, const char* what) {
    static_assert(std::is_same_v<T, float>, "matopt::cuda::Engine: bf16 operands are converted from float");
    require(buffer, std::size_t(count * rows * cols) * sizeof(__nv_bfloat16), what);
    __nv_bfloat16* dst = buffer.as<__nv_bfloat16>();
    const Strided<__nv_bfloat16> d = matopt::detail::col_major(dst, rows, cols);
    detail::launch_elements(detail::ToBf16Op<T>{detail::mat(d, rows * cols), src},
                            detail::space_of(d, count), stream_);
    return dst;
  }
  /// lower(C) <- alpha A A^T + beta lower(C) with bf16 operands (file comment: blocks or one full GEMM).
  void syrk_bf16(float alpha, const Strided<float>& a, float beta, Strided<float>& c, int ldc) {
    const Index n = a.rows, k = a.cols;
    const __nv_bfloat16* a16 = to_bf16(detail::mat(Strided<const float>(a)), n, k, 1, bf16_a_, "syrk_lower");
    const int ni = detail::to_int(n, "n"), ki = detail::to_int(k, "k"), lda = std::max(1, ni);
    const int nb = detail::bf16_syrk_blocks(n);
    if (nb == 1) {
      MATOPT_CUDA_CHECK(cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_T, ni, ni, ki, &alpha, a16, CUDA_R_16BF, lda, a16,
                                     CUDA_R_16BF, lda, &beta, c.data, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
      return;
    }
    // Block (bi, bj), bi >= bj: C[bi, bj] = alpha A[bi] A[bj]^T + beta C[bi, bj], A[b] = rows b*bs.. of A.
    const Index bs = n / nb;
    detail::PointerBatch p{};
    for (int bi = 0; bi < nb; ++bi)
      for (int bj = 0; bj <= bi; ++bj) {
        p.a[p.count] = a16 + bi * bs;
        p.b[p.count] = a16 + bj * bs;
        p.c[p.count] = c.data + bi * bs + bj * bs * Index(ldc);
        ++p.count;
      }
    void** base = pointers_.as<void*>();
    const void** pa = const_cast<const void**>(base);
    const void** pb = pa + detail::kMaxPointerBatch;
    void** pc = base + 2 * detail::kMaxPointerBatch;
    detail::write_pointer_batch<<<1, detail::kMaxPointerBatch, 0, stream_>>>(p, pa, pb, pc);
    MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::write_pointer_batch");
    const int bsi = detail::to_int(bs, "block");
    MATOPT_CUDA_CHECK(cublasGemmBatchedEx(blas_, CUBLAS_OP_N, CUBLAS_OP_T, bsi, bsi, ki, &alpha, pa, CUDA_R_16BF, lda,
                                          pb, CUDA_R_16BF, lda, &beta, pc, CUDA_R_32F, ldc, p.count, CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
  }

  template <class T>
  void mirror_tiles(T* c, Index n, Index ld, Index stride, Index count) {
    const unsigned tiles = unsigned(detail::ceil_div(n, detail::kWarp));
    if (tiles > detail::kMaxGridY)
      throw std::invalid_argument("matopt::cuda::Engine::mirror_lower: matrix too large (n = " + std::to_string(n) +
                                  ")");
    const dim3 grid(tiles, tiles, unsigned(detail::index_min(count, detail::kMaxGridY)));
    detail::mirror_lower_tiles<T><<<grid, dim3(detail::kWarp, 8), 0, stream_>>>(c, n, ld, stride, count);
    MATOPT_CUDA_CHECK_LAUNCH("matopt::cuda::detail::mirror_lower_tiles");
  }

  void init(cudaStream_t stream, bool own, Precision precision) {
    try {
      if (own) {
        MATOPT_CUDA_CHECK(cudaStreamCreate(&stream_));
        owns_stream_ = true;
      } else {
        stream_ = stream;
      }
      MATOPT_CUDA_CHECK(cublasCreate(&blas_));
      MATOPT_CUDA_CHECK(cublasSetStream(blas_, stream_));
      cublas_ws_.reserve(detail::kCublasWorkspaceBytes);  // after cublasSetStream, which resets the workspace
      MATOPT_CUDA_CHECK(cublasSetWorkspace(blas_, cublas_ws_.as<void>(), cublas_ws_.bytes()));
      norm_partials_.reserve(2 * 1024 * sizeof(double));  // one segment: norm_chunks <= 1024
      norm_values_.reserve(2 * sizeof(double));
      flag_.reserve(sizeof(int));
      pointers_.reserve(3 * detail::kMaxPointerBatch * sizeof(void*));
      pinned_ = detail::PinnedBuffer(64);
      set_precision(precision);
    } catch (...) {
      release();
      throw;
    }
  }
  void release() noexcept {
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (owns_stream_ && stream_ != nullptr) cudaStreamDestroy(stream_);
    blas_ = nullptr;
    stream_ = nullptr;
    owns_stream_ = false;
  }
  void take(Engine& o) noexcept {
    stream_ = std::exchange(o.stream_, nullptr);
    owns_stream_ = std::exchange(o.owns_stream_, false);
    blas_ = std::exchange(o.blas_, nullptr);
    precision_ = o.precision_;
    bf16_elements_ = o.bf16_elements_;
    cublas_ws_ = std::move(o.cublas_ws_);
    norm_partials_ = std::move(o.norm_partials_);
    norm_values_ = std::move(o.norm_values_);
    flag_ = std::move(o.flag_);
    row_partials_ = std::move(o.row_partials_);
    row_scales_ = std::move(o.row_scales_);
    bf16_a_ = std::move(o.bf16_a_);
    bf16_b_ = std::move(o.bf16_b_);
    pointers_ = std::move(o.pointers_);
    for (int k = 0; k < 6; ++k) ns_[k] = std::move(o.ns_[k]);
    pinned_ = std::move(o.pinned_);
  }

  cudaStream_t stream_ = nullptr;
  bool owns_stream_ = false;
  cublasHandle_t blas_ = nullptr;
  Precision precision_ = Precision::FP32;
  Index bf16_elements_ = 0;  ///< the largest bf16 operand reserved so far (elements)
  detail::DeviceBuffer cublas_ws_;
  detail::DeviceBuffer norm_partials_, norm_values_, flag_;  // reductions
  detail::DeviceBuffer row_partials_, row_scales_;           // two-pass row normalization
  detail::DeviceBuffer bf16_a_, bf16_b_;                     // BF16 operands
  detail::DeviceBuffer pointers_;                            // cublasGemmBatchedEx pointer arrays
  detail::DeviceBuffer ns_[6];                               // orthogonalize's x, y, a, b, q, t
  detail::PinnedBuffer pinned_;
};

}  // namespace matopt::cuda

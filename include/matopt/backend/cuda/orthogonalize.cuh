// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Orthogonalization of device matrices outside an optimizer, one matrix or a batch (cuda::orthogonalize).
// Orthogonalization of device matrices outside an optimizer, one matrix or a strided batch of same-shape
// matrices, with the engine's precision (FP32 / TF32 / BF16; the option ns_dtype = bfloat16 selects BF16 for the
// call) and the engine's own Newton–Schulz workspace:
//
//   matopt::cuda::Engine e(matopt::cuda::Precision::BF16);
//   matopt::cuda::orthogonalize_batched(e, u, out, 64, 256, 256);   // Jordan NS5, row-major, 64 matrices
//   matopt::cuda::orthogonalize_batched<matopt::NewtonSchulz<matopt::schedules::PolarExpress>>(
//       e, u, out, count, m, n, options, matopt::Layout::ColMajor);
//
// u and out are device pointers to `count` m x n matrices stored back to back (matrix b at u + b*m*n) in
// `layout`; out = Orthogonalize<Method>(U_b) for each b, exactly the host preset's D: a tall U is transposed
// to r x s (r = min(m, n)), run through precondition/detail/ns_algorithm.hpp's NsMatrices (plain or Gram, per
// Method's options), and transposed back. The batched form runs NsMatrices once over Batched<T> handles:
// strided-batched cuBLAS products (full A A^T: cuBLAS has no batched SYRK) and kernels over every matrix at
// once, with a per-matrix normalization (batched.cuh). Work is queued on e.stream(); the calls synchronize
// only for the single-matrix norm (orthogonalize) and never for the batched one.
// The first call for a shape grows the engine's workspace (reserve_batched); call it beforehand to keep
// allocations out of a timed loop.

#include "matopt/backend/cuda/engine.cuh"
#include "matopt/core/detail/errors.hpp"
#include "matopt/precondition/detail/ns_algorithm.hpp"
#include "matopt/precondition/newton_schulz.hpp"

namespace matopt::cuda {
namespace detail {

template <class Method, class T>
bool orthogonalize_setup(Engine& e, const T* u, T* out, Index count, Index m, Index n,
                         const typename Method::Options& o, const char* where) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "matopt::cuda::orthogonalize: float or double");
  if (count < 0 || m < 0 || n < 0) matopt::detail::fail(where, "negative count or shape: ", count, " of ", m, "x", n);
  // bfloat16 products are this engine's own (cuBLAS): the options' host check (oneDNN) does not apply.
  typename Method::Options host_checked = o;
  host_checked.dtype = NsDtype::Float32;
  matopt::detail::validate_options<Method>(host_checked, where);
  if (o.dtype == NsDtype::BFloat16 && !std::is_same_v<T, float>)
    matopt::detail::fail(where, "ns_dtype = bfloat16 on the CUDA engine takes float matrices (double runs the FP64 "
                                "routines); got double");
  if (count == 0 || m == 0 || n == 0) return false;
  if (u == nullptr || out == nullptr)
    matopt::detail::fail(where, "u and out must be device pointers to ", count, " matrices of ",
                         matopt::detail::shape_string(m, n), " (got null)");
  e.reserve_batched<T>(count, m, n);
  return true;
}

/// ns_dtype = bfloat16 runs one call's products in Precision::BF16 (bf16 operands, fp32 accumulation), the
/// engine's own precision restored after; float32 keeps the engine's precision (FP32 or TF32).
class NsDtypeScope {
 public:
  NsDtypeScope(Engine& e, NsDtype d) : e_(e), saved_(e.precision()) {
    if (d == NsDtype::BFloat16 && saved_ != Precision::BF16) e_.set_precision(Precision::BF16);
  }
  ~NsDtypeScope() {
    if (e_.precision() != saved_) {
      try {
        e_.set_precision(saved_);
      } catch (...) {  // a failing cuBLAS call in a destructor: the error surfaces at the engine's next call
      }
    }
  }
  NsDtypeScope(const NsDtypeScope&) = delete;
  NsDtypeScope& operator=(const NsDtypeScope&) = delete;

 private:
  Engine& e_;
  Precision saved_;
};

}  // namespace detail

/// out = Orthogonalize<Method>(U) for one m x n device matrix (see the file comment), through the
/// engine's Strided path (cuBLAS SYRK / GEMM, or the BF16 forms).
template <class Method = NewtonSchulz<>, class T>
void orthogonalize(Engine& e, const T* u, T* out, Index m, Index n, const typename Method::Options& o = {},
                   Layout layout = Layout::RowMajor) {
  if (!detail::orthogonalize_setup<Method>(e, u, out, 1, m, n, o, "matopt::cuda::orthogonalize")) return;
  const detail::NsDtypeScope products(e, o.dtype);
  using S = matopt::detail::Strided<T>;
  const bool tall = m > n;
  const Index r = tall ? n : m, s = tall ? m : n;
  const bool gram = Method::uses_gram(o, r, s);
  const NsWorkspace<T> ws = e.ns_workspace<T>(1, r, s);
  S x = ws.x.matrix(), y = ws.y.matrix(), a = ws.a.matrix(), b = ws.b.matrix();
  S q = matopt::detail::col_major(ws.q.data, gram ? r : 0, gram ? r : 0);
  S t = matopt::detail::col_major(ws.t.data, gram ? r : 0, gram ? r : 0);
  e.copy(matopt::detail::strided(u, m, n, layout), tall ? x.t() : x);
  const S d = matopt::detail::NsMatrices<S>{&x, &y, &a, &b, &q, &t}.run(e, o, gram);
  e.copy(matopt::detail::Strided<const T>(tall ? d.t() : d), matopt::detail::strided(out, m, n, layout));
}

/// out_b = Orthogonalize<Method>(U_b) for `count` m x n device matrices (see the file comment).
template <class Method = NewtonSchulz<>, class T>
void orthogonalize_batched(Engine& e, const T* u, T* out, Index count, Index m, Index n,
                           const typename Method::Options& o = {}, Layout layout = Layout::RowMajor) {
  if (!detail::orthogonalize_setup<Method>(e, u, out, count, m, n, o, "matopt::cuda::orthogonalize_batched")) return;
  const detail::NsDtypeScope products(e, o.dtype);
  const bool tall = m > n;
  const Index r = tall ? n : m, s = tall ? m : n;
  NsWorkspace<T> ws = e.ns_workspace<T>(count, r, s);
  const matopt::detail::Strided<T> x = ws.x.matrix();
  e.copy_batched(matopt::detail::strided(u, m, n, layout), m * n, tall ? x.t() : x, r * s, count);
  const bool gram = Method::uses_gram(o, r, s);
  const Batched<T>& d =
      matopt::detail::NsMatrices<Batched<T>>{&ws.x, &ws.y, &ws.a, &ws.b, &ws.q, &ws.t}.run(e, o, gram);
  const matopt::detail::Strided<T> dm = d.matrix();
  e.copy_batched(matopt::detail::Strided<const T>(tall ? dm.t() : dm), r * s,
                 matopt::detail::strided(out, m, n, layout), m * n, count);
}

}  // namespace matopt::cuda

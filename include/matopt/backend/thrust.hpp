// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The Thrust backend: ThrustEngine and ThrustOptimizer, every optimizer over device matrices with Thrust algorithms.
// The Thrust backend (docs/backends.md): every optimizer over device matrices, with the dense
// and element-wise operations written as Thrust algorithms. The device system is Thrust's choice at
// compile time (THRUST_DEVICE_SYSTEM = CPP, OMP or CUDA; CMake: MATOPT_THRUST_DEVICE_SYSTEM): with CPP or
// OMP it compiles with g++ and runs on the CPU, which is how CI tests it without a GPU.
//
//   matopt::ThrustOptimizer<matopt::Muon<float>> opt;      // the preset's Options, defaults, checks
//   auto state = opt.make_state(w);                         // w: DeviceMatrix<float> or DeviceMatrixView
//   opt.step(w, g, state);
//
// The algorithms are not forked from the Eigen path: Newton–Schulz is precondition/detail/ns_algorithm.hpp with
// this file's ThrustEngine, and every scalar rule (momentum coefficients, schedules, shape factors, trust
// ratios, the normalization floor) is the policy's own function (backend/device_optimizer.hpp). The
// products here are plain loops, one output element per Thrust work item: fine for CPU tests and small
// GPU matrices; the CUDA backend (backend/cuda.cuh) replaces them with cuBLAS and fused kernels.
// Diagnostics of device matrices: backend/device_diagnostics.hpp.

#include <cfloat>
#include <cmath>
#include <type_traits>

#include <thrust/copy.h>
#include <thrust/device_ptr.h>
#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

#include "matopt/backend/detail/element_ops.hpp"
#include "matopt/backend/device_diagnostics.hpp"
#include "matopt/backend/device_matrix.hpp"
#include "matopt/backend/device_optimizer.hpp"
#include "matopt/config.hpp"
#include "matopt/core/detail/norm_rule.hpp"

namespace matopt {

namespace detail {

/// The Euclidean norm of the `len` elements at(0), ..., at(len - 1) without overflow or underflow
/// (core/detail/norm_rule.hpp's rule, in sequential loops). at(k) reads an element or computes it (the fused
/// step's u = u_g g + u_v v), in the same order in every pass.
template <class T, class At>
MATOPT_HOST_DEVICE T line_norm(Index len, const At& at) {
  using std::fabs;
  using std::fmax;
  T sumsq = T(0);
  for (Index k = 0; k < len; ++k) {
    const T x = at(k);
    sumsq += x * x;
  }
  return rescaled(
      sumsq,
      [&] {
        T a = T(0);
        for (Index k = 0; k < len; ++k) a = fmax(a, fabs(at(k)));
        return a;
      },
      [&](T a) {
        T scaled = T(0);
        for (Index k = 0; k < len; ++k) {
          const T x = at(k) / a;
          scaled += x * x;
        }
        return scaled;
      });
}
/// Row i of u, for line_norm.
template <class T>
struct RowAt {
  Strided<const T> u;
  Index i;
  MATOPT_HOST_DEVICE T operator()(Index j) const { return u(i, j); }
};
/// Row i of U = u_g G + u_v V, computed, for line_norm (the fused step).
template <class T>
struct MomentumRowAt {
  Strided<const T> g, v;
  MomentumCoefficients<T> c;
  Index i;
  MATOPT_HOST_DEVICE T operator()(Index j) const { return c.u_g * g(i, j) + c.u_v * v(i, j); }
};

// Work items of the Thrust engine (functors, so that they compile for every device system); the element-wise ones
// are element_ops.hpp's, shared with the CUDA kernels.
template <class T>
struct SquareAt {  // x(k)^2, or (x(k) / a)^2 for a divisor a != 0; |x(k)|; finiteness
  Strided<const T> x;
  T a = T(0);
  MATOPT_HOST_DEVICE T operator()(Index k) const {
    Index i, j;
    element_of(x, k, i, j);
    const T v = a == T(0) ? x(i, j) : x(i, j) / a;
    return v * v;
  }
};
template <class T>
struct AbsAt {
  Strided<const T> x;
  MATOPT_HOST_DEVICE T operator()(Index k) const {
    using std::fabs;
    Index i, j;
    element_of(x, k, i, j);
    return fabs(x(i, j));
  }
};
template <class T>
struct FiniteAt {
  Strided<const T> x;
  MATOPT_HOST_DEVICE bool operator()(Index k) const {
    Index i, j;
    element_of(x, k, i, j);
    return finite_value(x(i, j));
  }
};
template <class T>
struct InverseRowNormOp {  // inv[i] = 1 / max(||u_i||, eps)
  Strided<const T> u;
  T* inv;
  T eps;
  MATOPT_HOST_DEVICE void operator()(Index i) const {
    const T n = line_norm<T>(u.cols, RowAt<T>{u, i});
    inv[i] = T(1) / (n > eps ? n : eps);
  }
};
template <class T>
struct RowSquaredNormOp {  // out[i] = sum_j u(i, j)^2, in j order (NorMuon's line statistics)
  Strided<const T> u;
  T* out;
  MATOPT_HOST_DEVICE void operator()(Index i) const {
    T s = T(0);
    for (Index j = 0; j < u.cols; ++j) s += u(i, j) * u(i, j);
    out[i] = s;
  }
};
template <class T>
struct AolFactorOp {  // d[i] = 1 / sqrt(max(sum_j |a(i, j)|, eps)) (Turbo-Muon's AOL, schedule.hpp)
  Strided<const T> a;
  T* d;
  T eps;
  MATOPT_HOST_DEVICE void operator()(Index i) const {
    using std::fabs;
    using std::sqrt;
    T s = T(0);
    for (Index j = 0; j < a.cols; ++j) s += fabs(a(i, j));
    d[i] = T(1) / sqrt(s > eps ? s : eps);
  }
};
template <class T>
struct FusedRowOp {  // a whole RowNormalize + Static step for row i (fused_normalize.hpp's formulas)
  Strided<T> w, v;
  Strided<const T> g;
  FusedStep<T> f;
  MATOPT_HOST_DEVICE void operator()(Index i) const {
    const T norm = line_norm<T>(w.cols, MomentumRowAt<T>{g, Strided<const T>(v), f.c, i});
    const T scale = f.step / (norm > f.eps ? norm : f.eps);
    for (Index j = 0; j < w.cols; ++j) {
      const T gij = g(i, j), vij = v(i, j);
      w(i, j) = f.updated(w(i, j), scale, f.c.u_g * gij + f.c.u_v * vij);
      v(i, j) = f.c.v_v * vij + f.c.v_g * gij;
    }
  }
};
template <class T>
struct GemmOp {  // c = alpha a b + beta c, one element per item (column-major handles)
  Strided<const T> a, b;
  Strided<T> c;
  T alpha, beta;
  MATOPT_HOST_DEVICE void operator()(Index k) const {
    const Index i = k % c.rows, j = k / c.rows;
    T acc = T(0);
    for (Index l = 0; l < a.cols; ++l) acc += a(i, l) * b(l, j);
    c(i, j) = alpha * acc + (beta == T(0) ? T(0) : beta * c(i, j));
  }
};
template <class T>
struct SyrkLowerOp {  // lower(c) = alpha a a^T + beta lower(c)
  Strided<const T> a;
  Strided<T> c;
  T alpha, beta;
  MATOPT_HOST_DEVICE void operator()(Index k) const {
    const Index i = k % c.rows, j = k / c.rows;
    if (i < j) return;
    T acc = T(0);
    for (Index l = 0; l < a.cols; ++l) acc += a(i, l) * a(j, l);
    c(i, j) = alpha * acc + (beta == T(0) ? T(0) : beta * c(i, j));
  }
};
template <class T>
struct GemvOp {  // y(i) = alpha sum_j a(i, j) x(j) + beta y(i), one row per item
  Strided<const T> a;
  const T* x;
  T* y;
  T alpha, beta;
  MATOPT_HOST_DEVICE void operator()(Index i) const {
    T acc = T(0);
    for (Index j = 0; j < a.cols; ++j) acc += a(i, j) * x[j];
    y[i] = alpha * acc + (beta == T(0) ? T(0) : beta * y[i]);
  }
};
template <class T>
struct DotAt {  // x[k] y[k]
  const T* x;
  const T* y;
  MATOPT_HOST_DEVICE T operator()(Index k) const { return x[k] * y[k]; }
};
template <class T>
struct BilinearAt {  // d(i, j) (u[i] v[j]), the term of u^T D v (as SpectralCap's host sum forms it)
  Strided<const T> d;
  const T* u;
  const T* v;
  MATOPT_HOST_DEVICE T operator()(Index k) const {
    Index i, j;
    element_of(d, k, i, j);
    return d(i, j) * (u[i] * v[j]);
  }
};

}  // namespace detail

/// The Thrust engine: the operations DeviceOptimizer and the Newton–Schulz algorithm need, on strided
/// device matrices, for Thrust's configured device system.
struct ThrustEngine {
  /// The scalar type of a matrix handle M.
  template <class M>
  using scalar_t = std::remove_const_t<typename M::value_type>;
  /// "thrust".
  static constexpr const char* name() { return "thrust"; }
  /// No batched Newton–Schulz (the CUDA engine's ns_batched): DeviceOptimizer steps row blocks one by one.
  static constexpr bool has_batched_ns = false;
  /// Newton–Schulz on column-major operands (Orthogonalize's engine form lays X out so).
  static constexpr bool any_order = false;
  /// No scratch of its own to size for m x n parameters (DeviceOptimizer::make_state calls it; Thrust's reductions
  /// allocate their temporaries).
  void reserve(Index, Index) {}

  /// Calls f(i) for i in [0, n) as one Thrust for_each.
  template <class F>
  static void each(Index n, F f) {
    if (n > 0) thrust::for_each(thrust::counting_iterator<Index>(0), thrust::counting_iterator<Index>(n), f);
  }
  /// op(i, j, 0) for each element of out's shape (an operation of element_ops.hpp), one work item each.
  template <class T, class Op>
  static void elements(const detail::Strided<T>& out, Op op) {
    each(out.size(), detail::ElementAt<Op, T>{op, out});
  }

  // Element-wise, on any strides (out's shape is the iteration space).
  /// out = a x + b y, element-wise.
  template <class T>
  void combine(detail::Strided<T> out, T a, detail::Strided<const T> x, T b, detail::Strided<const T> y) {
    elements(out, detail::AxpbyOp<T>{detail::mat(out), detail::mat(x), detail::mat(y), a, b});
  }
  /// out = x, element-wise.
  template <class T>
  void copy(detail::Strided<const T> x, detail::Strided<T> out) {
    elements(out, detail::CopyOp<T>{detail::mat(out), detail::mat(x)});
  }
  /// w = keep w - step d, element-wise.
  template <class T>
  void update(detail::Strided<T> w, T keep, T step, detail::Strided<const T> d) {
    combine(w, keep, detail::Strided<const T>(w), -step, d);
  }
  /// x = s x.
  template <class T>
  void scale(detail::Strided<T> x, T s) {
    elements(x, detail::ScaleOp<T>{detail::mat(x), s});
  }
  /// w = keep w - step d where w d >= 0, w - step d elsewhere (cautious weight decay).
  template <class T>
  void cautious_update(detail::Strided<T> w, T keep, T step, detail::Strided<const T> d) {
    elements(w, detail::CautiousUpdateOp<T>{detail::mat(w), detail::mat(d), keep, step});
  }
  /// s = b s + (1 - b) d^2, then d = d / (sqrt(s) + eps), element-wise (s and d of one shape, any strides).
  template <class T>
  void moment_normalize(detail::Strided<T> d, detail::Strided<T> s, T b, T eps) {
    elements(d, detail::MomentNormalizeOp<T>{detail::mat(d), detail::mat(s), b, eps});
  }
  /// out = g with its non-finite entries replaced by 0.
  template <class T>
  void clean(detail::Strided<T> out, detail::Strided<const T> g) {
    elements(out, detail::CleanOp<T>{detail::mat(out), detail::mat(g)});
  }
  /// x = sign(x), element-wise (sign(0) = 0).
  template <class T>
  void sign(detail::Strided<T> x) {
    elements(x, detail::SignOp<T>{detail::mat(x)});
  }
  /// Whether every entry of x is finite (one reduction).
  template <class T>
  bool all_finite(detail::Strided<const T> x) {
    if (x.size() == 0) return true;
    return thrust::transform_reduce(thrust::counting_iterator<Index>(0), thrust::counting_iterator<Index>(x.size()),
                                    detail::FiniteAt<T>{x}, true, thrust::logical_and<bool>());
  }
  /// Frobenius norm without overflow or underflow (core/detail/norm_rule.hpp's rule, as Thrust reductions).
  template <class T>
  T norm(detail::Strided<const T> x) {
    if (x.size() == 0) return T(0);
    const auto first = thrust::counting_iterator<Index>(0), last = first + x.size();
    return detail::rescaled(
        thrust::transform_reduce(first, last, detail::SquareAt<T>{x}, T(0), thrust::plus<T>()),
        [&] { return thrust::transform_reduce(first, last, detail::AbsAt<T>{x}, T(0), thrust::maximum<T>()); },
        [&](T a) { return thrust::transform_reduce(first, last, detail::SquareAt<T>{x, a}, T(0), thrust::plus<T>()); });
  }
  /// The norm of a mutable handle (the same as the const overload).
  template <class T>
  T norm(detail::Strided<T> x) {
    return norm(detail::Strided<const T>(x));
  }
  /// Whether x has no elements.
  template <class T>
  static bool empty(const detail::Strided<T>& x) {
    return x.size() == 0;
  }

  /// inv[i] = 1 / max(||u_i||, eps) for each row of u (columns: pass u.t()).
  template <class T>
  void inverse_row_norms(detail::Strided<const T> u, T eps, T* inv) {
    each(u.rows, detail::InverseRowNormOp<T>{u, inv, eps});
  }
  /// Multiplies row i of x by s[i] (s in device memory).
  template <class T>
  void scale_rows(detail::Strided<T> x, const T* s) {
    elements(x, detail::ScaleRowsOp<T>{detail::mat(x), s});
  }
  /// out[i] = ||u_i||^2, the plain sum of squares of each row (columns: pass u.t()).
  template <class T>
  void row_squared_norms(detail::Strided<const T> u, T* out) {
    each(u.rows, detail::RowSquaredNormOp<T>{u, out});
  }
  /// A whole RowNormalize + Static step, one row per work item (ColNormalize: pass transposes; the workspace is
  /// unused).
  template <class T, class WS>
  void fused_normalize_rows(detail::Strided<T> w, detail::Strided<const T> g, detail::Strided<T> v,
                            const detail::FusedStep<T>& f, WS&) {
    each(w.rows, detail::FusedRowOp<T>{w, v, g, f});
  }

  // Dense products on column-major handles (precondition/detail/ns_algorithm.hpp's engine interface).
  /// C = alpha A B + beta C (beta = 0: C not read).
  template <class T>
  void gemm(T alpha, const detail::Strided<T>& a, const detail::Strided<T>& b, T beta, detail::Strided<T>& c) {
    each(c.size(), detail::GemmOp<T>{a, b, c, alpha, beta});
  }
  /// lower(C) = alpha A A^T + beta lower(C) (beta = 0: C not read).
  template <class T>
  void syrk_lower(T alpha, const detail::Strided<T>& a, T beta, detail::Strided<T>& c) {
    each(c.size(), detail::SyrkLowerOp<T>{a, c, alpha, beta});
  }
  /// lower(c) = a a^T in T (the Gram of diagnostics and Adaptive; the same products as syrk_lower here).
  template <class T>
  void gram_lower(const detail::Strided<T>& a, detail::Strided<T>& c) {
    syrk_lower(T(1), a, T(0), c);
  }
  /// Copies C's lower triangle onto its upper one.
  template <class T>
  void mirror_lower(detail::Strided<T>& c) {
    elements(c, detail::MirrorOp<T>{detail::mat(c)});
  }
  /// Copies the lower triangle of src (diagonal included) into dst.
  template <class T>
  void copy_lower(const detail::Strided<T>& src, detail::Strided<T>& dst) {
    elements(dst, detail::CopyLowerOp<T>{detail::mat(dst), detail::mat(detail::Strided<const T>(src))});
  }
  /// C = C + v I.
  template <class T>
  void add_diagonal(detail::Strided<T>& c, T v) {
    elements(detail::col_major(c.data, c.rows, 1), detail::AddDiagonalOp<T>{detail::mat(c), v});
  }
  /// Turbo-Muon's AOL scaling (schedule.hpp): d = 1 / sqrt(max(row sums of |A|, eps)) into scratch's first
  /// column, then X <- diag(d) X and A <- diag(d) A diag(d) (scratch: at least a.rows elements).
  template <class T>
  void aol_scale(detail::Strided<T>& x, detail::Strided<T>& a, detail::Strided<T>& scratch, T eps) {
    T* d = scratch.data;
    each(a.rows, detail::AolFactorOp<T>{a, d, eps});
    scale_rows(x, static_cast<const T*>(d));
    elements(a, detail::ScaleBothOp<T>{detail::mat(a), d});
  }
  /// dst = src.
  template <class T>
  void copy(const detail::Strided<T>& src, detail::Strided<T>& dst) {
    copy(detail::Strided<const T>(src), dst);
  }

  // Vectors (SpectralCap's power iteration; contiguous device vectors x, y, u, v of the lengths the shapes imply).
  /// y = alpha A x + beta y (beta = 0: y not read), A on any strides (W, or W.t() for W^T u).
  template <class T>
  void gemv(T alpha, detail::Strided<const T> a, const T* x, T beta, T* y) {
    each(a.rows, detail::GemvOp<T>{a, x, y, alpha, beta});
  }
  /// x^T y of n elements.
  template <class T>
  T dot(const T* x, const T* y, Index n) {
    if (n <= 0) return T(0);
    return thrust::transform_reduce(thrust::counting_iterator<Index>(0), thrust::counting_iterator<Index>(n),
                                    detail::DotAt<T>{x, y}, T(0), thrust::plus<T>());
  }
  /// u^T D v (u: D.rows elements, v: D.cols).
  template <class T>
  T bilinear(const T* u, detail::Strided<const T> d, const T* v) {
    if (d.size() == 0) return T(0);
    return thrust::transform_reduce(thrust::counting_iterator<Index>(0), thrust::counting_iterator<Index>(d.size()),
                                    detail::BilinearAt<T>{d, u, v}, T(0), thrust::plus<T>());
  }
  /// D += alpha x y^T (x: D.rows elements, y: D.cols).
  template <class T>
  void rank1(detail::Strided<T> d, T alpha, const T* x, const T* y) {
    elements(d, detail::Rank1Op<T>{detail::mat(d), x, y, alpha});
  }
  /// n elements from host memory to device memory, and back (returns when the host copy is complete).
  template <class T>
  void upload(const T* host, Index n, T* device) {
    if (n > 0) thrust::copy(host, host + n, thrust::device_pointer_cast(device));
  }
  /// n elements from device memory to host memory.
  template <class T>
  void download(const T* device, Index n, T* host) {
    if (n > 0) thrust::copy(thrust::device_pointer_cast(device), thrust::device_pointer_cast(device) + n, host);
  }
};

namespace detail {
/// The element-wise device optimizers' gradient check (DeviceAdamW, DeviceLion), after the argument checks: Apply
/// for a finite G; under a non-finite G the policy's action with its counter advanced (Skip, Zero), or (Throw) an
/// error naming G's shape, nothing changed. One Thrust reduction on `policy`.
template <class Policy, class T, class State>
GradAction device_gradient_action(const Policy& policy, const char* where, DeviceMatrixView<T> w,
                                  DeviceMatrixView<const T> g, NonFinite non_finite, State& state) {
  const bool finite = thrust::transform_reduce(policy, thrust::counting_iterator<Index>(0),
                                               thrust::counting_iterator<Index>(g.size()),
                                               FiniteAt<T>{strided(g.data, g.rows, g.cols, w.layout)}, true,
                                               thrust::logical_and<bool>());
  const GradAction action = gradient_action(finite, non_finite, where, g.rows, g.cols);
  state.skipped += action == GradAction::Skip;
  state.zeroed += action == GradAction::Zero;
  return action;
}
}  // namespace detail

/// A device optimizer on Thrust's configured device system (see the file comment).
template <class HostOptimizer>
using ThrustOptimizer = DeviceOptimizer<HostOptimizer, ThrustEngine>;

}  // namespace matopt

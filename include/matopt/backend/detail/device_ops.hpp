// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: the element-wise and reduction work items of the device engines (namespace detail only).
// One definition of each per-element operation on strided device matrices (the overflow-safe line norm, the
// combine / copy / update / moment / clean / sign maps, the row scalings, the products' per-element loops): the
// Thrust engine (backend/thrust.hpp) runs them as Thrust algorithms, and the CUDA kernels (backend/cuda/kernels.cuh)
// call the same functors from their own launches. Nothing here depends on Thrust's algorithms, so the CUDA kernels
// include this file, not the Thrust backend.

#include <cfloat>
#include <cmath>

#include "matopt/backend/device_optimizer.hpp"
#include "matopt/config.hpp"
#include "matopt/precondition/detail/fused_normalize.hpp"

namespace matopt {
namespace detail {

/// Per-type limits usable in device code (std::numeric_limits is not, without relaxed constexpr).
template <class T>
struct DeviceLimits;
template <>
struct DeviceLimits<float> {
  static MATOPT_HOST_DEVICE float min() { return FLT_MIN; }
  static MATOPT_HOST_DEVICE float max() { return FLT_MAX; }
};
template <>
struct DeviceLimits<double> {
  static MATOPT_HOST_DEVICE double min() { return DBL_MIN; }
  static MATOPT_HOST_DEVICE double max() { return DBL_MAX; }
};

/// x is neither inf nor NaN (device-safe).
template <class T>
MATOPT_HOST_DEVICE bool finite_value(T x) {
  return x - x == T(0);
}

/// The Euclidean norm of `len` elements x[k * stride] without overflow or underflow (core/detail/norms.hpp's
/// rule: the plain sum of squares, recomputed as a * ||x / a|| only when it leaves the normal range).
template <class T>
MATOPT_HOST_DEVICE T line_norm(const T* x, Index len, Index stride) {
  using std::fabs;
  using std::fmax;
  using std::sqrt;
  T sumsq = T(0);
  for (Index k = 0; k < len; ++k) sumsq += x[k * stride] * x[k * stride];
  if ((sumsq >= DeviceLimits<T>::min() && sumsq <= DeviceLimits<T>::max()) || sumsq != sumsq) return sqrt(sumsq);
  T a = T(0);
  for (Index k = 0; k < len; ++k) a = fmax(a, fabs(x[k * stride]));
  if (!(a > T(0)) || !finite_value(a)) return a;
  T scaled = T(0);
  for (Index k = 0; k < len; ++k) scaled += (x[k * stride] / a) * (x[k * stride] / a);
  return a * sqrt(scaled);
}

/// Element k of the rows x cols iteration space of `out`, in out's memory order (unit stride innermost).
template <class T>
MATOPT_HOST_DEVICE void element_of(const Strided<T>& out, Index k, Index& i, Index& j) {
  if (out.rs == 1) {
    i = k % out.rows;
    j = k / out.rows;
  } else {
    i = k / out.cols;
    j = k % out.cols;
  }
}

// Work items of the Thrust engine (functors, so that they compile for every device system).
template <class T>
struct CombineOp {  // out = a x + b y
  Strided<T> out;
  Strided<const T> x, y;
  T a, b;
  MATOPT_HOST_DEVICE void operator()(Index k) const {
    Index i, j;
    element_of(out, k, i, j);
    out(i, j) = a * x(i, j) + b * y(i, j);
  }
};
template <class T>
struct CopyOp {  // out = x
  Strided<T> out;
  Strided<const T> x;
  MATOPT_HOST_DEVICE void operator()(Index k) const {
    Index i, j;
    element_of(out, k, i, j);
    out(i, j) = x(i, j);
  }
};
template <class T>
struct CautiousUpdateOp {  // w = (w d >= 0 ? keep w : w) - step d (cautious weight decay, scaling/static.hpp)
  Strided<T> w;
  Strided<const T> d;
  T keep, step;
  MATOPT_HOST_DEVICE void operator()(Index k) const {
    Index i, j;
    element_of(w, k, i, j);
    const T x = w(i, j), u = d(i, j);
    w(i, j) = (x * u >= T(0) ? keep * x : x) - step * u;
  }
};
template <class T>
struct MomentNormalizeOp {  // s = b s + (1 - b) d^2, d = d / (sqrt(s) + eps) (AdaMuon, second_moment.hpp)
  Strided<T> d, s;
  T b, eps;
  MATOPT_HOST_DEVICE void operator()(Index k) const {
    using std::sqrt;
    Index i, j;
    element_of(d, k, i, j);
    const T x = d(i, j);
    const T v = b * s(i, j) + (T(1) - b) * (x * x);
    s(i, j) = v;
    d(i, j) = x / (sqrt(v) + eps);
  }
};
template <class T>
struct ScaleOp {
  Strided<T> x;
  T s;
  MATOPT_HOST_DEVICE void operator()(Index k) const {
    Index i, j;
    element_of(x, k, i, j);
    x(i, j) *= s;
  }
};
template <class T>
struct CleanOp {  // out = finite(g) ? g : 0
  Strided<T> out;
  Strided<const T> g;
  MATOPT_HOST_DEVICE void operator()(Index k) const {
    Index i, j;
    element_of(out, k, i, j);
    const T v = g(i, j);
    out(i, j) = finite_value(v) ? v : T(0);
  }
};
template <class T>
struct SignOp {
  Strided<T> x;
  MATOPT_HOST_DEVICE void operator()(Index k) const {
    Index i, j;
    element_of(x, k, i, j);
    const T v = x(i, j);
    x(i, j) = T((v > T(0)) - (v < T(0)));
  }
};
template <class T>
struct SquareAt {  // x(k)^2, x(k) / a squared, |x(k)|, finiteness
  Strided<const T> x;
  T inv_a;
  MATOPT_HOST_DEVICE T operator()(Index k) const {
    Index i, j;
    element_of(x, k, i, j);
    const T v = x(i, j) * inv_a;
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
    const T n = line_norm(&u(i, 0), u.cols, u.cs);
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
struct ScaleBothOp {  // a(i, j) = a(i, j) d[i] d[j]
  Strided<T> a;
  const T* d;
  MATOPT_HOST_DEVICE void operator()(Index k) const {
    Index i, j;
    element_of(a, k, i, j);
    a(i, j) = a(i, j) * d[i] * d[j];
  }
};
template <class T>
struct ScaleRowsOp {  // x(i, j) *= s[i]
  Strided<T> x;
  const T* s;
  MATOPT_HOST_DEVICE void operator()(Index k) const {
    Index i, j;
    element_of(x, k, i, j);
    x(i, j) *= s[i];
  }
};
template <class T>
struct FusedRowOp {  // a whole RowNormalize + Static step for row i (fused_normalize.hpp's formulas)
  Strided<T> w, v;
  Strided<const T> g;
  FusedStep<T> f;
  MATOPT_HOST_DEVICE void operator()(Index i) const {
    using std::fabs;
    using std::fmax;
    using std::sqrt;
    T sumsq = T(0);
    for (Index j = 0; j < w.cols; ++j) {
      const T u = f.c.u_g * g(i, j) + f.c.u_v * v(i, j);
      sumsq += u * u;
    }
    T norm = sqrt(sumsq);
    if (!((sumsq >= DeviceLimits<T>::min() && sumsq <= DeviceLimits<T>::max()) || sumsq != sumsq)) {
      T a = T(0);  // left the normal range: a * ||u / a|| (core/detail/norms.hpp)
      for (Index j = 0; j < w.cols; ++j) a = fmax(a, fabs(f.c.u_g * g(i, j) + f.c.u_v * v(i, j)));
      if (a > T(0) && finite_value(a)) {
        T scaled = T(0);
        for (Index j = 0; j < w.cols; ++j) {
          const T u = (f.c.u_g * g(i, j) + f.c.u_v * v(i, j)) / a;
          scaled += u * u;
        }
        norm = a * sqrt(scaled);
      } else {
        norm = a;
      }
    }
    const T scale = f.step / (norm > f.eps ? norm : f.eps);
    for (Index j = 0; j < w.cols; ++j) {
      const T gij = g(i, j), vij = v(i, j);
      w(i, j) = f.keep * w(i, j) - scale * (f.c.u_g * gij + f.c.u_v * vij);
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
struct TriangleOp {  // mirror: c(i, j) = c(j, i) for i < j; copy_lower: dst(i, j) = src(i, j) for i >= j
  Strided<const T> src;
  Strided<T> dst;
  bool mirror;
  MATOPT_HOST_DEVICE void operator()(Index k) const {
    const Index i = k % dst.rows, j = k / dst.rows;
    if (mirror && i < j) dst(i, j) = src(j, i);
    if (!mirror && i >= j) dst(i, j) = src(i, j);
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
template <class T>
struct Rank1Op {  // d(i, j) += alpha (x[i] y[j])
  Strided<T> d;
  const T* x;
  const T* y;
  T alpha;
  MATOPT_HOST_DEVICE void operator()(Index k) const {
    Index i, j;
    element_of(d, k, i, j);
    d(i, j) += alpha * (x[i] * y[j]);
  }
};
template <class T>
struct AddDiagonalOp {
  Strided<T> c;
  T v;
  MATOPT_HOST_DEVICE void operator()(Index i) const { c(i, i) += v; }
};

}  // namespace detail

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: the element-wise operations of the device engines, written once for the Thrust engine and the CUDA
/// kernels (namespace detail only).
// Each operation is a functor on element (i, j) of matrix b of a batch (Mat: a strided matrix and the number of
// elements between consecutive matrices). The CUDA engine launches it over a 2-D grid per matrix of a batch
// (cuda/kernels.cuh's for_each_element); the Thrust engine runs it over one matrix, one Thrust work item per element
// (ElementAt, b = 0). So both engines compute each element with the same expression, in the same order.

#include <cmath>

#include "matopt/config.hpp"
#include "matopt/core/detail/norm_rule.hpp"
#include "matopt/core/detail/strided.hpp"

namespace matopt::detail {

/// A strided matrix of a batch: element (i, j) of matrix b at data[b * stride + i * rs + j * cs].
template <class T>
struct Mat {
  Strided<T> m;
  Index stride = 0;
  MATOPT_HOST_DEVICE T& operator()(Index i, Index j, Index b) const {
    return m.data[b * stride + i * m.rs + j * m.cs];
  }
};
template <class T>
Mat<T> mat(Strided<T> m, Index stride = 0) {
  return {m, stride};
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

/// op(i, j, 0) for element k of the iteration space of `out`: an element-wise operation as one Thrust work item.
template <class Op, class T>
struct ElementAt {
  Op op;
  Strided<T> out;
  MATOPT_HOST_DEVICE void operator()(Index k) const {
    Index i, j;
    element_of(out, k, i, j);
    op(i, j, 0);
  }
};

template <class T>
struct AxpbyOp {  // out = a x + b y
  Mat<T> out;
  Mat<const T> x, y;
  T a, b;
  MATOPT_HOST_DEVICE void operator()(Index i, Index j, Index k) const {
    out(i, j, k) = a * x(i, j, k) + b * y(i, j, k);
  }
};
template <class T>
struct CopyOp {  // out = x
  Mat<T> out;
  Mat<const T> x;
  MATOPT_HOST_DEVICE void operator()(Index i, Index j, Index b) const { out(i, j, b) = x(i, j, b); }
};
template <class T>
struct ScaleOp {  // x = s x
  Mat<T> x;
  T s;
  MATOPT_HOST_DEVICE void operator()(Index i, Index j, Index b) const { x(i, j, b) *= s; }
};
template <class T>
struct CleanOp {  // out = finite(g) ? g : 0
  Mat<T> out;
  Mat<const T> g;
  MATOPT_HOST_DEVICE void operator()(Index i, Index j, Index b) const {
    const T v = g(i, j, b);
    out(i, j, b) = finite_value(v) ? v : T(0);
  }
};
template <class T>
struct SignOp {  // x = sign(x), sign(0) = 0 (norm_rule.hpp's sign_of, as on the host)
  Mat<T> x;
  MATOPT_HOST_DEVICE void operator()(Index i, Index j, Index b) const { x(i, j, b) = sign_of(x(i, j, b)); }
};
template <class T>
struct CautiousUpdateOp {  // w = (w d >= 0 ? keep w : w) - step d (cautious weight decay, scaling/static.hpp)
  Mat<T> w;
  Mat<const T> d;
  T keep, step;
  MATOPT_HOST_DEVICE void operator()(Index i, Index j, Index b) const {
    const T x = w(i, j, b), u = d(i, j, b);
    w(i, j, b) = (x * u >= T(0) ? keep * x : x) - step * u;
  }
};
template <class T>
struct MomentNormalizeOp {  // s = b s + (1 - b) d^2, d = d / (sqrt(s) + eps) (AdaMuon, second_moment.hpp)
  Mat<T> d, s;
  T beta, eps;
  MATOPT_HOST_DEVICE void operator()(Index i, Index j, Index b) const {
    using std::sqrt;
    const T x = d(i, j, b);
    const T v = beta * s(i, j, b) + (T(1) - beta) * (x * x);
    s(i, j, b) = v;
    d(i, j, b) = x / (sqrt(v) + eps);
  }
};
template <class T>
struct ScaleRowsOp {  // x(i, j) *= s[i], the factors of matrix b at s + b * stride
  Mat<T> x;
  const T* s;
  Index stride = 0;
  MATOPT_HOST_DEVICE void operator()(Index i, Index j, Index b) const { x(i, j, b) *= s[b * stride + i]; }
};
template <class T>
struct ScaleBothOp {  // a(i, j) = a(i, j) d[i] d[j], d of matrix b at d + b * stride (Turbo-Muon's AOL)
  Mat<T> a;
  const T* d;
  Index stride = 0;
  MATOPT_HOST_DEVICE void operator()(Index i, Index j, Index b) const {
    const T* db = d + b * stride;
    a(i, j, b) = a(i, j, b) * db[i] * db[j];
  }
};
template <class T>
struct Rank1Op {  // d(i, j) += alpha (x[i] y[j])
  Mat<T> d;
  const T* x;
  const T* y;
  T alpha;
  MATOPT_HOST_DEVICE void operator()(Index i, Index j, Index b) const { d(i, j, b) += alpha * (x[i] * y[j]); }
};
template <class T>
struct CopyLowerOp {  // dst(i, j) = src(i, j) for i >= j
  Mat<T> dst;
  Mat<const T> src;
  MATOPT_HOST_DEVICE void operator()(Index i, Index j, Index b) const {
    if (i >= j) dst(i, j, b) = src(i, j, b);
  }
};
template <class T>
struct MirrorOp {  // c(i, j) = c(j, i) for i < j
  Mat<T> c;
  MATOPT_HOST_DEVICE void operator()(Index i, Index j, Index b) const {
    if (i < j) c(i, j, b) = c(j, i, b);
  }
};
template <class T>
struct AddDiagonalOp {  // c(i, i) += v, over an n x 1 space
  Mat<T> c;
  T v;
  MATOPT_HOST_DEVICE void operator()(Index i, Index, Index b) const { c(i, i, b) += v; }
};

}  // namespace matopt::detail

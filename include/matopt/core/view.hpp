// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// MatrixView (a non-owning view of a framework's buffer), view() of Eigen matrices, and conv_weight_view().
// Non-owning views over a framework's parameter buffers, and the 2-D view of a conv weight.

#include <type_traits>

#include <Eigen/Core>

#include "matopt/config.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/traits.hpp"

namespace matopt {

/// Row-major dynamic matrix: the layout of PyTorch/libtorch `(out, in)` weights.
template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
/// Column-major dynamic matrix: Eigen's default.
template <class T>
using ColMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;

/// A contiguous rows x cols matrix owned by someone else. `T` may be const (gradients).
template <class T>
struct MatrixView {
  /// The first element, in host memory.
  T* data = nullptr;
  /// Number of rows (m, the fan-out of a weight).
  Index rows = 0;
  /// Number of columns (n, the fan-in).
  Index cols = 0;
  /// Storage order of the data (PyTorch's row-major by default).
  Layout layout = Layout::RowMajor;

  /// Number of elements, rows * cols.
  Index size() const { return rows * cols; }

  /// A view of mutable data converts to a view of const data (for gradients).
  template <class U = T, class = std::enable_if_t<!std::is_const_v<U>>>
  operator MatrixView<const U>() const {
    return {data, rows, cols, layout};
  }
};

/// View of a contiguous Eigen matrix (Matrix, or Map without strides).
template <class Derived>
auto view(Eigen::PlainObjectBase<Derived>& m) {
  return MatrixView<typename Derived::Scalar>{m.data(), m.rows(), m.cols(), detail::layout_of_v<Derived>};
}
/// View of a contiguous const Eigen matrix: a MatrixView of const data.
template <class Derived>
auto view(const Eigen::PlainObjectBase<Derived>& m) {
  return MatrixView<const typename Derived::Scalar>{m.data(), m.rows(), m.cols(),
                                                    detail::layout_of_v<Derived>};
}
/// View of a contiguous Eigen::Map: mutable for a Map of mutable data, const otherwise.
template <class P, int Opt>
auto view(Eigen::Map<P, Opt>& m) {
  using S = std::remove_pointer_t<decltype(m.data())>;
  return MatrixView<S>{m.data(), m.rows(), m.cols(), detail::layout_of_v<P>};
}
/// View of a contiguous const Eigen::Map: a MatrixView of const data.
template <class P, int Opt>
auto view(const Eigen::Map<P, Opt>& m) {
  using S = std::remove_pointer_t<decltype(m.data())>;
  return MatrixView<const S>{m.data(), m.rows(), m.cols(), detail::layout_of_v<P>};
}
/// View of a contiguous Eigen::Map given as a temporary, such as `view(Eigen::Map<...>(p, m, n))`.
template <class P, int Opt>
auto view(Eigen::Map<P, Opt>&& m) {
  return view(m);
}

namespace detail {
/// Throws std::invalid_argument on a negative shape, or null data for a nonempty matrix.
template <class T>
void check_view(const MatrixView<T>& v) {
  if (v.rows < 0 || v.cols < 0) fail("matopt::MatrixView", "negative shape ", v.rows, "x", v.cols);
  if (v.data == nullptr && v.rows * v.cols != 0)
    fail("matopt::MatrixView", "null data for a ", shape_string(v.rows, v.cols), " matrix");
}

/// Calls f with an Eigen::Map of the view in its own storage order (after check_view).
template <class T, class F>
decltype(auto) with_map(MatrixView<T> v, F&& f) {
  using Plain = std::remove_const_t<T>;
  check_view(v);
  if (v.layout == Layout::RowMajor) {
    using M = std::conditional_t<std::is_const_v<T>, const RowMatrix<Plain>, RowMatrix<Plain>>;
    Eigen::Map<M> map(v.data, v.rows, v.cols);
    return f(map);
  }
  using M = std::conditional_t<std::is_const_v<T>, const ColMatrix<Plain>, ColMatrix<Plain>>;
  Eigen::Map<M> map(v.data, v.rows, v.cols);
  return f(map);
}
}  // namespace detail

/// The 2-D view of a convolution weight stored `(out, in, kh, kw)` contiguously (PyTorch layout):
/// the row-major matrix `(out, in*kh*kw)`. Every shape-dependent factor (`docs/math.md#conventions`) is computed from
/// this view, e.g. MuonOriginal scales by max(1, out / (in*kh*kw))^(1/2).
template <class T>
Eigen::Map<RowMatrix<T>> conv_weight_view(T* data, Index out, Index in, Index kh, Index kw) {
  if (out < 0 || in < 0 || kh < 0 || kw < 0)
    detail::fail("matopt::conv_weight_view", "negative dimension in (out, in, kh, kw) = (", out, ", ", in,
                 ", ", kh, ", ", kw, ")");
  return Eigen::Map<RowMatrix<T>>(data, out, in * kh * kw);
}
/// The const overload of conv_weight_view(): a read-only 2-D view (a convolution gradient).
template <class T>
Eigen::Map<const RowMatrix<T>> conv_weight_view(const T* data, Index out, Index in, Index kh, Index kw) {
  if (out < 0 || in < 0 || kh < 0 || kw < 0)
    detail::fail("matopt::conv_weight_view", "negative dimension in (out, in, kh, kw) = (", out, ", ", in,
                 ", ", kh, ", ", kw, ")");
  return Eigen::Map<const RowMatrix<T>>(data, out, in * kh * kw);
}

}  // namespace matopt

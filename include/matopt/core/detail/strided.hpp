// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: Strided, a matrix view on any strides, the operand of the policies written once over views for the host
/// and the device engines (namespace detail only).

#include <type_traits>

#include "matopt/config.hpp"

namespace matopt::detail {

/// A rows x cols matrix at data with element (i, j) at data[i * rs + j * cs]: any storage order, and
/// transposes without copies. Column-major handles (rs = 1, cs = rows) are the engines' dense operands.
template <class T>
struct Strided {
  using value_type = T;
  T* data = nullptr;
  Index rows = 0, cols = 0, rs = 0, cs = 0;

  MATOPT_HOST_DEVICE T& operator()(Index i, Index j) const { return data[i * rs + j * cs]; }
  MATOPT_HOST_DEVICE Index size() const { return rows * cols; }
  /// The transpose (a view of the same memory).
  MATOPT_HOST_DEVICE Strided t() const { return {data, cols, rows, cs, rs}; }
  template <class U = T, class = std::enable_if_t<!std::is_const_v<U>>>
  MATOPT_HOST_DEVICE operator Strided<const U>() const {
    return {data, rows, cols, rs, cs};
  }
};

/// T in a parameter from which T is not deduced (a scalar that converts to the matrices' T).
template <class T>
using NotDeduced = typename std::enable_if<true, T>::type;
/// Strided<const T> where T is not deduced: a parameter that a Strided<T> argument converts to.
template <class T>
using ConstView = NotDeduced<Strided<const T>>;

template <class T>
Strided<T> col_major(T* data, Index rows, Index cols) {
  return {data, rows, cols, 1, rows};
}
template <class T>
Strided<T> strided(T* data, Index rows, Index cols, Layout layout) {
  return layout == Layout::RowMajor ? Strided<T>{data, rows, cols, cols, 1} : Strided<T>{data, rows, cols, 1, rows};
}
/// Rows [first, first + rows) of x (a view of the same memory).
template <class T>
Strided<T> rows_of(Strided<T> x, Index first, Index rows) {
  return {x.data + first * x.rs, rows, x.cols, x.rs, x.cs};
}
/// Whether x spans exactly its rows * cols elements from x.data, in one storage order or the other.
template <class T>
bool is_dense(const Strided<T>& x) {
  return (x.rs == 1 && (x.cs == x.rows || x.cols <= 1)) || (x.cs == 1 && (x.rs == x.cols || x.rows <= 1));
}
/// A matrix at data laid out as the dense x.
template <class T>
Strided<T> laid_out_as(T* data, const Strided<T>& x) {
  MATOPT_ASSERT(is_dense(x));
  return {data, x.rows, x.cols, x.rs, x.cs};
}

}  // namespace matopt::detail

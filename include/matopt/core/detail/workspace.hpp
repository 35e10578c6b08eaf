// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: flat scratch buffers sized once and viewed as matrices (namespace detail only).
// Flat scratch buffers sized once (make_state) and viewed as matrices inside step, so that step
// allocates nothing.

#include <cstddef>

#include <Eigen/Core>

#include "matopt/config.hpp"

namespace matopt::detail {

template <class T>
class Buffer {
 public:
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

  /// Grows (never shrinks) to hold at least `size` elements.
  void reserve(Index size) {
    if (size > data_.size()) data_.resize(size);
  }
  /// A rows x cols view of the front of the buffer, column-major unless Order says otherwise.
  template <int Order = Eigen::ColMajor>
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>> matrix(Index rows, Index cols) {
    MATOPT_ASSERT(rows * cols <= data_.size());
    return Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>>(data_.data(), rows, cols);
  }
  Eigen::Map<Vector> vector(Index size) {
    MATOPT_ASSERT(size <= data_.size());
    return Eigen::Map<Vector>(data_.data(), size);
  }
  std::size_t bytes() const { return static_cast<std::size_t>(data_.size()) * sizeof(T); }
  T* data() { return data_.data(); }

 private:
  Vector data_;
};

}  // namespace matopt::detail

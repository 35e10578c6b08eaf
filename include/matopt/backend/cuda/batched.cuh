// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Batched and BatchScalar: handles that run Newton–Schulz over a batch of same-shape matrices with cuda::Engine.
// Handles for running the one Newton–Schulz algorithm (precondition/detail/ns_algorithm.hpp) over a batch of
// same-shape matrices with cuda::Engine: `Batched<T>` (count column-major rows x cols matrices, `stride`
// elements apart) and its scalar type `BatchScalar<T>` (one value per matrix).
//
// Why a scalar type: NsMatrices::run normalizes X by its own norm,
//     const T denominator = T(safety) * e.norm(*x) + T(eps);
//     e.scale(*x, denominator > T(0) ? T(1) / denominator : T(0));
// and over a batch every matrix has its own norm. With T = BatchScalar<T>, e.norm returns a per-matrix value
// that stays on the device, and the arithmetic above builds the per-matrix factor
//     f_b = d_b > 0 ? 1 / d_b : 0,   d_b = safety * norm_b + eps
// evaluated in the scale kernel with correctly rounded operations (no FMA contraction), so f_b equals the
// host's T arithmetic bit for bit. Two rules make the unchanged algorithm per-matrix exact:
//  - division by a per-matrix value is guarded: x / d = (d > 0 ? x / d : 0) for each matrix;
//  - a comparison with a per-matrix operand is `true`. The only comparison is the one above, whose false
//    branch is T(0), exactly what the guarded division gives where d_b <= 0: either branch is right.
// Supported arithmetic: constant op constant (plain T), constant * per-matrix, per-matrix + constant,
// constant / per-matrix (the affine map a * norm + c, then the guarded reciprocal); anything else throws
// std::logic_error (a change in ns_algorithm.hpp that needs more must extend this type).

#include <stdexcept>
#include <string>
#include <type_traits>

#include "matopt/backend/cuda/kernels.cuh"
#include "matopt/config.hpp"

namespace matopt::cuda {

/// `count` column-major rows x cols matrices; matrix b starts at data + b * stride (stride >= rows * cols).
template <class T>
struct Batched {
  /// The element type T.
  using value_type = T;
  /// Device pointer to matrix 0.
  T* data = nullptr;
  /// Shape of each matrix, number of matrices, and elements between consecutive matrices' starts.
  /// @{
  Index rows = 0, cols = 0, count = 0, stride = 0;
  /// @}

  /// Elements of one matrix, rows * cols.
  Index size() const { return rows * cols; }
  /// The strided handle of the matrices (element (i, j) of matrix b: data[b * stride + i + j * rows]).
  matopt::detail::Strided<T> matrix() const { return {data, rows, cols, 1, rows}; }
};

/// A scalar per matrix of a batch: a constant, or f(device[b]) with f an affine map or a guarded reciprocal
/// of one (see the file comment).
template <class T>
class BatchScalar {
 public:
  /// A constant (NsMatrices writes T(1), T(k.c), T(sch.safety), ...).
  explicit BatchScalar(double value) : value_(T(value)) {}
  /// The per-matrix values at device memory `values` (count of them, alive until the kernels using this ran).
  static BatchScalar per_matrix(const T* values) {
    BatchScalar s(0.0);
    s.device_ = values;
    return s;
  }

  /// Whether this is one constant for every matrix.
  bool is_constant() const { return device_ == nullptr; }
  /// The constant (dense products take host scalars); throws std::logic_error for a per-matrix value.
  T constant(const char* where) const {
    if (!is_constant())
      throw std::logic_error(std::string(where) + ": a per-matrix scalar where cuBLAS needs one constant");
    return value_;
  }

  /// The value for matrix b (device code).
  __device__ T at(Index b) const {
    if (device_ == nullptr) return value_;
    const T d = detail::add_rn(detail::mul_rn(mul_, device_[b]), add_);
    if (!reciprocal_) return d;
    return d > T(0) ? detail::div_rn(num_, d) : T(0);
  }

  /// The product; supported: constant * constant and constant * per-matrix (else std::logic_error).
  friend BatchScalar operator*(const BatchScalar& x, const BatchScalar& y) {
    if (x.is_constant() && y.is_constant()) return constant_of(x.value_ * y.value_);
    const BatchScalar& c = x.is_constant() ? x : y;
    const BatchScalar& p = x.is_constant() ? y : x;
    if (!c.is_constant() || p.reciprocal_) unsupported("*");
    BatchScalar r = p;
    r.mul_ = c.value_ * p.mul_;
    r.add_ = c.value_ * p.add_;
    return r;
  }
  /// The sum; supported: constant + constant and per-matrix + constant (else std::logic_error).
  friend BatchScalar operator+(const BatchScalar& x, const BatchScalar& y) {
    if (x.is_constant() && y.is_constant()) return constant_of(x.value_ + y.value_);
    const BatchScalar& c = x.is_constant() ? x : y;
    const BatchScalar& p = x.is_constant() ? y : x;
    if (!c.is_constant() || p.reciprocal_) unsupported("+");
    BatchScalar r = p;
    r.add_ = p.add_ + c.value_;
    return r;
  }
  /// The quotient; supported: constant / constant and constant / per-matrix, guarded (x / d = 0 where d <= 0).
  friend BatchScalar operator/(const BatchScalar& x, const BatchScalar& y) {
    if (x.is_constant() && y.is_constant()) return constant_of(x.value_ / y.value_);
    if (!x.is_constant() || y.reciprocal_) unsupported("/");
    BatchScalar r = y;
    r.reciprocal_ = true;
    r.num_ = x.value_;
    return r;
  }
  /// See the file comment: true when either side is per-matrix (the division is the guard).
  friend bool operator>(const BatchScalar& x, const BatchScalar& y) {
    return (x.is_constant() && y.is_constant()) ? x.value_ > y.value_ : true;
  }

 private:
  static BatchScalar constant_of(T v) {
    BatchScalar s(0.0);
    s.value_ = v;
    return s;
  }
  [[noreturn]] static void unsupported(const char* op) {
    throw std::logic_error(std::string("matopt::cuda::BatchScalar: operator") + op +
                           " of these operands is not supported (see batched.cuh)");
  }

  T value_ = T(0);
  const T* device_ = nullptr;
  T mul_ = T(1), add_ = T(0), num_ = T(1);
  bool reciprocal_ = false;
};

namespace detail {
/// The scalar type of an engine handle: T for Strided<T>, BatchScalar<T> for Batched<T>.
template <class M>
struct HandleScalar {
  using type = std::remove_const_t<typename M::value_type>;
};
template <class T>
struct HandleScalar<Batched<T>> {
  using type = BatchScalar<T>;
};
}  // namespace detail

}  // namespace matopt::cuda

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Matrices in device memory: DeviceMatrix (owning a thrust::device_vector) and DeviceMatrixView, and to_host().
// Matrices in device memory (docs/backends.md): `DeviceMatrix<T>` owns a
// `thrust::device_vector<T>`; `DeviceMatrixView<T>` is a non-owning view of a device buffer that a
// framework hands in (a libtorch CUDA tensor's data_ptr(), a cudaMalloc'd block). Both carry rows, cols
// and the storage order; the mathematics is defined on the logical matrix (docs/math.md#conventions).
//
// With Thrust's CPP or OMP device system "device memory" is host memory, so everything here compiles with
// g++ and runs on the CPU (CI runs the whole Thrust suite that way); with the CUDA system it is GPU memory.

#include <type_traits>

#include <Eigen/Core>
#include <thrust/copy.h>
#include <thrust/device_ptr.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CUDA
#include <cuda_runtime_api.h>
#include <thrust/system/cuda/execution_policy.h>
#endif

#include "matopt/config.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/traits.hpp"

namespace matopt {

namespace detail {
/// Waits for the work queued on the device, on every stream, when Thrust's device system is CUDA (a no-op on the
/// CPU systems). Thrust's own copies and fills run on the legacy default stream, which is not ordered with a
/// caller's non-blocking stream (cudaStreamNonBlocking) that a CUDA engine may run on: every host-side copy of
/// device memory the library makes outside a step (to_host, DeviceMatrix::assign, checkpoint reads and writes,
/// make_state) waits here first. Those Thrust calls are synchronous with the host, so the work queued after them,
/// on any stream, starts after they finish.
inline void device_synchronize() {
#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CUDA
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) fail("matopt device", "cudaDeviceSynchronize failed: ", cudaGetErrorString(e));
#endif
}

/// thrust::copy_n of n elements, nothing when n == 0: Thrust 1.17 (Debian's libthrust-dev) hands the null data()
/// of an empty vector to memmove, which UndefinedBehaviorSanitizer rightly reports.
template <class In, class Size, class Out>
void copy_n(In first, Size n, Out out) {
  if (n > 0) thrust::copy_n(first, n, out);
}

/// The stream a Thrust-only device optimizer (DeviceAdamW) queues its work on: a cudaStream_t with Thrust's CUDA
/// system (nullptr: the legacy default stream), nothing on the CPU systems.
#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CUDA
using DeviceStream = cudaStream_t;
inline auto on_stream(DeviceStream s) { return thrust::cuda::par.on(s); }
#else
struct DeviceStream {};
inline auto on_stream(DeviceStream) { return thrust::device; }
#endif
}  // namespace detail

/// A rows x cols matrix in device memory, owned by someone else. `T` may be const (gradients).
template <class T>
struct DeviceMatrixView {
  T* data = nullptr;  ///< device pointer
  /// Number of rows.
  Index rows = 0;
  /// Number of columns.
  Index cols = 0;
  /// Storage order of the data (row-major by default).
  Layout layout = Layout::RowMajor;

  /// Number of elements, rows * cols.
  Index size() const { return rows * cols; }

  /// A view of mutable data converts to a view of const data.
  template <class U = T, class = std::enable_if_t<!std::is_const_v<U>>>
  operator DeviceMatrixView<const U>() const {
    return {data, rows, cols, layout};
  }
};

/// A rows x cols matrix owning its device memory (thrust::device_vector<T>).
template <class T>
class DeviceMatrix {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "matopt::DeviceMatrix<T>: T must be float or double");

 public:
  /// The scalar type T (float or double).
  using Scalar = T;

  /// An empty 0 x 0 matrix.
  DeviceMatrix() = default;
  /// Zero-filled.
  DeviceMatrix(Index rows, Index cols, Layout layout = Layout::RowMajor)
      : data_(checked_size(rows, cols), T(0)), rows_(rows), cols_(cols), layout_(layout) {}
  /// A device copy of an Eigen matrix, in the Eigen matrix's storage order.
  template <class Derived>
  explicit DeviceMatrix(const Eigen::PlainObjectBase<Derived>& host)
      : data_(host.data(), host.data() + host.size()),
        rows_(host.rows()),
        cols_(host.cols()),
        layout_(detail::layout_of_v<Derived>) {
    static_assert(std::is_same_v<typename Derived::Scalar, T>, "matopt::DeviceMatrix: scalar type mismatch");
  }

  /// Number of rows.
  Index rows() const { return rows_; }
  /// Number of columns.
  Index cols() const { return cols_; }
  /// Number of elements.
  Index size() const { return rows_ * cols_; }
  /// Storage order.
  Layout layout() const { return layout_; }
  /// Device pointer to the first element.
  T* data() { return thrust::raw_pointer_cast(data_.data()); }
  /// Device pointer to the first element (read-only).
  const T* data() const { return thrust::raw_pointer_cast(data_.data()); }
  /// The underlying device vector.
  thrust::device_vector<T>& storage() { return data_; }
  /// The underlying device vector (read-only).
  const thrust::device_vector<T>& storage() const { return data_; }

  /// A view of this matrix.
  DeviceMatrixView<T> view() { return {data(), rows_, cols_, layout_}; }
  /// A read-only view of this matrix.
  DeviceMatrixView<const T> view() const { return {data(), rows_, cols_, layout_}; }
  /// Converts to a view of this matrix.
  operator DeviceMatrixView<T>() { return view(); }
  /// Converts to a read-only view of this matrix.
  operator DeviceMatrixView<const T>() const { return view(); }

  /// Copies `host` (same shape) into this matrix, converting to this matrix's storage order.
  template <class Derived>
  void assign(const Eigen::MatrixBase<Derived>& host) {
    if (host.rows() != rows_ || host.cols() != cols_)
      detail::fail("matopt::DeviceMatrix::assign", "host matrix is ", detail::shape_string(host.rows(), host.cols()),
                   " but the device matrix is ", detail::shape_string(rows_, cols_));
    detail::device_synchronize();  // after the work queued on this matrix, on any stream
    if (layout_ == Layout::RowMajor) {
      const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> tmp = host;
      detail::copy_n(tmp.data(), tmp.size(), data_.begin());
    } else {
      const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor> tmp = host;
      detail::copy_n(tmp.data(), tmp.size(), data_.begin());
    }
  }

 private:
  static std::size_t checked_size(Index rows, Index cols) {
    if (rows < 0 || cols < 0) detail::fail("matopt::DeviceMatrix", "negative shape ", rows, "x", cols);
    return static_cast<std::size_t>(rows * cols);
  }

  thrust::device_vector<T> data_;
  Index rows_ = 0;
  Index cols_ = 0;
  Layout layout_ = Layout::RowMajor;
};

/// A host copy (column-major Eigen matrix) of a device matrix view.
template <class T>
Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, Eigen::Dynamic> to_host(DeviceMatrixView<T> v) {
  using P = std::remove_const_t<T>;
  Eigen::Matrix<P, Eigen::Dynamic, Eigen::Dynamic> out(v.rows, v.cols);
  if (v.size() == 0) return out;
  detail::device_synchronize();  // the values after the work queued on any stream (a caller's stream included)
  const thrust::device_ptr<const P> p(v.data);
  if (v.layout == Layout::ColMajor) {
    thrust::copy(p, p + v.size(), out.data());
  } else {
    Eigen::Matrix<P, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> tmp(v.rows, v.cols);
    thrust::copy(p, p + v.size(), tmp.data());
    out = tmp;
  }
  return out;
}
/// A host copy (column-major Eigen matrix) of a device matrix.
template <class T>
Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> to_host(const DeviceMatrix<T>& m) {
  return to_host(m.view());
}

namespace detail {

/// A view a device optimizer accepts: a shape of no negative extent, and data unless it is empty.
template <class T>
void check_device_view(const char* where, DeviceMatrixView<const T> v, const char* what) {
  if (v.rows < 0 || v.cols < 0) fail(where, what, " has a negative shape ", v.rows, "x", v.cols);
  if (v.data == nullptr && v.size() != 0)
    fail(where, what, " has null data for a ", shape_string(v.rows, v.cols), " matrix");
}

/// The argument checks of an element-wise device step (DeviceAdamW, DeviceLion), before anything changes: both views
/// well formed, G of W's shape and layout, and `state` (rows, cols, layout) made for W.
template <class T, class State>
void check_device_step(const char* where, DeviceMatrixView<const T> w, DeviceMatrixView<const T> g,
                       const State& state) {
  check_device_view(where, w, "W");
  check_device_view(where, g, "G");
  state.check_fits(where, w.rows, w.cols, w.layout, g.rows, g.cols, g.layout);
}

}  // namespace detail

}  // namespace matopt

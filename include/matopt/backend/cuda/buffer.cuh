// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: raw device and pinned host buffers of cuda::Engine's scratch (namespace cuda::detail only).
// Raw device and pinned host buffers of the CUDA backend's engine scratch: RAII, movable, grow-only.
// Growing (cudaFree + cudaMalloc) happens only in Engine::reserve / reserve_batched / set_precision, never in
// a step; growth waits for the device (cudaFree synchronizes), so buffers in flight are never freed early.

#include <cstddef>
#include <utility>

#include <cuda_runtime.h>

#include "matopt/backend/cuda/errors.cuh"

namespace matopt::cuda::detail {

/// Device memory of at least bytes() bytes (256-byte aligned, cudaMalloc's guarantee).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) { reserve(bytes); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  /// Grows to at least `bytes` (contents are not kept); never shrinks. The new buffer is allocated before the old
  /// one is freed, so a failed growth throws with the old buffer (and the scratch later steps rely on) intact; the
  /// price is both buffers at once for a moment.
  void reserve(std::size_t bytes) {
    if (bytes <= bytes_) return;
    void* grown = nullptr;
    MATOPT_CUDA_CHECK(cudaMalloc(&grown, bytes));
    release();
    data_ = grown;
    bytes_ = bytes;
  }
  std::size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void release() noexcept {
    if (data_ != nullptr) cudaFree(data_);  // no throw from a destructor path; errors resurface later
    data_ = nullptr;
    bytes_ = 0;
  }
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Page-locked host memory (the target of the engine's one asynchronous device-to-host copy per reduction).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes) {
    MATOPT_CUDA_CHECK(cudaMallocHost(&data_, bytes));
    bytes_ = bytes;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~PinnedBuffer() { release(); }

  std::size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void release() noexcept {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = nullptr;
    bytes_ = 0;
  }
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace matopt::cuda::detail

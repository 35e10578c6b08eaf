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

/// Owned memory of at least bytes() bytes: device memory (cudaMalloc, 256-byte aligned) or, with Pinned, page-locked
/// host memory (cudaMallocHost: the target of the engine's one asynchronous device-to-host copy per reduction).
/// Moved, never copied.
template <bool Pinned>
class Memory {
 public:
  Memory() = default;
  explicit Memory(std::size_t bytes) { reserve(bytes); }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  Memory(Memory&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Memory& operator=(Memory&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~Memory() { release(); }

  /// Grows to at least `bytes` (contents are not kept); never shrinks. The new buffer is allocated before the old
  /// one is freed, so a failed growth throws with the old buffer (and the scratch later steps rely on) intact; the
  /// price is both buffers at once for a moment.
  void reserve(std::size_t bytes) {
    if (bytes <= bytes_) return;
    void* grown = nullptr;
    if constexpr (Pinned) MATOPT_CUDA_CHECK(cudaMallocHost(&grown, bytes));
    else MATOPT_CUDA_CHECK(cudaMalloc(&grown, bytes));
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
  void release() noexcept {  // no throw from a destructor path; errors resurface later
    if (data_ != nullptr) {
      if constexpr (Pinned) cudaFreeHost(data_);
      else cudaFree(data_);
    }
    data_ = nullptr;
    bytes_ = 0;
  }
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};
/// Device memory.
using DeviceBuffer = Memory<false>;
/// Page-locked host memory.
using PinnedBuffer = Memory<true>;

}  // namespace matopt::cuda::detail

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// NcclCommunicator: matopt::Communicator over an NCCL communicator and a CUDA stream (link matopt::nccl).
// NcclCommunicator: matopt::Communicator over an NCCL communicator (ncclComm_t) and a CUDA stream the
// caller owns (ncclCommInitRank / ncclCommDestroy stay the caller's). Link matopt::nccl (CMake defines it
// only when a CUDA compiler, nccl.h and libnccl are found).
//
// NOT TESTED: matopt's CI machines have no GPU and no NCCL. Written against the NCCL 2.x API
// (ncclAllReduce, ncclAllGather, ncclReduceScatter, ncclBroadcast, ncclReduce, ncclGroupStart/End).
//
// Semantics match the interface (communicator.hpp): every call returns with its result in place, so each
// call synchronizes `stream`. Buffers may be device or managed memory (used directly) or host memory
// (staged through a device buffer this object owns, so the CPU ShardedOptimizer runs on it unchanged).
// Unequal counts (all_gather / reduce_scatter over owner-sized pieces) become grouped ncclBroadcast /
// ncclReduce calls, one per rank; equal counts use ncclAllGather / ncclReduceScatter.

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "matopt/distributed/communicator.hpp"

namespace matopt {

/// Communicator over an NCCL communicator and a CUDA stream the caller owns (ncclCommInitRank and ncclCommDestroy
/// stay the caller's). Every call returns with its result in place (it synchronizes the stream). Buffers may be
/// device or managed memory, used directly, or host memory, staged through a device buffer this object owns.
class NcclCommunicator final : public Communicator {
 public:
  /// Wraps `comm`, queuing the collectives on `stream`; throws std::runtime_error if NCCL cannot report the rank
  /// or size.
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream) : comm_(comm), stream_(stream) {
    check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
    check(ncclCommCount(comm_, &size_), "ncclCommCount");
  }
  /// Not copyable (it owns its staging buffer).
  NcclCommunicator(const NcclCommunicator&) = delete;
  /// Not copyable.
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  /// Frees the staging buffer.
  ~NcclCommunicator() override {
    if (staging_ != nullptr) cudaFree(staging_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "nccl"; }

 protected:
  void do_all_reduce(void* data, std::size_t n, CommType t) override {
    const std::size_t bytes = n * detail::comm_type_bytes(t);
    char* d = device(data, bytes, 0, /*copy_in=*/true);
    check(ncclAllReduce(d, d, n, type(t), ncclSum, comm_, stream_), "ncclAllReduce");
    finish(data, d, bytes);
  }

  void do_all_gather(const void* send, void* recv, const std::vector<std::size_t>& counts, CommType t) override {
    const std::size_t e = detail::comm_type_bytes(t);
    std::vector<std::size_t> displ(counts.size(), 0);
    for (std::size_t r = 1; r < counts.size(); ++r) displ[r] = displ[r - 1] + counts[r - 1];
    const std::size_t total = displ.back() + counts.back(), me = std::size_t(rank_);
    char* d = device(recv, total * e, 0, /*copy_in=*/false);
    const char* s = static_cast<const char*>(send);
    if (d != recv || !on_device(send)) {  // staged: this rank's piece into its place in the device buffer
      copy(d + displ[me] * e, send, counts[me] * e, cudaMemcpyDefault);
      s = d + displ[me] * e;
    }
    if (equal(counts)) {
      check(ncclAllGather(s, d, counts[0], type(t), comm_, stream_), "ncclAllGather");
    } else {
      check(ncclGroupStart(), "ncclGroupStart");
      for (std::size_t r = 0; r < counts.size(); ++r)
        check(ncclBroadcast(r == me ? s : d + displ[r] * e, d + displ[r] * e, counts[r], type(t), int(r), comm_,
                            stream_),
              "ncclBroadcast");
      check(ncclGroupEnd(), "ncclGroupEnd");
    }
    finish(recv, d, total * e);
  }

  void do_reduce_scatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                         CommType t) override {
    const std::size_t e = detail::comm_type_bytes(t);
    std::vector<std::size_t> displ(counts.size(), 0);
    for (std::size_t r = 1; r < counts.size(); ++r) displ[r] = displ[r - 1] + counts[r - 1];
    const std::size_t total = displ.back() + counts.back(), mine = counts[std::size_t(rank_)] * e;
    const bool direct = on_device(send) && on_device(recv);
    const char* s = static_cast<const char*>(send);
    char* d = static_cast<char*>(recv);
    if (!direct) {  // staged: [send (total) | recv (mine)]
      reserve(total * e + mine);
      copy(staging_, send, total * e, cudaMemcpyDefault);
      s = staging_;
      d = staging_ + total * e;
    }
    if (equal(counts)) {
      check(ncclReduceScatter(s, d, counts[0], type(t), ncclSum, comm_, stream_), "ncclReduceScatter");
    } else {
      check(ncclGroupStart(), "ncclGroupStart");
      for (std::size_t r = 0; r < counts.size(); ++r)
        check(ncclReduce(s + displ[r] * e, d, counts[r], type(t), ncclSum, int(r), comm_, stream_), "ncclReduce");
      check(ncclGroupEnd(), "ncclGroupEnd");
    }
    if (!direct) copy(recv, d, mine, cudaMemcpyDefault);
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  void do_broadcast(void* data, std::size_t n, int root, CommType t) override {
    const std::size_t bytes = n * detail::comm_type_bytes(t);
    char* d = device(data, bytes, 0, /*copy_in=*/rank_ == root);
    check(ncclBroadcast(d, d, n, type(t), root, comm_, stream_), "ncclBroadcast");
    finish(data, d, bytes);
  }

 private:
  static ncclDataType_t type(CommType t) {
    return t == CommType::Float ? ncclFloat32 : t == CommType::Double ? ncclFloat64 : ncclUint8;
  }
  static bool equal(const std::vector<std::size_t>& counts) {
    for (std::size_t c : counts)
      if (c != counts[0]) return false;
    return true;
  }
  /// Whether NCCL can use p directly (device or managed memory).
  bool on_device(const void* p) const {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();  // unregistered host memory reports an error on older runtimes: clear it
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }
  /// p itself when NCCL can use it, else the staging buffer (with p's bytes copied in if asked).
  char* device(void* p, std::size_t bytes, std::size_t offset, bool copy_in) {
    if (on_device(p)) return static_cast<char*>(p);
    reserve(offset + bytes);
    if (copy_in) copy(staging_ + offset, p, bytes, cudaMemcpyDefault);
    return staging_ + offset;
  }
  /// Waits for the stream; copies a staged result back to the caller's host buffer.
  void finish(void* p, const char* d, std::size_t bytes) {
    if (d != p) copy(p, d, bytes, cudaMemcpyDefault);
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void copy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind) {
    if (bytes != 0) check(cudaMemcpyAsync(to, from, bytes, kind, stream_), "cudaMemcpyAsync");
  }
  void reserve(std::size_t bytes) {
    if (bytes <= staging_bytes_) return;
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    if (staging_ != nullptr) check(cudaFree(staging_), "cudaFree");
    staging_ = nullptr;
    staging_bytes_ = 0;
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    staging_ = static_cast<char*>(p);
    staging_bytes_ = bytes;
  }
  void check(ncclResult_t status, const char* call) const {
    if (status != ncclSuccess)
      throw std::runtime_error("matopt::NcclCommunicator: " + std::string(call) + " failed on rank " +
                               std::to_string(rank_) + ": " + ncclGetErrorString(status));
  }
  void check(cudaError_t status, const char* call) const {
    if (status != cudaSuccess)
      throw std::runtime_error("matopt::NcclCommunicator: " + std::string(call) + " failed on rank " +
                               std::to_string(rank_) + ": " + cudaGetErrorString(status));
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  int rank_ = 0;
  int size_ = 1;
  char* staging_ = nullptr;
  std::size_t staging_bytes_ = 0;
};

}  // namespace matopt

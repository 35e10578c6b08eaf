// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// C10dCommunicator: matopt::Communicator over a libtorch c10d::ProcessGroup (target matopt::c10d).
// matopt::C10dCommunicator: the collectives of matopt's distributed optimizers (TorchOptimizer's data-parallel step,
// ShardedOptimizer) over libtorch's own engine, c10d::ProcessGroup: Gloo on CPUs, NCCL on GPUs behind one interface
// (docs/distributed.md#data-parallel-libtorch-c10d). It keeps the group alive (c10d's intrusive pointer) but never
// configures, aborts or shuts it down: the group's creator decides its backend, timeout and lifetime.
//
// What each collective uses, so that it runs on Gloo as Debian's libtorch 1.13 builds it (which has no
// reduce_scatter, no _allgather_base and no bfloat16 reductions): all_reduce is allreduce (SUM); all_gather is
// allgather of equal-sized tensors (counts that differ are padded to the largest); reduce_scatter is an allreduce
// of the whole buffer, of which each rank keeps its block; broadcast is broadcast. Only float32, float64 and bytes
// move. A failed collective (a peer that exited, the group's timeout, the backend refusing the call) throws
// matopt::CommunicationError on the rank that saw it, naming the call, the rank and the backend's message. Each
// collective waits for its work to finish or fail, never less (a wait that gave up earlier would leave the backend
// writing into the caller's buffer later): the group's timeout (make_gloo_group's `timeout`) bounds it. After a
// CommunicationError the group is out of step: make a new one.
//
// Target matopt::c10d (defined when CMake finds Torch and the gloo headers, Debian: libgloo-dev); not included by
// <matopt/matopt.hpp>.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/types.h>

#include "matopt/distributed/communicator.hpp"

namespace matopt {

/// Communicator over a libtorch c10d::ProcessGroup (Gloo here; any backend with allreduce, allgather and broadcast).
/// Buffers are host memory; with a CUDA `device` (a CUDA build of libtorch with ProcessGroupNCCL) each collective
/// stages its buffer through that device (written for it, not run: Debian's libtorch has no CUDA).
class C10dCommunicator final : public Communicator {
 public:
  /// Wraps `group` (its timeout bounds every collective); `device` is where the collectives' tensors live (the CPU
  /// for Gloo).
  explicit C10dCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> group, torch::Device device = torch::kCPU)
      : group_(std::move(group)), device_(device) {
    if (!group_) detail::fail("matopt::C10dCommunicator", "the process group is null");
  }

  int rank() const override { return group_->getRank(); }
  int size() const override { return group_->getSize(); }
  const char* name() const override { return "c10d"; }
  /// The wrapped process group.
  c10d::ProcessGroup& group() const { return *group_; }

 protected:
  void do_all_reduce(void* data, std::size_t n, CommType t) override {
    torch::Tensor host = wrap(data, n, t);
    std::vector<torch::Tensor> ts{staged(host)};
    run("allreduce", n, [&] { return group_->allreduce(ts); });
    unstage(ts[0], host);
  }

  void do_all_gather(const void* send, void* recv, const std::vector<std::size_t>& counts, CommType t) override {
    const std::size_t most = *std::max_element(counts.begin(), counts.end());
    if (most == 0) return;
    const std::size_t bytes = detail::comm_type_bytes(t);
    const std::size_t mine = counts[std::size_t(rank())];
    // The input is a copy (send may alias this rank's block of recv), padded to the largest count.
    std::vector<torch::Tensor> in{torch::zeros({std::int64_t(most)}, options(t))};
    if (mine != 0) std::memcpy(in[0].data_ptr(), send, mine * bytes);
    in[0] = staged(in[0]);
    std::vector<std::vector<torch::Tensor>> out(1);
    for (int r = 0; r < size(); ++r) out[0].push_back(torch::empty({std::int64_t(most)}, options(t).device(device_)));
    run("allgather", most, [&] { return group_->allgather(out, in); });
    auto* to = static_cast<char*>(recv);
    for (int r = 0; r < size(); ++r) {
      const std::size_t c = counts[std::size_t(r)];
      if (c == 0) continue;
      const torch::Tensor block = out[0][std::size_t(r)].to(torch::kCPU).contiguous();
      std::memcpy(to, block.data_ptr(), c * bytes);
      to += c * bytes;
    }
  }

  void do_reduce_scatter(const void* send, void* recv, const std::vector<std::size_t>& counts, CommType t) override {
    std::size_t total = 0, offset = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      if (r == std::size_t(rank())) offset = total;
      total += counts[r];
    }
    const std::size_t mine = counts[std::size_t(rank())];
    if (total == 0) return;
    const std::size_t bytes = detail::comm_type_bytes(t);
    std::vector<torch::Tensor> ts{torch::empty({std::int64_t(total)}, options(t))};
    std::memcpy(ts[0].data_ptr(), send, total * bytes);
    ts[0] = staged(ts[0]);
    run("allreduce (reduce_scatter)", total, [&] { return group_->allreduce(ts); });
    const torch::Tensor sum = ts[0].to(torch::kCPU).contiguous();
    if (mine != 0) std::memcpy(recv, static_cast<const char*>(sum.data_ptr()) + offset * bytes, mine * bytes);
  }

  void do_broadcast(void* data, std::size_t n, int root, CommType t) override {
    torch::Tensor host = wrap(data, n, t);
    std::vector<torch::Tensor> ts{staged(host)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    run("broadcast", n, [&] { return group_->broadcast(ts, o); });
    unstage(ts[0], host);
  }

 private:
  static torch::TensorOptions options(CommType t) {
    return torch::TensorOptions().dtype(t == CommType::Float    ? torch::kFloat32
                                        : t == CommType::Double ? torch::kFloat64
                                                                : torch::kUInt8);
  }
  static torch::Tensor wrap(void* data, std::size_t n, CommType t) {
    return torch::from_blob(data, {std::int64_t(n)}, options(t));
  }
  torch::Tensor staged(const torch::Tensor& host) const { return device_.is_cpu() ? host : host.to(device_); }
  void unstage(const torch::Tensor& dev, torch::Tensor& host) const {
    if (!device_.is_cpu()) host.copy_(dev);
  }

  /// Starts a collective and waits for it; any failure becomes a CommunicationError naming the call and the rank.
  template <class Start>
  void run(const char* call, std::size_t n, Start&& start) {
    try {
      start()->wait();  // until done or failed (the group's timeout): the buffers stay valid until then
    } catch (const std::exception& e) {
      throw CommunicationError("matopt::C10dCommunicator: " + std::string(call) + " of " + std::to_string(n) +
                               " elements failed on rank " + std::to_string(rank()) + " of " +
                               std::to_string(size()) + " (c10d " + group_->getBackendName() + "): " + e.what());
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  torch::Device device_;
};

/// A Gloo process group of `size` processes on this machine or over a shared file system: they meet through the
/// file `store_file` (a c10d::FileStore; the file must not be left over from an earlier group) and talk over
/// `hostname`'s interface. `timeout` bounds the rendezvous and every collective. Throws CommunicationError naming
/// the rank when the group cannot be formed.
inline c10::intrusive_ptr<c10d::ProcessGroupGloo> make_gloo_group(const std::string& store_file, int rank, int size,
                                                                  std::chrono::milliseconds timeout = std::chrono::minutes(5),
                                                                  const std::string& hostname = "127.0.0.1") {
  if (size < 1 || rank < 0 || rank >= size)
    detail::fail("matopt::make_gloo_group", "rank ", rank, " is not in a group of size ", size);
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(store_file, size);
    store->setTimeout(timeout);
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  } catch (const std::exception& e) {
    throw CommunicationError("matopt::make_gloo_group: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                             " could not join the group at '" + store_file + "': " + e.what());
  }
}

}  // namespace matopt

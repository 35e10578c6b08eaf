// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Communicator: the collectives of the sharded optimizer behind one interface (SingleProcess, MPI, NCCL backends).
// matopt::Communicator: the collectives the sharded optimizer needs (docs/distributed.md),
// behind one interface with backends chosen at run time: SingleProcess (here), MpiCommunicator (mpi.hpp),
// NcclCommunicator (nccl.cuh), C10dCommunicator (integration/c10d.hpp). A communicator never creates, configures or
// finalizes the underlying process group (C10dCommunicator keeps libtorch's reference-counted group alive).
//
// Every call is collective: all ranks of the group must make it, in the same order, with the same counts.
// Buffers are host pointers for SingleProcess and MPI; NCCL stages host buffers through the device.
//
// Byte counters: each call adds the payload this rank hands to the collective, per call kind:
//   all_reduce n elements -> n;  all_gather -> counts[rank];  reduce_scatter -> sum(counts) (the whole
//   buffer each rank contributes);  broadcast n -> n at the root, 0 elsewhere.
// Wire bytes depend on the backend's algorithm; docs/distributed.md relates the two (ring model).

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "matopt/core/detail/errors.hpp"

namespace matopt {

/// A collective failed: a peer exited, the backend's timeout passed, or the backend refused the call. Thrown by the
/// backends (MPI, c10d) on the rank that saw the failure, naming the call, the rank and the backend's message.
class CommunicationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The element types a collective moves. Byte moves raw bytes (checkpoints).
enum class CommType : std::uint8_t { Float, Double, Byte };

/// The four collectives, indexing CommCounters.
enum class CommKind : std::uint8_t { AllReduce = 0, AllGather = 1, ReduceScatter = 2, Broadcast = 3 };
/// Number of CommKind values (the size of CommCounters' arrays).
inline constexpr std::size_t comm_kinds = 4;

/// "all_reduce", "all_gather", "reduce_scatter" or "broadcast".
inline const char* comm_kind_name(CommKind k) {
  switch (k) {
    case CommKind::AllReduce: return "all_reduce";
    case CommKind::AllGather: return "all_gather";
    case CommKind::ReduceScatter: return "reduce_scatter";
    default: return "broadcast";
  }
}

/// Calls and payload bytes per call kind (see the file comment for what a call counts).
struct CommCounters {
  /// Calls per CommKind.
  std::array<std::uint64_t, comm_kinds> calls{};
  /// Payload bytes this rank handed to the collectives, per CommKind: n for all_reduce, counts[rank] for all_gather,
  /// sum(counts) for reduce_scatter, n at the root (0 elsewhere) for broadcast.
  std::array<std::uint64_t, comm_kinds> bytes{};

  /// Calls of kind k.
  std::uint64_t calls_of(CommKind k) const { return calls[std::size_t(k)]; }
  /// Payload bytes of kind k.
  std::uint64_t bytes_of(CommKind k) const { return bytes[std::size_t(k)]; }
  /// Payload bytes of every kind.
  std::uint64_t total_bytes() const { return std::accumulate(bytes.begin(), bytes.end(), std::uint64_t(0)); }

  /// The counts between two readings, a - b.
  friend CommCounters operator-(const CommCounters& a, const CommCounters& b) {
    CommCounters d;
    for (std::size_t k = 0; k < comm_kinds; ++k) {
      d.calls[k] = a.calls[k] - b.calls[k];
      d.bytes[k] = a.bytes[k] - b.bytes[k];
    }
    return d;
  }
};

namespace detail {
template <class T>
constexpr CommType comm_type_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::byte>,
                "matopt::Communicator: collectives move float, double or std::byte");
  if constexpr (std::is_same_v<T, float>) return CommType::Float;
  else if constexpr (std::is_same_v<T, double>) return CommType::Double;
  else return CommType::Byte;
}
inline std::size_t comm_type_bytes(CommType t) { return t == CommType::Float ? 4 : t == CommType::Double ? 8 : 1; }
}  // namespace detail

/// A group of `size()` processes; this one is `rank()`. Public calls check their arguments and count
/// bytes, then call the backend (the do_* functions).
class Communicator {
 public:
  /// Leaves the underlying process group alone (a communicator never owns it).
  virtual ~Communicator() = default;
  /// This process's rank, in [0, size()).
  virtual int rank() const = 0;
  /// Number of processes in the group.
  virtual int size() const = 0;
  /// The backend's name, for messages and reports ("single-process", "mpi", "nccl", "c10d").
  virtual const char* name() const = 0;

  /// In place: data[i] <- sum over ranks of data[i]. Sum is not associative in floating point: the
  /// backend's reduction order decides the rounding (docs/distributed.md, "Determinism").
  template <class T>
  void all_reduce(T* data, std::size_t n) {
    if (n == 0) return;
    count(CommKind::AllReduce, n * sizeof(T));
    do_all_reduce(data, n, detail::comm_type_of<T>());
  }

  /// recv <- the concatenation over ranks r of counts[r] elements (rank r's `send`). `recv` holds
  /// sum(counts); `send` may point into `recv` at this rank's offset (in-place).
  template <class T>
  void all_gather(const T* send, T* recv, const std::vector<std::size_t>& counts) {
    check_counts("all_gather", counts);
    count(CommKind::AllGather, counts[std::size_t(rank())] * sizeof(T));
    do_all_gather(send, recv, counts, detail::comm_type_of<T>());
  }

  /// recv <- the sum over ranks of this rank's block of `send`: `send` holds sum(counts) elements, block r
  /// (counts[r] elements at offset counts[0] + ... + counts[r-1]) is summed into rank r's `recv`.
  template <class T>
  void reduce_scatter(const T* send, T* recv, const std::vector<std::size_t>& counts) {
    check_counts("reduce_scatter", counts);
    static_assert(!std::is_same_v<T, std::byte>, "matopt::Communicator::reduce_scatter: bytes do not add");
    count(CommKind::ReduceScatter, std::accumulate(counts.begin(), counts.end(), std::size_t(0)) * sizeof(T));
    do_reduce_scatter(send, recv, counts, detail::comm_type_of<T>());
  }

  /// In place: data <- root's data.
  template <class T>
  void broadcast(T* data, std::size_t n, int root) {
    if (root < 0 || root >= size())
      detail::fail("matopt::Communicator::broadcast", "root ", root, " is not a rank of a group of ", size());
    count(CommKind::Broadcast, rank() == root ? n * sizeof(T) : 0);
    if (n != 0) do_broadcast(data, n, root, detail::comm_type_of<T>());
  }

  /// Totals since construction (or the last reset_counters()).
  const CommCounters& counters() const { return counters_; }
  /// Sets every counter to 0.
  void reset_counters() { counters_ = {}; }

 protected:
  /// Backend: in place, data[i] <- the sum over ranks (n > 0 elements of type t).
  virtual void do_all_reduce(void* data, std::size_t n, CommType t) = 0;
  /// Backend: recv <- the concatenation over ranks of their counts[r] elements (see all_gather).
  virtual void do_all_gather(const void* send, void* recv, const std::vector<std::size_t>& counts, CommType t) = 0;
  /// Backend: rank r's recv <- the sum over ranks of block r of send (see reduce_scatter).
  virtual void do_reduce_scatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                                 CommType t) = 0;
  /// Backend: in place, data <- root's data (n > 0 elements).
  virtual void do_broadcast(void* data, std::size_t n, int root, CommType t) = 0;

 private:
  void count(CommKind k, std::size_t bytes) {
    ++counters_.calls[std::size_t(k)];
    counters_.bytes[std::size_t(k)] += bytes;
  }
  void check_counts(const char* what, const std::vector<std::size_t>& counts) const {
    if (counts.size() != std::size_t(size()))
      detail::fail("matopt::Communicator::", what, ": ", counts.size(), " counts for a group of ", size(),
                   " ranks (rank ", rank(), ")");
  }

  CommCounters counters_;
};

/// The group of one process: reductions are identities, gathers copies. The default everywhere.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* name() const override { return "single-process"; }

 protected:
  void do_all_reduce(void*, std::size_t, CommType) override {}
  void do_all_gather(const void* send, void* recv, const std::vector<std::size_t>& counts, CommType t) override {
    copy(send, recv, counts[0] * detail::comm_type_bytes(t));
  }
  void do_reduce_scatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                         CommType t) override {
    copy(send, recv, counts[0] * detail::comm_type_bytes(t));
  }
  void do_broadcast(void*, std::size_t, int, CommType) override {}

 private:
  static void copy(const void* from, void* to, std::size_t bytes) {
    if (bytes != 0 && from != to) std::memmove(to, from, bytes);
  }
};

}  // namespace matopt

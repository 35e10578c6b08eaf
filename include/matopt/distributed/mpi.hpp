// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// MpiCommunicator: matopt::Communicator over an MPI communicator the caller created (link matopt::mpi).
// MpiCommunicator: matopt::Communicator over an MPI communicator the caller created (MPI_COMM_WORLD or a
// sub-communicator). It neither initializes, duplicates nor finalizes MPI: the caller calls MPI_Init before
// and MPI_Finalize after, and keeps `comm` alive while this object is used. Link matopt::mpi.
//
// all_gather is MPI_Allgatherv, reduce_scatter MPI_Reduce_scatter (MPI_SUM), all_reduce MPI_Allreduce with
// MPI_IN_PLACE. Counts above INT_MAX elements are rejected (MPI-3 counts are int).

#include <climits>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

// Only MPI's C API is used: skip the deprecated C++ bindings (their headers do not build warning-free).
#ifndef OMPI_SKIP_MPICXX
/// Skips Open MPI's deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
/// Skips MPICH's deprecated C++ bindings.
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include "matopt/distributed/communicator.hpp"

namespace matopt {

/// Communicator over an MPI communicator the caller created (MPI_COMM_WORLD or a sub-communicator). It neither
/// initializes, duplicates nor finalizes MPI: call MPI_Init before and MPI_Finalize after, and keep `comm` alive while
/// this object is used. Counts above INT_MAX elements are rejected.
class MpiCommunicator final : public Communicator {
 public:
  /// Wraps `comm`; throws std::logic_error if MPI is not initialized.
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
      throw std::logic_error("matopt::MpiCommunicator: MPI is not initialized (call MPI_Init first)");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "mpi"; }
  /// The wrapped MPI communicator.
  MPI_Comm comm() const { return comm_; }

 protected:
  void do_all_reduce(void* data, std::size_t n, CommType t) override {
    check(MPI_Allreduce(MPI_IN_PLACE, data, to_int(n, "all_reduce"), type(t), MPI_SUM, comm_), "MPI_Allreduce");
  }
  void do_all_gather(const void* send, void* recv, const std::vector<std::size_t>& counts, CommType t) override {
    layout(counts, "all_gather");
    const std::size_t offset = std::size_t(displs_[std::size_t(rank_)]) * detail::comm_type_bytes(t);
    const bool in_place = send == static_cast<const char*>(recv) + offset;
    check(MPI_Allgatherv(in_place ? MPI_IN_PLACE : send, counts_[std::size_t(rank_)], type(t), recv,
                         counts_.data(), displs_.data(), type(t), comm_),
          "MPI_Allgatherv");
  }
  void do_reduce_scatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                         CommType t) override {
    layout(counts, "reduce_scatter");
    check(MPI_Reduce_scatter(send, recv, counts_.data(), type(t), MPI_SUM, comm_), "MPI_Reduce_scatter");
  }
  void do_broadcast(void* data, std::size_t n, int root, CommType t) override {
    check(MPI_Bcast(data, to_int(n, "broadcast"), type(t), root, comm_), "MPI_Bcast");
  }

 private:
  static MPI_Datatype type(CommType t) {
    return t == CommType::Float ? MPI_FLOAT : t == CommType::Double ? MPI_DOUBLE : MPI_BYTE;
  }
  int to_int(std::size_t n, const char* what) const {
    if (n > std::size_t(INT_MAX))
      detail::fail("matopt::MpiCommunicator", what, ": ", n, " elements exceed MPI's int count (rank ", rank_, ")");
    return int(n);
  }
  /// int counts and displacements for the v-collectives.
  void layout(const std::vector<std::size_t>& counts, const char* what) {
    counts_.resize(counts.size());
    displs_.resize(counts.size());
    std::size_t offset = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      counts_[r] = to_int(counts[r], what);
      displs_[r] = to_int(offset, what);
      offset += counts[r];
    }
  }
  void check(int status, const char* call) const {
    if (status == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(status, text, &len);
    throw CommunicationError("matopt::MpiCommunicator: " + std::string(call) + " failed on rank " +
                             std::to_string(rank_) + ": " + std::string(text, std::size_t(len)));
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> counts_, displs_;
};

}  // namespace matopt

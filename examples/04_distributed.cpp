// SPDX-License-Identifier: MIT
// Data-parallel training with sharded optimizer state (docs/distributed.md):
//   mpirun -np 2 ./04_distributed        (add --oversubscribe for more ranks than cores)
// A synthetic model of many matrices; each rank computes a local gradient of a least-squares loss on its
// own share of the batch, ShardedOptimizer averages them, steps its shard and all-gathers the rest. Prints,
// per optimizer and mode, the step time and the bytes per step this rank handed to each collective, next to
// ZeRO-1 AdamW's (reduce-scatter Psi + all-gather Psi/p per rank).
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include <matopt/distributed/mpi.hpp>
#include <matopt/distributed/sharded_optimizer.hpp>
#include <matopt/presets.hpp>

using namespace matopt;

namespace {

struct Layer {
  RowMatrix<float> w, target, grad;
};

/// 24 matrices: (out, in) in {256, 384, 512} x {256, 512}, like a small transformer's projections.
std::vector<Layer> make_model() {
  std::vector<Layer> layers;
  std::mt19937 gen(42);  // same on every rank: replicas start equal
  std::normal_distribution<float> n(0.f, 0.02f);
  const int outs[] = {256, 384, 512}, ins[] = {256, 512};
  for (int k = 0; k < 24; ++k) {
    const int m = outs[k % 3], c = ins[(k / 3) % 2];
    Layer l{RowMatrix<float>(m, c), RowMatrix<float>(m, c), RowMatrix<float>(m, c)};
    for (float* x : {l.w.data(), l.target.data()})
      for (Index i = 0; i < m * c; ++i) x[i] = n(gen);
    layers.push_back(std::move(l));
  }
  return layers;
}

/// Loss 0.5 ||W - T - noise_r||^2 on this rank's batch share: G = W - T - noise_r.
void local_gradients(std::vector<Layer>& layers, int rank, int step) {
  std::mt19937 gen(unsigned(1000 * step + rank));
  std::normal_distribution<float> n(0.f, 0.01f);
  for (auto& l : layers) {
    l.grad = l.w - l.target;
    for (Index i = 0; i < l.grad.size(); ++i) l.grad.data()[i] += n(gen);
  }
}

template <class Opt>
void run(const char* label, ShardOptions so, MPI_Comm world) {
  MpiCommunicator comm(world);
  auto layers = make_model();
  std::vector<MatrixView<float>> params;
  std::vector<MatrixView<const float>> grads;
  for (auto& l : layers) {
    params.push_back(view(l.w));
    grads.push_back(view(std::as_const(l.grad)));
  }
  ShardedOptimizer<Opt> opt(comm, params, {}, so);
  constexpr int warmup = 2, steps = 10;
  double seconds = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    local_gradients(layers, comm.rank(), s);
    MPI_Barrier(world);
    const auto t0 = std::chrono::steady_clock::now();
    opt.step(grads);
    MPI_Barrier(world);
    if (s >= warmup) seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double loss = 0;
  for (auto& l : layers) loss += 0.5 * double((l.w - l.target).squaredNorm());
  const CommCounters& t = opt.last_step_traffic();
  const double psi = double(opt.parameter_elements()) * sizeof(float);
  if (comm.rank() == 0)
    std::printf("%-26s %8.2f ms/step  loss %.4e  rank-0 bytes/step: all_reduce %9.0f  reduce_scatter %9.0f  "
                "all_gather %9.0f  (%.3fx ZeRO-1 AdamW)  state %.1f MiB\n",
                label, 1e3 * seconds / steps, loss, double(t.bytes_of(CommKind::AllReduce)),
                double(t.bytes_of(CommKind::ReduceScatter)), double(t.bytes_of(CommKind::AllGather)),
                double(t.bytes_of(CommKind::AllReduce) + t.bytes_of(CommKind::ReduceScatter) +
                       t.bytes_of(CommKind::AllGather)) / (psi + psi / comm.size()),
                double(opt.state_bytes()) / (1 << 20));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == 0) {
    const double psi = 24.0 / 6 * (256 + 384 + 512) * (256 + 512) * 4;
    std::printf("matopt 04_distributed: %d rank(s), 24 matrices, Psi = %.0f bytes of fp32 parameters\n", size, psi);
    std::printf("ZeRO-1 AdamW per rank-step: reduce_scatter Psi + all_gather Psi/p = %.0f bytes\n", psi + psi / size);
  }
  run<Muon<float>>("Muon owner reduce-scatter", {ShardMode::Owner, GradSync::ReduceScatter}, MPI_COMM_WORLD);
  run<Muon<float>>("Muon owner all-reduce", {ShardMode::Owner, GradSync::AllReduce}, MPI_COMM_WORLD);
  run<OrScale<float>>("OrScale owner", {ShardMode::Owner}, MPI_COMM_WORLD);
  run<RMNP<float>>("RMNP owner", {ShardMode::Owner}, MPI_COMM_WORLD);
  run<RMNP<float>>("RMNP row-sharded", {ShardMode::RowSharded}, MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}

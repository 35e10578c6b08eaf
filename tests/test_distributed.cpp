// SPDX-License-Identifier: MIT
// ShardedOptimizer over MPI (run by CTest under mpirun with 1, 2 and 4 ranks, label `mpi`): the sharded
// trajectory equals the single-process one bitwise (see distributed_support.hpp for why bitwise is
// attainable), measured traffic equals the formula of docs/distributed.md, a checkpoint written by p ranks
// is the single-process checkpoint byte for byte and resumes on p/2 (and one written by p/2 on p), and a
// non-finite gradient makes every rank throw.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <matopt/distributed/mpi.hpp>
#include <matopt/distributed/sharded_optimizer.hpp>
#include <matopt/presets.hpp>

#include "distributed_support.hpp"

using namespace matopt;
using matopt::test::Model;

namespace {

std::uint64_t sum_over_ranks(std::uint64_t x, MPI_Comm comm) {
  unsigned long long in = x, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm);
  return out;
}

template <class Opt>
void check_trajectory_and_traffic(ShardOptions so) {
  constexpr int steps = 4;
  MpiCommunicator comm(MPI_COMM_WORLD);
  const auto ref = test::reference_run<Opt>(steps);
  Model<typename Opt::Scalar> m;
  ShardedOptimizer<Opt> s(comm, m.views(), {}, so);
  test::run_steps(s, m, comm, 0, steps);
  CHECK(test::same_bits(m, ref));

  // Per step: Psi elements of gradient into the reduction, this rank's pieces into the all-gather (Psi over
  // all ranks), one double each for the non-finite agreement; nothing else (no preconditioner traffic).
  const std::uint64_t psi = s.parameter_elements() * sizeof(typename Opt::Scalar);
  const CommCounters& t = s.last_step_traffic();
  const CommKind reduce = so.sync == GradSync::ReduceScatter ? CommKind::ReduceScatter : CommKind::AllReduce;
  CHECK(t.bytes_of(reduce) == psi);
  CHECK(t.calls_of(reduce) == 1);
  CHECK(t.calls_of(CommKind::AllGather) == 2);
  CHECK(t.bytes_of(CommKind::Broadcast) == 0);
  CHECK(t.total_bytes() == t.bytes_of(reduce) + t.bytes_of(CommKind::AllGather));
  CHECK(sum_over_ranks(t.bytes_of(CommKind::AllGather), MPI_COMM_WORLD) == psi + comm.size() * sizeof(double));
  std::uint64_t mine = 0;
  for (std::size_t i : s.local_parameters()) mine += std::uint64_t(m.specs[i].rows * m.specs[i].cols);
  if (so.mode == ShardMode::Owner) CHECK(t.bytes_of(CommKind::AllGather) == mine * sizeof(typename Opt::Scalar) + 8);
  // ZeRO-1: the state is split, not replicated.
  CHECK(sum_over_ranks(s.state_bytes(), MPI_COMM_WORLD) >= psi);
}

/// A file name every rank agrees on (rank 0's pid), unique to this run and world size.
std::string shared_path(const char* tag, const MpiCommunicator& world) {
  long pid = long(::getpid());
  MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  return "matopt_mpi_" + std::string(tag) + "_" + std::to_string(pid) + "_" + std::to_string(world.size()) + ".ckpt";
}

/// Rank 0 of the world (the writer): the file at `path` must be, byte for byte, the checkpoint a single process
/// writes of its states after the same steps (matopt::save_checkpoint of the plain optimizer). Every owner's
/// state, second moments and Dion's Q included, must have reached the file.
template <class Opt>
void check_file_is_single_process_checkpoint(const std::string& path, int steps) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  std::vector<typename Opt::State> states;
  test::reference_run<Opt>(steps, {}, &states);
  std::ostringstream want;
  matopt::save_checkpoint(want, Opt{}, states);
  std::ifstream is(path, std::ios::binary);
  const std::string got((std::istreambuf_iterator<char>(is)), std::istreambuf_iterator<char>());
  CHECK(got.size() == want.str().size());
  CHECK((got == want.str()));  // (the bytes are not printed)
}

/// K1 steps on every rank of the world, save; then each half of the world loads the file and takes K2
/// more steps; both halves must land on the uninterrupted single-process trajectory.
template <class Opt>
void check_resume_at_half_size(ShardOptions save_mode, ShardOptions load_mode) {
  constexpr int k1 = 3, k2 = 3;
  MpiCommunicator world(MPI_COMM_WORLD);
  const std::string path = shared_path("half", world);
  const auto ref = test::reference_run<Opt>(k1 + k2);

  Model<typename Opt::Scalar> m;
  {
    ShardedOptimizer<Opt> s(world, m.views(), {}, save_mode);
    test::run_steps(s, m, world, 0, k1);
    s.save_checkpoint(path);
  }
  check_file_is_single_process_checkpoint<Opt>(path, k1);
  const int half = std::max(1, world.size() / 2);
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, world.rank() / half, world.rank(), &sub);
  {
    MpiCommunicator comm(sub);
    CHECK(comm.size() == half);
    ShardedOptimizer<Opt> s(comm, m.views(), {}, load_mode);
    s.load_checkpoint(path);
    test::run_steps(s, m, comm, k1, k1 + k2);
    CHECK(test::same_bits(m, ref));
  }
  MPI_Comm_free(&sub);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world.rank() == 0) std::remove(path.c_str());
}

/// The other way: the first half of the world (max(1, p/2) ranks) takes K1 steps and saves; the parameters reach
/// the other ranks by a broadcast (a model checkpoint's job); all p ranks load the file, where the plan gives
/// the states other owners than the ones that saved them, and take K2 more steps: the uninterrupted
/// single-process trajectory, bitwise.
template <class Opt>
void check_resume_at_double_size(ShardOptions save_mode, ShardOptions load_mode) {
  constexpr int k1 = 3, k2 = 3;
  MpiCommunicator world(MPI_COMM_WORLD);
  const std::string path = shared_path("double", world);
  const auto ref = test::reference_run<Opt>(k1 + k2);

  Model<typename Opt::Scalar> m;
  const int half = std::max(1, world.size() / 2);
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, world.rank() < half ? 0 : MPI_UNDEFINED, world.rank(), &sub);
  if (sub != MPI_COMM_NULL) {
    {
      MpiCommunicator comm(sub);
      ShardedOptimizer<Opt> s(comm, m.views(), {}, save_mode);
      test::run_steps(s, m, comm, 0, k1);
      s.save_checkpoint(path);  // by world rank 0, which is the sub-communicator's rank 0
    }
    MPI_Comm_free(&sub);
  }
  check_file_is_single_process_checkpoint<Opt>(path, k1);
  for (auto& d : m.data) MPI_Bcast(d.data(), int(d.size() * sizeof(d[0])), MPI_BYTE, 0, MPI_COMM_WORLD);
  {
    ShardedOptimizer<Opt> s(world, m.views(), {}, load_mode);
    s.load_checkpoint(path);
    test::run_steps(s, m, world, k1, k1 + k2);
    CHECK(test::same_bits(m, ref));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world.rank() == 0) std::remove(path.c_str());
}

}  // namespace

TEST_CASE("MPI: Muon owner-sharded equals single-process bitwise, traffic is 2 Psi + 8 B per rank-step") {
  check_trajectory_and_traffic<Muon<float>>({ShardMode::Owner, GradSync::ReduceScatter});
  check_trajectory_and_traffic<Muon<float>>({ShardMode::Owner, GradSync::AllReduce});
}

TEST_CASE("MPI: RMNP owner-sharded and row-sharded equal single-process bitwise") {
  check_trajectory_and_traffic<RMNP<float>>({ShardMode::Owner, GradSync::ReduceScatter});
  check_trajectory_and_traffic<RMNP<float>>({ShardMode::RowSharded, GradSync::ReduceScatter});
  check_trajectory_and_traffic<RMNP<float>>({ShardMode::RowSharded, GradSync::AllReduce});
}

TEST_CASE("MPI: ColNorm column-sharded (slices of whole columns, the whole matrix's scale) equals single-process "
          "bitwise") {
  check_trajectory_and_traffic<ColNorm<float>>({ShardMode::RowSharded, GradSync::ReduceScatter});
  check_trajectory_and_traffic<ColNorm<float>>({ShardMode::RowSharded, GradSync::AllReduce});
}

TEST_CASE("MPI: OrScale owner-sharded (trust ratio computed by the owner) equals single-process bitwise") {
  check_trajectory_and_traffic<OrScale<float>>({ShardMode::Owner, GradSync::ReduceScatter});
}

TEST_CASE("MPI: NorMuon, AdaMuon and Dion owner-sharded (states kept by the owner) equal single-process bitwise") {
  check_trajectory_and_traffic<NorMuon<float>>({ShardMode::Owner, GradSync::ReduceScatter});
  check_trajectory_and_traffic<AdaMuon<float>>({ShardMode::Owner, GradSync::AllReduce});
  check_trajectory_and_traffic<Dion<float>>({ShardMode::Owner, GradSync::ReduceScatter});
}

TEST_CASE("MPI: a checkpoint written by p ranks resumes on p/2 ranks on the same trajectory") {
  check_resume_at_half_size<Muon<float>>({ShardMode::Owner}, {ShardMode::Owner});
  check_resume_at_half_size<OrScale<float>>({ShardMode::Owner}, {ShardMode::Owner});
  check_resume_at_half_size<RMNP<float>>({ShardMode::RowSharded}, {ShardMode::Owner});
  check_resume_at_half_size<RMNP<float>>({ShardMode::Owner}, {ShardMode::RowSharded});
}

TEST_CASE("MPI: NorMuon, AdaMuon and Dion checkpoints (S and Q saved by their owner ranks) resume at p/2 and at p "
          "ranks on the same trajectory") {
  // Owner mode only: their preconditioners are not row-local (NorMuon's S is per row of the orthogonalized
  // update, AdaMuon's elementwise, Dion's Q a whole-matrix power-iteration basis).
  check_resume_at_half_size<NorMuon<float>>({ShardMode::Owner}, {ShardMode::Owner});
  check_resume_at_half_size<AdaMuon<float>>({ShardMode::Owner, GradSync::AllReduce}, {ShardMode::Owner});
  check_resume_at_half_size<Dion<float>>({ShardMode::Owner}, {ShardMode::Owner, GradSync::AllReduce});
  check_resume_at_double_size<NorMuon<float>>({ShardMode::Owner}, {ShardMode::Owner});
  check_resume_at_double_size<AdaMuon<float>>({ShardMode::Owner}, {ShardMode::Owner, GradSync::AllReduce});
  check_resume_at_double_size<Dion<float>>({ShardMode::Owner, GradSync::AllReduce}, {ShardMode::Owner});
}

TEST_CASE("MPI: a non-finite gradient on one rank makes every rank throw, nothing written") {
  for (ShardMode mode : {ShardMode::Owner, ShardMode::RowSharded}) {
    MpiCommunicator comm(MPI_COMM_WORLD);
    Model<float> m;
    const Model<float> before = m;
    ShardedOptimizer<RMNP<float>> s(comm, m.views(), {}, {mode});
    auto g = test::local_grads(m, 0, comm.rank(), comm.size());
    if (comm.rank() == comm.size() - 1) g[3][7] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH_AS(s.step(test::grad_views(m, g)),
                         doctest::Contains("reduced gradient of parameter 3 (17x33, held by rank"),
                         std::invalid_argument);
    CHECK(test::same_bits(m, before));
  }
}

TEST_CASE("MPI: a check that only a parameter's owner could make refuses the step on every rank, nothing written") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  Model<float> m;
  const Model<float> before = m;
  const auto g = test::local_grads(m, 0, comm.rank(), comm.size());
  // Options that do not fit a shape: every rank checks every parameter before any communication.
  RMNP<float>::Options decay;
  decay.lr = 1e20f;
  decay.weight_decay = 1e20f;  // 1 - lr weight_decay overflows float
  ShardedOptimizer<RMNP<float>> rows(comm, m.views(), decay, {ShardMode::RowSharded});
  CHECK_THROWS_WITH_AS(rows.step(test::grad_views(m, g)), doctest::Contains("weight-decay factor"),
                       std::invalid_argument);
  for (const auto& st : rows.states()) CHECK((st.steps == 0 && st.momentum.isZero()));
  Muon<float>::Options heads;
  heads.precondition.heads = 3;  // divides 48, 33, 96 and 3, not 64
  ShardedOptimizer<Muon<float>> owner(comm, m.views(), heads);
  CHECK_THROWS_WITH_AS(owner.step(test::grad_views(m, g)),
                       doctest::Contains("heads = 3 does not divide the rows of W (64x48)"), std::invalid_argument);
  CHECK(test::same_bits(m, before));
  // A state only its owner holds: Dion's rank is fixed at make_state. Rank fraction 0.9 changes it for the 10 x 10
  // parameter only (1 x 8: rank 1 either way), so one rank refuses, and every rank throws with it.
  std::vector<std::vector<float>> data{std::vector<float>(100, 0.5f)};
  for (int i = 0; i < 3; ++i) data.emplace_back(8, 0.25f);
  const auto data_before = data;
  std::vector<MatrixView<float>> params{{data[0].data(), 10, 10, Layout::RowMajor}};
  for (int i = 1; i < 4; ++i) params.push_back({data[std::size_t(i)].data(), 1, 8, Layout::RowMajor});
  std::vector<std::vector<float>> grads;
  std::vector<MatrixView<const float>> gv;
  for (const auto& d : data) grads.emplace_back(d.size(), 0.125f);
  for (std::size_t i = 0; i < data.size(); ++i)
    gv.push_back({grads[i].data(), params[i].rows, params[i].cols, Layout::RowMajor});
  ShardedOptimizer<Dion<float>> dion(comm, params);
  dion.options().precondition.rank_fraction = 0.9;
  const bool owns_it = dion.plan().owner[0] == comm.rank();
  CHECK_THROWS_WITH_AS(dion.step(gv), doctest::Contains("parameter 0 (10x10, held by rank"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(dion.step(gv),
                       doctest::Contains(owns_it ? "state was made with Dion rank 10" : "does not fit the options"),
                       std::invalid_argument);
  CHECK(data == data_before);
  for (const auto& st : dion.states()) CHECK(st.steps == 0);
  dion.options().precondition.rank_fraction = 1.0;
  dion.step(gv);
  CHECK(data != data_before);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  doctest::Context context(argc, argv);
  if (rank != 0) context.setOption("minimal", true);  // rank 0 reports in full, the others only failures
  const int failed = context.run();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}

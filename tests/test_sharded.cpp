// SPDX-License-Identifier: MIT
// ShardedOptimizer and the Communicator interface in one process (no MPI): the planner, SingleProcess's
// semantics and byte counters, equality with the plain optimizer, errors, checkpoints.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <matopt/distributed/communicator.hpp>
#include <matopt/distributed/sharded_optimizer.hpp>
#include <matopt/facade/any_optimizer.hpp>
#include <matopt/presets.hpp>

#include "distributed_support.hpp"

using namespace matopt;
using matopt::test::Model;

TEST_CASE("shard plan: greedy largest-first onto the least-loaded rank, ties by index and rank") {
  const ShardPlan p = ShardPlan::greedy({5, 9, 1, 9, 3}, 2);
  CHECK(p.owner == std::vector<int>{0, 0, 1, 1, 1});
  CHECK(p.load == std::vector<double>{14, 13});
  CHECK(p.imbalance() == doctest::Approx(28.0 / 27.0));
  CHECK(ShardPlan::greedy({1, 1, 1}, 4).owner == std::vector<int>{0, 1, 2});
  CHECK(preconditioner_cost<Muon<float>::PreconditionerType>(64, 48) == 64.0 * 48 * 48);
  CHECK(preconditioner_cost<OrScale<float>::PreconditionerType>(10, 300) == 10.0 * 300 * 10);
  CHECK(preconditioner_cost<RowNormalize>(64, 48) == 64.0 * 48);
  CHECK(preconditioner_cost<NorMuon<float>::PreconditionerType>(64, 48) == 64.0 * 48 * 48);
  CHECK(preconditioner_cost<PolarGrad<float>::PreconditionerType>(10, 300) == 10.0 * 300 * 10);
  CHECK(preconditioner_cost<Dion<float>::PreconditionerType>(64, 48) == 64.0 * 48 * 48);
  CHECK(preconditioner_cost<SecondMoment<RowNormalize, moments::AdaMuon>>(64, 48) == 64.0 * 48);
  CHECK_THROWS_WITH_AS(ShardPlan::greedy({1}, 0), doctest::Contains("at least one rank"), std::invalid_argument);
}

namespace {
/// The planner's cost class of each preset, named one by one: Newton–Schulz / exact polar orthogonalization (and
/// AutoSteps' planned Newton–Schulz), Dion's rank-r power iteration (m n r, r <= min(m, n)) and the second moments
/// and nuclear scaling wrapped around them cost m n min(m, n); row / column normalization (RMNP, ColNorm) m n.
enum class CostClass { Cubic, Linear };
const std::map<std::string, CostClass>& expected_cost_classes() {
  static const std::map<std::string, CostClass> table{
      {"Muon", CostClass::Cubic},      {"MuonAutoSteps", CostClass::Cubic}, {"MoonlightMuon", CostClass::Cubic},
      {"RMNP", CostClass::Linear},     {"ColNorm", CostClass::Linear},      {"OrScale", CostClass::Cubic},
      {"RMNPReference", CostClass::Linear},
      {"NorMuon", CostClass::Cubic},   {"AdaMuon", CostClass::Cubic},       {"NAMO", CostClass::Cubic},
      {"PolarGrad", CostClass::Cubic}, {"TurboMuon", CostClass::Cubic},     {"Dion", CostClass::Cubic}};
  return table;
}
template <class OptF, class OptD>
void check_preset_cost(const std::string& preset, std::set<std::string>& seen) {
  CAPTURE(preset);
  seen.insert(preset);
  const auto it = expected_cost_classes().find(preset);
  CHECK_MESSAGE(it != expected_cost_classes().end(), "preset " << preset << " has no expected cost class here");
  if (it == expected_cost_classes().end()) return;
  // Tall and wide, so that min(m, n) is the other side each time and never 1.
  for (const auto& shape : std::vector<std::pair<Index, Index>>{{64, 48}, {10, 300}}) {
    const Index m = shape.first, n = shape.second;
    CAPTURE(m);
    CAPTURE(n);
    const double mn = double(m) * double(n);
    const double expected = it->second == CostClass::Cubic ? mn * double(std::min(m, n)) : mn;
    CHECK(preconditioner_cost<typename OptF::PreconditionerType>(m, n) == expected);
    CHECK(preconditioner_cost<typename OptD::PreconditionerType>(m, n) == expected);
  }
}
}  // namespace

TEST_CASE("shard plan: every preset's preconditioner declares its cost, cubic for orthogonalization") {
  // Iterates the preset list itself (MATOPT_MATRIX_PRESETS), so a preset added there without an entry in the
  // table above, or whose preconditioner the planner does not know, fails here.
  std::set<std::string> seen;
#define MATOPT_TEST_PRESET_COST(Preset, ...) check_preset_cost<Preset<float>, Preset<double>>(#Preset, seen);
  MATOPT_MATRIX_PRESETS(MATOPT_TEST_PRESET_COST)
#undef MATOPT_TEST_PRESET_COST
  CHECK(seen.size() == expected_cost_classes().size());  // and the table names no preset the list lacks
  // The facade's cost (what TorchOptimizer's data-parallel plan balances) is its preset's preconditioner_cost; m n
  // for AdamW and Lion. (By name: the presets come compiled from the runtime, not instantiated in this file.)
  CHECK(make_optimizer<float>("muon").cost(64, 48) == 64.0 * 48 * 48);
  CHECK(make_optimizer<double>("normuon").cost(10, 300) == 10.0 * 300 * 10);
  CHECK(make_optimizer<float>("dion").cost(10, 300) == 10.0 * 300 * 10);
  CHECK(make_optimizer<float>("rmnp").cost(64, 48) == 64.0 * 48);
  CHECK(make_optimizer<double>("colnorm").cost(10, 300) == 10.0 * 300);
  CHECK(make_optimizer<float>("adamw").cost(64, 48) == 64.0 * 48);
  CHECK(make_optimizer<double>("lion").cost(10, 300) == 10.0 * 300);
  // The owner plan of ShardedOptimizer<MuonAutoSteps> balances that cost: one rank holds the sum of m n min(m, n).
  SingleProcess comm;
  Model<float> model;
  ShardedOptimizer<MuonAutoSteps<float>> sharded(comm, model.views());
  double total = 0;
  for (const auto& p : model.specs) total += double(p.rows) * double(p.cols) * double(std::min(p.rows, p.cols));
  CHECK(sharded.plan().load == std::vector<double>{total});
}

TEST_CASE("SingleProcess: identities and copies, counters record payload bytes per call kind") {
  SingleProcess c;
  std::vector<float> a{1, 2, 3};
  c.all_reduce(a.data(), a.size());
  CHECK(a == std::vector<float>{1, 2, 3});
  std::vector<double> d{4, 5}, out(2);
  c.all_gather(d.data(), out.data(), {2});
  CHECK(out == d);
  c.reduce_scatter(a.data(), a.data(), {3});
  c.broadcast(d.data(), 2, 0);
  const CommCounters& k = c.counters();
  CHECK(k.bytes_of(CommKind::AllReduce) == 12);
  CHECK(k.bytes_of(CommKind::AllGather) == 16);
  CHECK(k.bytes_of(CommKind::ReduceScatter) == 12);
  CHECK(k.bytes_of(CommKind::Broadcast) == 16);
  CHECK(k.total_bytes() == 56);
  CHECK(k.calls_of(CommKind::AllGather) == 1);
  CHECK_THROWS_WITH_AS(c.all_gather(d.data(), out.data(), {1, 1}), doctest::Contains("2 counts for a group of 1"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(c.broadcast(d.data(), 2, 1), doctest::Contains("root 1"), std::invalid_argument);
}

TEST_CASE_TEMPLATE("SingleProcess sharding equals the plain optimizer bitwise", Opt, Muon<float>, RMNP<float>,
                   OrScale<float>, ColNorm<double>) {
  constexpr int steps = 4;
  const auto ref = test::reference_run<Opt>(steps);
  std::vector<ShardOptions> modes{{ShardMode::Owner, GradSync::ReduceScatter, GradReduction::Average},
                                  {ShardMode::Owner, GradSync::AllReduce, GradReduction::Sum}};
  if (ShardedOptimizer<Opt>::row_shardable) modes.push_back({ShardMode::RowSharded, GradSync::ReduceScatter});
  for (const ShardOptions& so : modes) {
    SingleProcess comm;
    Model<typename Opt::Scalar> m;
    ShardedOptimizer<Opt> s(comm, m.views(), {}, so);
    test::run_steps(s, m, comm, 0, steps);
    CHECK(test::same_bits(m, ref));
    // Psi elements of gradient in, Psi of parameters out, one double for the non-finite agreement.
    const auto psi_bytes = s.parameter_elements() * sizeof(typename Opt::Scalar);
    const CommCounters& t = s.last_step_traffic();
    CHECK(t.bytes_of(so.sync == GradSync::ReduceScatter ? CommKind::ReduceScatter : CommKind::AllReduce) ==
          psi_bytes);
    CHECK(t.bytes_of(CommKind::AllGather) == psi_bytes + sizeof(double));
    CHECK(t.total_bytes() == 2 * psi_bytes + sizeof(double));
  }
}

TEST_CASE("ShardedOptimizer errors name the parameter, shape and rank, nothing changes") {
  SingleProcess comm;
  Model<float> m;
  ShardedOptimizer<Muon<float>> s(comm, m.views());
  auto g = test::local_grads(m, 0, 0, 1);
  auto gv = test::grad_views(m, g);
  const Model<float> before = m;
  gv[2].rows = 5;
  CHECK_THROWS_WITH_AS(s.step(gv), doctest::Contains("parameter 2: G is 5x17 but W is 33x17 (rank 0)"),
                       std::invalid_argument);
  gv.pop_back();
  CHECK_THROWS_WITH_AS(s.step(gv), doctest::Contains("got 7 gradients for 8 parameters"), std::invalid_argument);
  gv = test::grad_views(m, g);
  g[5][3] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH_AS(s.step(gv), doctest::Contains("parameter 5 (5x70, held by rank 0) contains a non-finite"),
                       std::invalid_argument);
  CHECK(test::same_bits(m, before));
  CHECK(s.states()[0].steps == 0);
  CHECK_THROWS_WITH_AS((ShardedOptimizer<Muon<float>>(comm, m.views(), {}, {ShardMode::RowSharded})),
                       doctest::Contains("RowSharded needs a RowNormalize or ColNormalize"), std::invalid_argument);
  RMNP<float>::Options skip;
  skip.non_finite = NonFinite::Skip;
  CHECK_THROWS_WITH_AS((ShardedOptimizer<RMNP<float>>(comm, m.views(), skip, {ShardMode::RowSharded})),
                       doctest::Contains("non_finite = throw"), std::invalid_argument);
}

TEST_CASE("ShardedOptimizer checkpoints are plain matopt checkpoints, resumable in either mode") {
  const std::string path = "matopt_sharded_single.ckpt";
  const auto ref = test::reference_run<RMNP<float>>(6);
  SingleProcess comm;
  Model<float> m;
  ShardedOptimizer<RMNP<float>> s(comm, m.views(), {}, {ShardMode::RowSharded});
  test::run_steps(s, m, comm, 0, 3);
  s.save_checkpoint(path);
  // A plain optimizer reads it.
  RMNP<float> plain;
  std::vector<RMNP<float>::State> states;
  for (auto v : m.views()) states.push_back(detail::with_map(v, [&](const auto& w) { return plain.make_state(w); }));
  matopt::load_checkpoint(path, plain, states);
  CHECK(states[1].steps == 3);
  CHECK(states[1].momentum.norm() > 0);
  // Owner mode resumes from the row-sharded file to the uninterrupted trajectory.
  Model<float> resumed = m;
  ShardedOptimizer<RMNP<float>> t(comm, resumed.views());
  t.load_checkpoint(path);
  test::run_steps(t, resumed, comm, 3, 6);
  CHECK(test::same_bits(resumed, ref));
  CHECK_THROWS_AS(ShardedOptimizer<Muon<float>>(comm, resumed.views()).load_checkpoint(path), CheckpointError);
  CHECK_THROWS_AS(t.load_checkpoint("no/such/file.ckpt"), CheckpointError);
  std::remove(path.c_str());
}

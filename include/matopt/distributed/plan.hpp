// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The cost model of a step and the owner plan of the distributed optimizers (ShardedOptimizer, TorchOptimizer).
// preconditioner_cost<P>(m, n): the planner's cost of preconditioning an m x n matrix, m n min(m, n) for the
// orthogonalizations (the Newton–Schulz products, Dion's power iteration) and m n for the normalizations and
// elementwise maps (docs/distributed.md). ShardPlan::greedy: each parameter's owner rank by that cost.

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

#include "matopt/core/errors.hpp"
#include "matopt/core/view.hpp"

namespace matopt {

template <class Method>
struct Orthogonalize;
template <class Method>
struct AutoSteps;
struct ExactPolar;
template <class Cheap, class Exact>
struct Adaptive;
template <class Inner, class Moment>
struct SecondMoment;
template <class Inner>
struct NuclearScaled;
struct DionPowerIteration;

namespace detail {
template <class P>
inline constexpr bool cubic_preconditioner_v = false;
template <class M>
inline constexpr bool cubic_preconditioner_v<Orthogonalize<M>> = true;
template <class M>
inline constexpr bool cubic_preconditioner_v<AutoSteps<M>> = true;  // Orthogonalize<M> with K planned steps
template <>
inline constexpr bool cubic_preconditioner_v<ExactPolar> = true;
template <class C, class E>
inline constexpr bool cubic_preconditioner_v<Adaptive<C, E>> = true;  // its exact branch bounds the cost
template <class I, class M>
inline constexpr bool cubic_preconditioner_v<SecondMoment<I, M>> = cubic_preconditioner_v<I>;  // NorMuon, AdaMuon, NAMO
template <class I>
inline constexpr bool cubic_preconditioner_v<NuclearScaled<I>> = cubic_preconditioner_v<I>;  // PolarGrad
template <>
inline constexpr bool cubic_preconditioner_v<DionPowerIteration> = true;  // m n r, r <= min(m, n)
}  // namespace detail

/// The planner's cost of preconditioning an m x n matrix: m n min(m, n) for orthogonalization (the
/// Newton–Schulz products), m n for normalizations and elementwise maps.
template <class Preconditioner>
double preconditioner_cost(Index m, Index n) {
  const double mn = double(m) * double(n);
  return detail::cubic_preconditioner_v<Preconditioner> ? mn * double(std::min(m, n)) : mn;
}

/// Owner of each parameter. Greedy longest-processing-time: parameters by cost, largest first (ties: lower
/// index first), each to the least-loaded rank (ties: lower rank). Deterministic, so every rank computes
/// the same plan; the makespan is within 4/3 of optimal (Graham 1969).
struct ShardPlan {
  std::vector<int> owner;   ///< per parameter
  std::vector<double> load; ///< per rank: sum of its parameters' costs

  /// The greedy plan of `costs` (one per parameter) over `ranks` ranks (>= 1; throws std::invalid_argument otherwise).
  static ShardPlan greedy(const std::vector<double>& costs, int ranks) {
    if (ranks < 1) detail::fail("matopt::ShardPlan", "needs at least one rank (got ", ranks, ")");
    ShardPlan p;
    p.owner.assign(costs.size(), 0);
    p.load.assign(std::size_t(ranks), 0.0);
    std::vector<std::size_t> order(costs.size());
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return costs[a] > costs[b]; });
    for (std::size_t i : order) {
      const auto r = std::size_t(std::min_element(p.load.begin(), p.load.end()) - p.load.begin());
      p.owner[i] = int(r);
      p.load[r] += costs[i];
    }
    return p;
  }
  /// max load / mean load (1 = perfect balance).
  double imbalance() const {
    const double total = std::accumulate(load.begin(), load.end(), 0.0);
    return total == 0 ? 1.0 : *std::max_element(load.begin(), load.end()) * double(load.size()) / total;
  }
};

}  // namespace matopt

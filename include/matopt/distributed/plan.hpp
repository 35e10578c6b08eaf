// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The cost model of a step and the owner plan of the distributed optimizers (ShardedOptimizer, TorchOptimizer).
// preconditioner_cost<P>(m, n): the planner's cost of preconditioning an m x n matrix, which each preconditioner
// declares (P::cost): m n min(m, n) for the orthogonalizations (the Newton–Schulz products, Dion's power iteration),
// m n for the normalizations and elementwise maps (docs/distributed.md). ShardPlan::greedy: each parameter's owner
// rank by that cost.

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <type_traits>
#include <vector>

#include "matopt/core/detail/errors.hpp"
#include "matopt/core/view.hpp"

namespace matopt {

/// The planner's cost models, which a preconditioner's `static double cost(Index m, Index n)` returns: m n for one
/// pass over the entries (normalizations, elementwise maps) ...
inline double elementwise_cost(Index m, Index n) { return double(m) * double(n); }
/// ... and m n min(m, n) for an orthogonalization (the Newton–Schulz or polar products, Dion's power iteration).
inline double orthogonalize_cost(Index m, Index n) { return double(m) * double(n) * double(std::min(m, n)); }

namespace detail {
template <class P, class = void>
inline constexpr bool has_cost_v = false;
template <class P>
inline constexpr bool has_cost_v<P, std::void_t<decltype(double(P::cost(Index(), Index())))>> = true;
}  // namespace detail

/// The planner's cost of preconditioning an m x n matrix: the preconditioner's own `cost(m, n)` (m n min(m, n)
/// for orthogonalization, m n for normalizations and elementwise maps).
template <class Preconditioner>
double preconditioner_cost(Index m, Index n) {
  static_assert(detail::has_cost_v<Preconditioner>,
                "matopt: a preconditioner declares its cost for the distributed planner: add "
                "`static double cost(Index m, Index n)` returning matopt::elementwise_cost(m, n) (one pass over the "
                "entries) or matopt::orthogonalize_cost(m, n) (m n min(m, n) products) (docs/extending.md)");
  return Preconditioner::cost(m, n);
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

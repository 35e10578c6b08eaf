// SPDX-License-Identifier: MIT
#pragma once
// Helpers of the distributed tests (test_sharded.cpp without MPI, test_distributed.cpp under mpirun): a
// model of matrices of mixed shapes and layouts, per-rank local gradients whose mean is world-size
// independent and exact, and the single-process reference trajectory.
//
// Determinism: an all-reduce sums in an order the backend chooses, so float sums differ across world
// sizes in general. The local gradients here are G + D_r with G and D_r multiples of 2^-10 below 1 in
// magnitude and sum_r D_r = 0: every partial sum is exact in float, so any reduction order gives exactly
// p G, and (p G) / p = G exactly. The distributed result must then equal the reference bitwise.

#include <cstdint>
#include <cstring>
#include <vector>

#include <doctest/doctest.h>

#include <matopt/distributed/sharded_optimizer.hpp>

namespace matopt::test {

struct ParamSpec {
  Index rows, cols;
  Layout layout;
};

/// Mixed shapes, both layouts, tall, wide, square, and one with fewer rows than ranks (empty slices).
inline std::vector<ParamSpec> model_shapes() {
  return {{64, 48, Layout::RowMajor}, {48, 64, Layout::ColMajor}, {33, 17, Layout::RowMajor},
          {17, 33, Layout::ColMajor}, {96, 8, Layout::RowMajor},  {5, 70, Layout::ColMajor},
          {3, 3, Layout::RowMajor},   {40, 40, Layout::ColMajor}};
}

inline std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
/// A multiple of 2^-10 in [-1, 1], from a hash.
template <class T>
T dyadic(std::uint64_t h) {
  return T(int(h % 2049) - 1024) / T(1024);
}

template <class T>
struct Model {
  std::vector<ParamSpec> specs = model_shapes();
  std::vector<std::vector<T>> data;

  Model() {
    for (std::size_t i = 0; i < specs.size(); ++i) {
      data.emplace_back(std::size_t(specs[i].rows * specs[i].cols));
      for (std::size_t k = 0; k < data[i].size(); ++k) data[i][k] = dyadic<T>(mix(1000 * i + k)) / T(8);
    }
  }
  std::vector<MatrixView<T>> views() {
    std::vector<MatrixView<T>> v;
    for (std::size_t i = 0; i < specs.size(); ++i)
      v.push_back({data[i].data(), specs[i].rows, specs[i].cols, specs[i].layout});
    return v;
  }
};

/// Rank r's local gradients at step k in a world of p ranks: G_k + D_r, sum_r D_r = 0 (D = +-E in pairs,
/// 0 for the last rank of an odd world).
template <class T>
std::vector<std::vector<T>> local_grads(const Model<T>& m, int step, int rank, int ranks) {
  std::vector<std::vector<T>> g;
  const int sign = (ranks % 2 == 1 && rank == ranks - 1) ? 0 : (rank % 2 == 0 ? 1 : -1);
  for (std::size_t i = 0; i < m.specs.size(); ++i) {
    g.emplace_back(m.data[i].size());
    for (std::size_t k = 0; k < g[i].size(); ++k) {
      const std::uint64_t key = (std::uint64_t(step) * 7919 + i) * 1000003 + k;
      g[i][k] = dyadic<T>(mix(key)) + T(sign) * dyadic<T>(mix(key ^ 0x5555));
    }
  }
  return g;
}
template <class T>
std::vector<MatrixView<const T>> grad_views(const Model<T>& m, const std::vector<std::vector<T>>& g) {
  std::vector<MatrixView<const T>> v;
  for (std::size_t i = 0; i < g.size(); ++i) v.push_back({g[i].data(), m.specs[i].rows, m.specs[i].cols, m.specs[i].layout});
  return v;
}

/// The single-process reference: plain Opt, each parameter stepped alone with the mean gradient G_k. The
/// final states go to `states_out` when given (to compare a sharded checkpoint with).
template <class Opt>
Model<typename Opt::Scalar> reference_run(int steps, const typename Opt::Options& o = {},
                                          std::vector<typename Opt::State>* states_out = nullptr) {
  using T = typename Opt::Scalar;
  Model<T> m;
  Opt opt(o);
  std::vector<typename Opt::State> states;
  auto w = m.views();
  for (auto& v : w) states.push_back(detail::with_map(v, [&](const auto& x) { return opt.make_state(x); }));
  for (int k = 0; k < steps; ++k) {
    const auto g = local_grads(m, k, 0, 1);
    const auto gv = grad_views(m, g);
    for (std::size_t i = 0; i < w.size(); ++i)
      detail::with_map(w[i], [&](auto& wm) {
        detail::with_map(gv[i], [&](const auto& gm) { opt.step(wm, gm, states[i]); });
      });
  }
  if (states_out) *states_out = std::move(states);
  return m;
}

/// Steps k in [from, to) of a sharded run: this rank's local gradients, one collective step each.
template <class Opt>
void run_steps(ShardedOptimizer<Opt>& s, Model<typename Opt::Scalar>& m, const Communicator& comm, int from, int to) {
  for (int k = from; k < to; ++k) {
    const auto g = local_grads(m, k, comm.rank(), comm.size());
    s.step(grad_views(m, g));
  }
}

/// Bitwise equality of two models' parameters.
template <class T>
bool same_bits(const Model<T>& a, const Model<T>& b) {
  for (std::size_t i = 0; i < a.data.size(); ++i)
    if (a.data[i].size() != b.data[i].size() ||
        std::memcmp(a.data[i].data(), b.data[i].data(), a.data[i].size() * sizeof(T)) != 0)
      return false;
  return true;
}

}  // namespace matopt::test

// SPDX-License-Identifier: MIT
#pragma once
// The Thrust backend of the shared device cases (tests/device_cases.hpp, tests/device_step_cases.hpp): one
// definition for the translation units of the Thrust suite.

#include <utility>
#include <vector>

#include <matopt/backend/thrust.hpp>
#include <matopt/matopt.hpp>

namespace matopt::test {
struct Backend {
  using Engine = ThrustEngine;
  template <class Opt>
  static DeviceOptimizer<Opt, Engine> optimizer(const typename Opt::Options& o) {
    return DeviceOptimizer<Opt, Engine>(o);
  }
  template <class Dev>
  static void before_step(Dev&) {}
  /// The odd shapes: 1 x n, n x 1, empty, square, wide and tall (the Thrust engine has one kernel per
  /// operation, whatever the size).
  static const std::vector<std::pair<Index, Index>>& shapes() {
    static const std::vector<std::pair<Index, Index>> s = {{5, 7}, {7, 5},   {1, 6},  {6, 1},  {0, 4},
                                                           {4, 0}, {16, 16}, {9, 40}, {40, 9}, {24, 33}};
    return s;
  }
};
}  // namespace matopt::test

#define MATOPT_BACKEND "thrust backend"

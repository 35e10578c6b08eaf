// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// OnEngine<Policy>: a preconditioner written once against engine operations, run on the host and on every device
/// engine.
// A preconditioner that transforms U in place with the engine operations of the Newton–Schulz algorithm
// (precondition/detail/ns_algorithm.hpp: norm, scale, empty, syrk_lower, gemm, mirror_lower, copy_lower,
// add_diagonal, copy) is written once, as a struct with the common policy members (Options, name, cost, describe) and
//   template <class Engine, class M> static void run(Engine& e, M& u, const Options& o, Index m, Index n);
// and composed as OnEngine<Policy>, whose engine form forms U in the workspace in W's storage order and runs the
// policy on it: Optimizer with detail::HostEngine on an Eigen map, DeviceOptimizer with its engine (ThrustEngine,
// the CUDA engine) on U in device memory. The policy's scalar type is Engine::scalar_t<M>.
// docs/extending.md#a-policy-written-once-for-every-engine, examples/05_custom_policy.cpp.

#include <string_view>
#include <type_traits>

#include <Eigen/Core>

#include "matopt/core/detail/engine.hpp"
#include "matopt/core/detail/engine_form.hpp"
#include "matopt/core/detail/traits.hpp"

namespace matopt {

/// A preconditioner written once against engine operations (`Policy::run(engine, u, options, m, n)`, in place on
/// U), run by Optimizer on the host engine and by DeviceOptimizer on its engine (@ref policy_preconditioner).
template <class Policy>
struct OnEngine {
  /// The policy's options.
  using Options = typename Policy::Options;
  /// The policy's name (checkpoints record it).
  static constexpr const char* name() { return Policy::name(); }
  /// The policy's planner cost.
  static double cost(Index m, Index n) { return Policy::cost(m, n); }
  /// The policy's options.
  template <class O, class D>
  static void describe(O& o, D& d) {
    Policy::describe(o, d);
  }

  /// The engine form (core/detail/engine_form.hpp): U in the workspace.
  template <class WS>
  static void reserve_on(WS& ws, const Options&, Index m, Index n) {
    ws.grow(ws.u, m * n);
  }
  /// D = Policy::run(e, U), in place on U formed in the workspace in W's order.
  template <class E, class WS, class FormU>
  static detail::Strided<typename WS::Scalar> apply_on(E& e, WS& ws, const Options& o, Index m, Index n,
                                                       Layout layout, FormU&& form_u) {
    auto u = detail::form_in_workspace(ws, m, n, layout, form_u);
    if constexpr (E::any_order) {  // the host engine's handles: Eigen maps of one storage order
      const auto run = [&](auto order) {
        detail::DenseMap<typename WS::Scalar, decltype(order)::value> d(u.data, m, n);
        Policy::run(e, d, o, m, n);
      };
      if (layout == Layout::RowMajor) run(std::integral_constant<int, Eigen::RowMajor>{});
      else run(std::integral_constant<int, Eigen::ColMajor>{});
    } else {
      Policy::run(e, u, o, m, n);
    }
    return u;
  }
};

}  // namespace matopt

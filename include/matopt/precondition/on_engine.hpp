// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// OnEngine<Policy>: a preconditioner written once against engine operations, run on the host and on every device
/// engine.
// A preconditioner that transforms U in place with the engine operations of the Newton–Schulz algorithm
// (precondition/detail/ns_algorithm.hpp: norm, scale, empty, syrk_lower, gemm, mirror_lower, copy_lower,
// add_diagonal, copy) is written once, as a struct with the common policy members (Options, name, cost, describe) and
//   template <class Engine, class M> static void run(Engine& e, M& u, const Options& o, Index m, Index n);
// and composed as OnEngine<Policy>. On the host, OnEngine copies U into its workspace in W's storage order and runs
// the policy with detail::HostEngine on an Eigen map; DeviceOptimizer runs the same function with its engine
// (ThrustEngine, the CUDA engine) on U in device memory (backend/device_optimizer.hpp). The policy's scalar type is
// Engine::scalar_t<M>. docs/extending.md#a-policy-written-once-for-every-engine, examples/05_custom_policy.cpp.

#include <cstddef>
#include <string_view>

#include <Eigen/Core>

#include "matopt/core/detail/engine.hpp"
#include "matopt/core/detail/engine_form.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/core/detail/workspace.hpp"

namespace matopt {

/// A preconditioner written once against engine operations (`Policy::run(engine, u, options, m, n)`, in place on
/// U), as a host preconditioner (@ref policy_preconditioner); DeviceOptimizer runs the same `run` on its engine.
template <class Policy>
struct OnEngine {
  /// The policy's options.
  using Options = typename Policy::Options;
  /// U, in W's storage order.
  template <class T>
  struct Workspace {
    /// Internal: U, then D.
    detail::Buffer<T> u;
    /// Bytes held.
    std::size_t bytes() const { return u.bytes(); }
  };

  /// The policy's name (checkpoints record it).
  static constexpr const char* name() { return Policy::name(); }
  /// The policy's planner cost.
  static double cost(Index m, Index n) { return Policy::cost(m, n); }
  /// Sizes U for an m x n parameter.
  template <class T>
  static void reserve(Workspace<T>& ws, const Options&, Index m, Index n) {
    ws.u.reserve(m * n);
  }
  /// The policy's options.
  template <class O, class D>
  static void describe(O& o, D& d) {
    Policy::describe(o, d);
  }

  /// Calls sink(D): U copied into the workspace and transformed there by Policy::run on the host engine.
  template <class T, class UExpr, class Sink>
  static void apply(const UExpr& u, const Options& o, Workspace<T>& ws, Sink&& sink) {
    constexpr int order = detail::eigen_order_v<detail::layout_of_v<UExpr>>;
    const Index m = u.rows(), n = u.cols();
    detail::DenseMap<T, order> d = ws.u.template matrix<order>(m, n);
    d = u;
    detail::HostEngine engine;
    Policy::run(engine, d, o, m, n);
    sink(d);
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
    Policy::run(e, u, o, m, n);
    return u;
  }
};

}  // namespace matopt

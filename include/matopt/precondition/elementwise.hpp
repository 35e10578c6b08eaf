// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The element-wise preconditioners Identity (D = U) and Sign (D = sign(U)).
// The element-wise preconditioners (docs/math.md): Identity (SGD with momentum, D = U) and Sign (D = sign(U),
// sign(0) = 0). With these, RowNormalize and ColNormalize, methods such as SRON, SCALE or SinkGD are a few
// lines of user code (docs/extending.md shows them).

#include <string_view>

#include "matopt/config.hpp"
#include "matopt/core/detail/engine_form.hpp"
#include "matopt/core/detail/norms.hpp"
#include "matopt/distributed/plan.hpp"

namespace matopt {

namespace detail {
/// A preconditioner without options or workspace.
struct StatelessPreconditioner {
  struct Options {};
  template <class T>
  struct Workspace {
    std::size_t bytes() const { return 0; }
  };
  template <class T>
  static void reserve(Workspace<T>&, const Options&, Index, Index) {}
  template <class O, class D>
  static void describe(O&, D&) {}
  /// The planner's cost (distributed/plan.hpp): m n, one pass over the entries.
  static double cost(Index m, Index n) { return elementwise_cost(m, n); }
  /// D is a function of each entry of U alone, `direction(u)` (on Eigen arrays and expressions): the host form and
  /// the host engine's one-pass step (HostEngine::fused_update_entries) both read it.
  static constexpr bool entrywise = true;
  /// The engine form (core/detail/engine_form.hpp): U in the workspace.
  template <class WS>
  static void reserve_on(WS& ws, const Options&, Index m, Index n) {
    ws.grow(ws.u, m * n);
  }
};
}  // namespace detail

/// D = U: SGD with momentum. No options, workspace or state (@ref policy_preconditioner).
struct Identity : detail::StatelessPreconditioner {
  /// "Identity".
  static constexpr const char* name() { return "Identity"; }
  /// D = U.
  template <class U>
  static const U& direction(const U& u) {
    return u;
  }
  /// Calls sink(D).
  template <class T, class UExpr, class Sink>
  static void apply(const UExpr& u, const Options&, Workspace<T>&, Sink&& sink) {
    sink(direction(u));
  }
  /// D = U, formed in the workspace in W's order.
  template <class E, class WS, class FormU>
  static detail::Strided<typename WS::Scalar> apply_on(E&, WS& ws, const Options&, Index m, Index n, Layout layout,
                                                       FormU&& form_u) {
    return detail::form_in_workspace(ws, m, n, layout, form_u);
  }
};

/// D = sign(U), with sign(0) = 0 (signSGD / signum). No options, workspace or state.
struct Sign : detail::StatelessPreconditioner {
  /// "Sign".
  static constexpr const char* name() { return "Sign"; }
  /// D = sign(U), sign(0) = 0.
  template <class U>
  static auto direction(const U& u) {
    return detail::sign_of(u);
  }
  /// Calls sink(D).
  template <class T, class UExpr, class Sink>
  static void apply(const UExpr& u, const Options&, Workspace<T>&, Sink&& sink) {
    sink(direction(u));
  }
  /// D = sign(U), in place on U formed in the workspace in W's order.
  template <class E, class WS, class FormU>
  static detail::Strided<typename WS::Scalar> apply_on(E& e, WS& ws, const Options&, Index m, Index n, Layout layout,
                                                       FormU&& form_u) {
    const auto u = detail::form_in_workspace(ws, m, n, layout, form_u);
    e.sign(u);
    return u;
  }
};

}  // namespace matopt

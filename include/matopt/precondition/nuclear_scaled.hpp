// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// NuclearScaled: PolarGrad's direction, the polar factor scaled by the nuclear norm (arXiv 2505.21799).

#include <string>
#include <string_view>

#include "matopt/config.hpp"
#include "matopt/core/detail/engine.hpp"
#include "matopt/core/detail/engine_form.hpp"
#include "matopt/core/detail/traits.hpp"

namespace matopt {

/// PolarGrad's direction (arXiv 2505.21799): D = Inner(U) (a polar factor), nu = tr(D^T U), D' = nu D. With the
/// exact polar factor (Orthogonalize<ExactPolar>, the PolarGrad preset) nu is the nuclear norm ||U||_*; a zero U
/// gives D' = 0. Inner's options and workspace; no state (@ref policy_preconditioner).
/// As timlautk/polargrad PolarGrad.step with polar_first = false (`docs/math.md#polargrad`). With a Newton-Schulz
/// schedule nu is NVIDIA Emerging-Optimizers' PolarGrad scale sum(O . U).
template <class Inner>
struct NuclearScaled {
  /// Inner's options.
  using Options = typename Inner::Options;
  /// "NuclearScaled".
  static constexpr const char* name() { return "NuclearScaled"; }
  /// The planner's cost (distributed/plan.hpp): Inner's.
  static double cost(Index m, Index n) { return Inner::cost(m, n); }
  /// "NuclearScaled<Inner>".
  static std::string identity() { return std::string("NuclearScaled<") + detail::policy_identity<Inner>() + ">"; }

  /// Inner's options.
  template <class O, class D>
  static void describe(O& o, D& d) {
    Inner::describe(o, d);
  }

  /// sink(nu D) with nu = tr(D^T U), written once with the engine's policy operations (e.dot, e.scaled).
  template <class E, class UM, class DM, class Sink>
  static void scale_by_trace(E& e, const UM& u, const DM& d, Sink&& sink) {
    e.scaled(d, e.dot(u, d), sink);
  }

  /// The engine form (core/detail/engine_form.hpp): Inner's, and U formed again.
  template <class WS>
  static void reserve_on(WS& ws, const Options& o, Index m, Index n) {
    detail::check_inner_engine_form<Inner, WS>();
    Inner::reserve_on(ws, o, m, n);
    ws.grow(ws.u2, m * n);
  }
  /// D = Inner(U), then scale_by_trace with the engine's policy operations. U is formed again into ws.u2, laid out
  /// as D (which Inner returns dense), so tr(D^T U) is a plain dot product of m n elements.
  template <class E, class WS, class FormU>
  static detail::Strided<typename WS::Scalar> apply_on(E& e, WS& ws, const Options& o, Index m, Index n,
                                                       Layout layout, FormU&& form_u) {
    using T = typename WS::Scalar;
    static_assert(!detail::has_policy_state_v<Inner, T>, "matopt::NuclearScaled: Inner must keep no state of its own");
    const detail::Strided<T> d = Inner::apply_on(e, ws, o, m, n, layout, form_u);
    const detail::Strided<T> u = detail::laid_out_as(WS::ptr(ws.u2), d);
    form_u(u);
    detail::PolicyEngine<T, E, WS> pe{e, ws, layout};
    scale_by_trace(pe, detail::Strided<const T>(u), d, [](const detail::Strided<T>&) {});
    return d;
  }
};

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Momentum policies (Momentum with the Ema or Sum convention, NoMomentum) and their step coefficients.
// Momentum policies (docs/math.md#momentum). Two conventions exist in the wild and both are offered by name:
//   Ema (KellerJordan/Muon, torch.optim.Muon):  V <- beta V + (1 - beta) G,  Nesterov U = (1 - beta) G + beta V
//   Sum (Moonlight, RMNP, OrScale):             V <- beta V + G,             Nesterov U = G + beta V
//   plain momentum: U = V;  NoMomentum: U = G.
// Each is written as U = u_g G + u_v V_old and V_new = v_v V_old + v_g G, so that the preconditioner
// reads U before the buffer is overwritten (nothing is written until the direction is known).

#include <type_traits>

#include "matopt/config.hpp"

namespace matopt {

/// Momentum convention tags.
/// Ema (KellerJordan/Muon, torch.optim.Muon): V <- beta V + (1 - beta) G, Nesterov U = (1 - beta) G + beta V.
struct Ema {};
/// Sum convention tag (Moonlight, RMNP, OrScale): V <- beta V + G, Nesterov U = G + beta V.
struct Sum {};
/// Variant tags: the default of `Options::nesterov`.
/// Nesterov: Nesterov momentum by default.
struct Nesterov {};
/// Variant tag: plain heavy-ball momentum by default (U = V).
struct Plain {};

/// The four coefficients of one momentum step (see the file comment).
template <class T>
struct MomentumCoefficients {
  /// U = u_g G + u_v V_old: the direction's coefficients.
  /// @{
  T u_g, u_v;  // U = u_g G + u_v V_old
  /// @}
  /// V_new = v_v V_old + v_g G: the buffer's coefficients.
  /// @{
  T v_v, v_g;  // V_new = v_v V_old + v_g G
  /// @}
};

/// Heavy-ball momentum of convention `Convention` (Ema or Sum); `Variant` (Nesterov or Plain) sets the
/// default of the run-time `Options::nesterov` flag.
template <class Convention, class Variant = Nesterov>
struct Momentum {
  static_assert(std::is_same_v<Convention, Ema> || std::is_same_v<Convention, Sum>,
                "matopt::Momentum<Convention>: Convention must be matopt::Ema or matopt::Sum");
  static_assert(std::is_same_v<Variant, Nesterov> || std::is_same_v<Variant, Plain>,
                "matopt::Momentum<Convention, Variant>: Variant must be matopt::Nesterov or matopt::Plain");

  /// Keeps a buffer V (@ref policy_momentum).
  static constexpr bool has_buffer = true;
  /// Nesterov unless Variant is Plain.
  static constexpr bool nesterov_default = std::is_same_v<Variant, Nesterov>;
  /// "Ema" or "Sum".
  static constexpr const char* name() { return std::is_same_v<Convention, Ema> ? "Ema" : "Sum"; }

  /// The coefficients of a step with momentum `beta`, Nesterov or not (the update rules: Ema, Sum).
  template <class T>
  static MomentumCoefficients<T> coefficients(T beta, bool nesterov) {
    if constexpr (std::is_same_v<Convention, Ema>) {
      // Nesterov: (1-b) G + b (b V + (1-b) G) = (1-b)(1+b) G + b^2 V
      if (nesterov) return {(T(1) - beta) * (T(1) + beta), beta * beta, beta, T(1) - beta};
      return {T(1) - beta, beta, beta, T(1) - beta};
    } else {
      // Nesterov: G + b (b V + G) = (1+b) G + b^2 V
      if (nesterov) return {T(1) + beta, beta * beta, beta, T(1)};
      return {T(1), beta, beta, T(1)};
    }
  }
};

/// No momentum: U = G, no buffer (stateless methods such as SRON/SCALE-style normalization). The typed
/// `momentum` and `nesterov` fields have no effect; their facade keys are refused.
struct NoMomentum {
  /// No buffer: U = G.
  static constexpr bool has_buffer = false;
  /// No Nesterov (it has no effect).
  static constexpr bool nesterov_default = false;
  /// "None".
  static constexpr const char* name() { return "None"; }

  /// U = G and no buffer update, whatever beta and nesterov.
  template <class T>
  static MomentumCoefficients<T> coefficients(T, bool) {
    return {T(1), T(0), T(0), T(0)};
  }
};

}  // namespace matopt

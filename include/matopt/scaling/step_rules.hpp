// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The run-time lr rule s(m, n) and weight-decay form that every scaling policy of a matrix preset accepts.

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>

#include "matopt/config.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/parse.hpp"
#include "matopt/core/options.hpp"

namespace matopt {

/// The lr rule s(m, n) (option lr_rule, times extra_scale_factor; m = rows = fan-out, n = cols = fan-in;
/// `docs/math.md#lr-rules`):
/// - `Preset`: the preset's own rule (Static's Rule, TrustRatio's Shape);
/// - `Unit`: 1;
/// - `MuonOriginal`: max(1, m/n)^(1/2): KellerJordan/Muon, NorMuon, modded-nanogpt; NVIDIA "shape_scaling";
/// - `SqrtMax`: sqrt(max(m, n)): NVIDIA Emerging-Optimizers/Megatron "spectral" (the default there);
///   with extra_scale_factor 0.2: Moonlight, dion "rms_norm";
/// - `SqrtRatio`: sqrt(m/n): dion "spectral_norm" (its default), NVIDIA "unit_rms_norm", Scion.
///
/// The peers' names are not accepted as values: "spectral" means sqrt(max(m, n)) in NVIDIA's code and
/// sqrt(m/n) in dion's.
enum class LrRule { Preset, Unit, MuonOriginal, SqrtMax, SqrtRatio };
/// The weight-decay form (option weight_decay_method; `cautious_weight_decay = true` is the same as `cautious`;
/// `docs/math.md#weight-decay`):
/// - `Decoupled`: W <- W (1 - lr lambda) - lr s D (AdamW's form; the default);
/// - `Cautious`: W <- W - lr lambda (mask . W) - lr s D, mask = [D . W >= 0] elementwise (arXiv 2510.12402 Alg. 1;
///   dion cautious_wd: decay only where the update already moves the weight toward 0; the base lr, not lr s);
/// - `Independent`: W <- W (1 - lambda) - lr s D (decay independent of lr; NVIDIA weight_decay_method="independent").
enum class WeightDecay { Decoupled, Cautious, Independent };

/// The option values of the lr rules.
inline constexpr std::pair<const char*, LrRule> lr_rule_names[] = {{"preset", LrRule::Preset},
                                                                   {"unit", LrRule::Unit},
                                                                   {"muon_original", LrRule::MuonOriginal},
                                                                   {"sqrt_max", LrRule::SqrtMax},
                                                                   {"sqrt_ratio", LrRule::SqrtRatio}};
/// The option values of the decay forms.
inline constexpr std::pair<const char*, WeightDecay> weight_decay_names[] = {
    {"decoupled", WeightDecay::Decoupled}, {"cautious", WeightDecay::Cautious}, {"independent", WeightDecay::Independent}};
/// The option value of an lr rule: "preset", "unit", "muon_original", "sqrt_max" or "sqrt_ratio".
inline const char* lr_rule_name(LrRule r) { return checks::one_of(lr_rule_names).name(r); }
/// The option value of a decay form: "decoupled", "cautious" or "independent".
inline const char* weight_decay_name(WeightDecay w) { return checks::one_of(weight_decay_names).name(w); }

namespace detail {
/// cautious_weight_decay: a boolean that sets the decay form (true: cautious, false: decoupled).
struct CautiousFlag : checks::Any {
  static std::string text() { return "boolean"; }
  static void parse(std::string_view key, std::string_view value, WeightDecay& w) {
    w = parse_bool(key, value) ? WeightDecay::Cautious : WeightDecay::Decoupled;
  }
  static const char* name(WeightDecay w) { return w == WeightDecay::Cautious ? "true" : "false"; }
};
}  // namespace detail

/// The options shared by Static and TrustRatio (their Options derive from it).
struct StepRules {
  /// The lr rule (default Preset; key lr_rule).
  LrRule lr_rule = LrRule::Preset;
  double extra_scale_factor = 1.0;  ///< multiplies s(m, n) (NVIDIA's extra_scale_factor)
  /// The weight-decay form (default Decoupled; keys weight_decay_method, cautious_weight_decay).
  WeightDecay weight_decay_method = WeightDecay::Decoupled;

  /// s(m, n): the chosen rule (or `preset(m, n)`) times extra_scale_factor.
  template <class Preset>
  double factor(const Preset& preset, Index m, Index n) const {
    const double dm = static_cast<double>(m), dn = static_cast<double>(n);
    double s;
    switch (lr_rule) {
      case LrRule::Unit: s = 1.0; break;
      case LrRule::MuonOriginal: s = std::sqrt(std::max(1.0, dm / dn)); break;
      case LrRule::SqrtMax: s = std::sqrt(std::max(dm, dn)); break;
      case LrRule::SqrtRatio: s = std::sqrt(dm / dn); break;
      default: s = preset(m, n);
    }
    return s * extra_scale_factor;
  }

  /// The factor W is multiplied by where the decay applies: 1 - lr lambda, or 1 - lambda (independent).
  template <class T>
  T keep(T lr, T lambda) const {
    return weight_decay_method == WeightDecay::Independent ? T(1) - lambda : T(1) - lr * lambda;
  }
  /// Whether the decay is cautious.
  bool cautious() const { return weight_decay_method == WeightDecay::Cautious; }

  /// The options (core/options.hpp): lr_rule, extra_scale_factor, weight_decay_method, cautious_weight_decay.
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("lr_rule", o.lr_rule, checks::one_of(lr_rule_names, "an lr rule"), "s(m, n) in place of the preset's shape rule");
    d("extra_scale_factor", o.extra_scale_factor, checks::Positive{}, "multiplies s(m, n) under every rule");
    d("weight_decay_method", o.weight_decay_method, checks::one_of(weight_decay_names, "a weight-decay form"),
      "the weight-decay form");
    d("cautious_weight_decay", o.weight_decay_method, detail::CautiousFlag{}, "true sets cautious, false decoupled");
  }
};

}  // namespace matopt

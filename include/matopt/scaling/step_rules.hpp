// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The run-time lr rule s(m, n) and weight-decay form that every scaling policy of a matrix preset accepts.
// Run-time choices every scaling policy of a matrix preset accepts (docs/math.md#lr-rules, #weight-decay):
// the lr rule s(m, n) and the form of the weight decay.
//
// lr rules (option `lr_rule`, times `extra_scale_factor`); m = rows = fan-out, n = cols = fan-in:
//   preset         the preset's own rule (Static<Rule>'s Rule, TrustRatio's Shape)
//   unit           1
//   muon_original  max(1, m/n)^(1/2)  KellerJordan/Muon, NorMuon, modded-nanogpt; NVIDIA "shape_scaling"
//   sqrt_max       sqrt(max(m, n))    NVIDIA Emerging-Optimizers/Megatron "spectral" (the default there);
//                                     with extra_scale_factor 0.2: Moonlight, dion "rms_norm"
//   sqrt_ratio     sqrt(m/n)          dion "spectral_norm" (its default), NVIDIA "unit_rms_norm", Scion
// The peers' names are not accepted as values: "spectral" means sqrt(max(m, n)) in NVIDIA's code and
// sqrt(m/n) in dion's (docs/math.md#lr-rules).
//
// Weight decay (option `weight_decay_method`; `cautious_weight_decay = true` is the same as `cautious`):
//   decoupled    W <- W (1 - lr lambda) - lr s D                         (AdamW's form; the default)
//   cautious     W <- W - lr lambda (mask . W) - lr s D, mask = [D . W >= 0] elementwise
//                (arXiv 2510.12402 Alg. 1; dion cautious_wd: decay only where the update already moves
//                the weight toward 0; the base lr, not lr s)
//   independent  W <- W (1 - lambda) - lr s D                            (decay independent of lr;
//                NVIDIA weight_decay_method="independent")

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "matopt/config.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/parse.hpp"

namespace matopt {

/// The lr rule s(m, n) (option lr_rule; m = fan-out, n = fan-in): `Preset` (the preset's own rule), `Unit` (1),
/// `MuonOriginal` (max(1, m/n)^(1/2)), `SqrtMax` (sqrt(max(m, n)); NVIDIA's "spectral"; Moonlight with
/// extra_scale_factor 0.2), `SqrtRatio` (sqrt(m/n); dion's "spectral_norm", Scion).
enum class LrRule { Preset, Unit, MuonOriginal, SqrtMax, SqrtRatio };
/// The weight-decay form (option weight_decay_method): `Decoupled` W <- W (1 - lr lambda) - lr s D (AdamW's, the
/// default); `Cautious` decays only where D . W >= 0 (arXiv 2510.12402); `Independent` W <- W (1 - lambda) - lr s D.
enum class WeightDecay { Decoupled, Cautious, Independent };

/// The option value of an lr rule: "preset", "unit", "muon_original", "sqrt_max" or "sqrt_ratio".
inline const char* lr_rule_name(LrRule r) {
  switch (r) {
    case LrRule::Unit: return "unit";
    case LrRule::MuonOriginal: return "muon_original";
    case LrRule::SqrtMax: return "sqrt_max";
    case LrRule::SqrtRatio: return "sqrt_ratio";
    default: return "preset";
  }
}
/// The option value of a decay form: "decoupled", "cautious" or "independent".
inline const char* weight_decay_name(WeightDecay w) {
  switch (w) {
    case WeightDecay::Cautious: return "cautious";
    case WeightDecay::Independent: return "independent";
    default: return "decoupled";
  }
}

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

  /// Throws std::invalid_argument unless extra_scale_factor is finite and > 0.
  void validate(std::string_view where) const {
    detail::require_positive(where, "extra_scale_factor", extra_scale_factor);
  }
  /// Keys lr_rule, extra_scale_factor, weight_decay_method and cautious_weight_decay (a boolean); false for others.
  bool set_option(std::string_view key, std::string_view value) {
    if (key == "lr_rule") {
      if (value == "preset") lr_rule = LrRule::Preset;
      else if (value == "unit") lr_rule = LrRule::Unit;
      else if (value == "muon_original") lr_rule = LrRule::MuonOriginal;
      else if (value == "sqrt_max") lr_rule = LrRule::SqrtMax;
      else if (value == "sqrt_ratio") lr_rule = LrRule::SqrtRatio;
      else
        detail::fail("matopt options", "option 'lr_rule': '", value,
                     "' is not an lr rule (preset, unit, muon_original, sqrt_max, sqrt_ratio)");
    } else if (key == "extra_scale_factor") {
      extra_scale_factor = detail::parse_double(key, value);
    } else if (key == "weight_decay_method") {
      if (value == "decoupled") weight_decay_method = WeightDecay::Decoupled;
      else if (value == "cautious") weight_decay_method = WeightDecay::Cautious;
      else if (value == "independent") weight_decay_method = WeightDecay::Independent;
      else
        detail::fail("matopt options", "option 'weight_decay_method': '", value,
                     "' is not a weight-decay form (decoupled, cautious, independent)");
    } else if (key == "cautious_weight_decay") {
      weight_decay_method = detail::parse_bool(key, value) ? WeightDecay::Cautious : WeightDecay::Decoupled;
    } else {
      return false;
    }
    return true;
  }
  /// "lr_rule, extra_scale_factor, weight_decay_method, cautious_weight_decay".
  static constexpr const char* option_keys() {
    return "lr_rule, extra_scale_factor, weight_decay_method, cautious_weight_decay";
  }
};

}  // namespace matopt

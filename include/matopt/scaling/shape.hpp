// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Shape rules s(m, n) of the static scaling W <- W - lr s D (m = rows = fan-out, n = cols = fan-in).
// See docs/math.md#shape-rules. A conv weight uses its 2-D view (out, in*kh*kw).

#include <algorithm>
#include <cmath>
#include <functional>
#include <string_view>

#include "matopt/config.hpp"

/// Shape rules s(m, n) for Static and TrustRatio: each has a `name` and `operator()(m, n)` (@ref policy_shape).
namespace matopt::shape {

/// s = 1.
struct Unit {
  /// "unit".
  static constexpr const char* name = "unit";
  /// 1.
  double operator()(Index, Index) const { return 1.0; }
};

/// s = max(1, m/n)^(1/2): KellerJordan/Muon and the RMNP official code.
struct MuonOriginal {
  /// "muon_original".
  static constexpr const char* name = "muon_original";
  /// max(1, m/n)^(1/2).
  double operator()(Index m, Index n) const {
    return std::sqrt(std::max(1.0, static_cast<double>(m) / static_cast<double>(n)));
  }
};

/// s = max(1, n/m)^(1/2): MuonOriginal of the transposed matrix, the ColNorm preset's rule.
struct TransposedMuonOriginal {
  /// "transposed_muon_original".
  static constexpr const char* name = "transposed_muon_original";
  /// max(1, n/m)^(1/2).
  double operator()(Index m, Index n) const { return MuonOriginal{}(n, m); }
};

/// s = coefficient * sqrt(max(m, n)), coefficient 0.2: matches AdamW's update RMS (Moonlight; PyTorch
/// torch.optim.Muon `match_rms_adamw`).
struct MoonlightRms {
  /// "moonlight_rms".
  static constexpr const char* name = "moonlight_rms";
  /// The factor before sqrt(max(m, n)) (default 0.2).
  double coefficient = 0.2;
  /// coefficient sqrt(max(m, n)).
  double operator()(Index m, Index n) const {
    return coefficient * std::sqrt(static_cast<double>(std::max(m, n)));
  }
};

/// s = sqrt(max(m, n)): NVIDIA Emerging-Optimizers' default scale ("spectral"), NAMO's.
struct SqrtMax {
  /// "sqrt_max".
  static constexpr const char* name = "sqrt_max";
  /// sqrt(max(m, n)).
  double operator()(Index m, Index n) const { return std::sqrt(static_cast<double>(std::max(m, n))); }
};

/// s = sqrt(m/n): Scion, microsoft/dion.
struct Spectral {
  /// "spectral".
  static constexpr const char* name = "spectral";
  /// sqrt(m/n).
  double operator()(Index m, Index n) const {
    return std::sqrt(static_cast<double>(m) / static_cast<double>(n));
  }
};

/// s = sqrt(m): Scion's column-normalization radius (each column gets unit RMS).
struct ScionColumn {
  /// "scion_column".
  static constexpr const char* name = "scion_column";
  /// sqrt(m).
  double operator()(Index m, Index) const { return std::sqrt(static_cast<double>(m)); }
};

/// Any user rule s(m, n), set at run time: `Static<shape::Function>` with `options.scaling.rule.rule = f`.
/// (A user struct with `double operator()(Index m, Index n) const` works the same way, without the
/// indirect call.)
struct Function {
  /// "function".
  static constexpr const char* name = "function";
  /// The rule s(m, n); must be set (validate throws otherwise).
  std::function<double(Index, Index)> rule;
  /// rule(m, n).
  double operator()(Index m, Index n) const { return rule(m, n); }
};

}  // namespace matopt::shape

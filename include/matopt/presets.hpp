#pragma once
// The published optimizers as named compositions (spec §4):
// | preset        | momentum            | preconditioner     | scaling                  | lr    | lambda |
// | Muon          | Ema, Nesterov, .95  | Jordan NS5         | MuonOriginal             | 0.02  | 0      |
// | MoonlightMuon | Sum, Nesterov, .95  | Jordan NS5         | MoonlightRms             | 1e-3  | 0.1    |
// | RMNP          | Sum, Nesterov, .95  | RowNormalize       | MuonOriginal             | 0.02  | 0      |
// | ColNorm       | Sum, Nesterov, .95  | ColNormalize       | max(1, n/m)^(1/2)        | 0.02  | 0      |
// | OrScale       | Sum, Nesterov, .95  | PolarExpress 5     | TrustRatio [0.5, 1.5]    | 0.02  | 0      |
// AdamW (matopt/adamw.hpp) covers vectors, embeddings and heads.

#include "matopt/core/optimizer.hpp"
#include "matopt/momentum/momentum.hpp"
#include "matopt/precondition/col_normalize.hpp"
#include "matopt/precondition/newton_schulz.hpp"
#include "matopt/precondition/orthogonalize.hpp"
#include "matopt/precondition/row_normalize.hpp"
#include "matopt/scaling/shape.hpp"
#include "matopt/scaling/static.hpp"
#include "matopt/scaling/trust_ratio.hpp"

namespace matopt {
namespace defaults {
struct Muon {
  static constexpr const char* name = "matopt::Muon";
  static constexpr double lr = 0.02, weight_decay = 0.0;
};
struct MoonlightMuon {
  static constexpr const char* name = "matopt::MoonlightMuon";
  static constexpr double lr = 1e-3, weight_decay = 0.1;
};
struct RMNP {
  static constexpr const char* name = "matopt::RMNP";
  static constexpr double lr = 0.02, weight_decay = 0.0;
};
struct ColNorm {
  static constexpr const char* name = "matopt::ColNorm";
  static constexpr double lr = 0.02, weight_decay = 0.0;
};
struct OrScale {
  static constexpr const char* name = "matopt::OrScale";
  static constexpr double lr = 0.02, weight_decay = 0.0;
};
}  // namespace defaults

/// Muon (Jordan et al., KellerJordan/Muon): EMA Nesterov momentum, Newton–Schulz with the Jordan quintic.
template <class T>
using Muon = Optimizer<T, Orthogonalize<NewtonSchulz<schedules::Jordan>>, Momentum<Ema, Nesterov>,
                       Static<shape::MuonOriginal>, defaults::Muon>;

/// Moonlight's Muon (Liu et al., arXiv 2502.16982): update RMS matched to AdamW, decoupled decay 0.1.
template <class T>
using MoonlightMuon = Optimizer<T, Orthogonalize<NewtonSchulz<schedules::Jordan>>, Momentum<Sum, Nesterov>,
                                Static<shape::MoonlightRms>, defaults::MoonlightMuon>;

/// RMNP (arXiv 2603.20527): row-wise l2 normalization in place of orthogonalization, Theta(mn).
template <class T>
using RMNP = Optimizer<T, RowNormalize, Momentum<Sum, Nesterov>, Static<shape::MuonOriginal>, defaults::RMNP>;

/// Column normalization: RMNP over the output dimension.
template <class T>
using ColNorm = Optimizer<T, ColNormalize, Momentum<Sum, Nesterov>, Static<shape::TransposedMuonOriginal>,
                          defaults::ColNorm>;

/// OrScale (arXiv 2605.07815): Polar Express orthogonalization with a clipped trust-ratio step.
template <class T>
using OrScale = Optimizer<T, Orthogonalize<NewtonSchulz<schedules::PolarExpress>>, Momentum<Sum, Nesterov>,
                          TrustRatio<trust::OrScale, shape::Unit>, defaults::OrScale>;

}  // namespace matopt

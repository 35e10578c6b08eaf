// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The published optimizers as named compositions of policies (Muon, MoonlightMuon, RMNP, NorMuon, Dion, ...).
// The published optimizers as named compositions (docs/math.md#presets; one page each: docs/optimizers/):
// | preset        | momentum            | preconditioner     | scaling                  | lr    | lambda |
// | Muon          | Ema, Nesterov, .95  | Jordan NS5         | MuonOriginal             | 0.02  | 0      |
// | MoonlightMuon | Sum, Nesterov, .95  | Jordan NS5         | MoonlightRms             | 1e-3  | 0.1    |
// | RMNP          | Sum, Nesterov, .95  | RowNormalize       | MuonOriginal             | 0.02  | 0      |
// | RMNPReference | Sum, plain, .95     | RowNormalize       | Unit (dion's rmnp.py)    | 0.01  | 0.01   |
// | ColNorm       | Sum, Nesterov, .95  | ColNormalize       | max(1, n/m)^(1/2)        | 0.02  | 0      |
// | OrScale       | Sum, Nesterov, .95  | PolarExpress 5     | TrustRatio [0.5, 1.5]    | 0.02  | 0      |
// | NorMuon       | Ema, Nesterov, .95  | Jordan NS5, per-row second moment     | MuonOriginal | 0.02 | 0  |
// | AdaMuon       | Ema, Nesterov, .95  | Jordan NS5 of sign U, elementwise moment, RMS 0.2 | Unit | 0.02 | 0.01 |
// | NAMO          | Ema, plain, .95     | You NS5, scalar moment ||U||/sqrt(S)  | SqrtMax      | 1e-3 | 0  |
// | PolarGrad     | Ema, plain, .95     | exact polar, times ||U||_*            | Unit         | 0.02 | 0  |
// | TurboMuon     | Ema, Nesterov, .95  | AOL + 4 of You's NS steps             | MuonOriginal | 0.02 | 0  |
// | Dion          | none (its own M, mu .95) | rank-r power iteration, QR       | Spectral     | 0.01 | 0.01 |
// The last six: defaults of the reference codes (docs/math.md#second-moments-and-scalar-factors; NAMO's lr is
// matopt's: EO has no default; its update has RMS about ||U||/sqrt(S) <= 1, as AdamW's).
// AdamW (matopt/adamw.hpp) or Lion (matopt/lion.hpp) covers vectors, embeddings and heads.

#include "matopt/core/optimizer.hpp"
#include "matopt/momentum/momentum.hpp"
#include "matopt/precondition/auto_steps.hpp"
#include "matopt/precondition/col_normalize.hpp"
#include "matopt/precondition/dion.hpp"
#include "matopt/precondition/exact_polar.hpp"
#include "matopt/precondition/newton_schulz.hpp"
#include "matopt/precondition/nuclear_scaled.hpp"
#include "matopt/precondition/orthogonalize.hpp"
#include "matopt/precondition/row_normalize.hpp"
#include "matopt/precondition/second_moment.hpp"
#include "matopt/scaling/shape.hpp"
#include "matopt/scaling/static.hpp"
#include "matopt/scaling/trust_ratio.hpp"

namespace matopt {

/// The preset table: one row per matrix preset, X(Alias, facade name, lr, weight decay, runtime part). Everything
/// that lists presets comes from it: the defaults (defaults::Alias, name "matopt::Alias"), make_optimizer's names
/// (facade/detail/factory.hpp; "muon?ns_steps=auto": the row built for muon when ns_steps is auto, before muon's own),
/// optimizer_names, and the steps and facade models matopt::runtime compiles (the part: which of its
/// `src/runtime_<part>.cpp` files compiles the row; parts split the library's build). The sharding cost is the
/// preconditioner's own `cost(m, n)`. Adding a preset: its alias below and one row here.
#define MATOPT_MATRIX_PRESETS(X)                                    \
  X(MuonAutoSteps, "muon?ns_steps=auto", 0.02, 0.0, newton_schulz)  \
  X(Muon, "muon", 0.02, 0.0, newton_schulz)                         \
  X(MoonlightMuon, "moonlight_muon", 1e-3, 0.1, newton_schulz)      \
  X(RMNP, "rmnp", 0.02, 0.0, elementwise)                           \
  X(RMNPReference, "rmnp_reference", 0.01, 0.01, elementwise)       \
  X(ColNorm, "colnorm", 0.02, 0.0, elementwise)                     \
  X(OrScale, "orscale", 0.02, 0.0, newton_schulz)                   \
  X(NorMuon, "normuon", 0.02, 0.0, moments)                         \
  X(AdaMuon, "adamuon", 0.02, 0.01, moments)                        \
  X(NAMO, "namo", 1e-3, 0.0, moments)                               \
  X(PolarGrad, "polargrad", 0.02, 0.0, polar)                       \
  X(TurboMuon, "turbo_muon", 0.02, 0.0, newton_schulz)              \
  X(Dion, "dion", 0.01, 0.01, polar)

/// Each preset's defaults, from the table: its name in messages and checkpoints, its default lr and weight decay.
namespace defaults {
/// A table row's defaults struct.
#define MATOPT_PRESET_DEFAULTS(Alias, facade_name, lr_, weight_decay_, part) \
  struct Alias {                                                            \
    static constexpr const char* name = "matopt::" #Alias;                  \
    static constexpr double lr = lr_, weight_decay = weight_decay_;         \
  };
MATOPT_MATRIX_PRESETS(MATOPT_PRESET_DEFAULTS)
#undef MATOPT_PRESET_DEFAULTS
}  // namespace defaults

/// Muon (Jordan et al., KellerJordan/Muon): EMA Nesterov momentum, Newton–Schulz with the Jordan quintic.
template <class T>
using Muon = Optimizer<T, Orthogonalize<NewtonSchulz<schedules::Jordan>>, Momentum<Ema, Nesterov>,
                       Static<shape::MuonOriginal>, defaults::Muon>;

/// Muon whose Newton–Schulz step count is re-planned per matrix every 100 steps from its momentum's 5%
/// singular-value quantile (AutoSteps; `docs/math.md#step-planning-and-autosteps`). The facade builds it for
/// `muon` with ns_steps=auto.
template <class T>
using MuonAutoSteps = Optimizer<T, AutoSteps<NewtonSchulz<schedules::Jordan>>, Momentum<Ema, Nesterov>,
                                Static<shape::MuonOriginal>, defaults::MuonAutoSteps>;

/// Moonlight's Muon (Liu et al., arXiv 2502.16982): update RMS matched to AdamW, decoupled decay 0.1.
template <class T>
using MoonlightMuon = Optimizer<T, Orthogonalize<NewtonSchulz<schedules::Jordan>>, Momentum<Sum, Nesterov>,
                                Static<shape::MoonlightRms>, defaults::MoonlightMuon>;

/// RMNP (arXiv 2603.20527): row-wise l2 normalization in place of orthogonalization, Theta(mn).
template <class T>
using RMNP = Optimizer<T, RowNormalize, Momentum<Sum, Nesterov>, Static<shape::MuonOriginal>, defaults::RMNP>;

/// RMNP as microsoft/dion's reference code runs it (dion/rmnp.py, arXiv 2603.20527): Sum momentum without Nesterov,
/// row normalization, no post-normalization scale (adjust_lr None), lr 0.01, weight decay 0.01
/// (`docs/optimizers/rmnp_reference.md`: what differs from dion's code in the last bits).
template <class T>
using RMNPReference = Optimizer<T, RowNormalize, Momentum<Sum, Plain>, Static<shape::Unit>, defaults::RMNPReference>;

/// Column normalization: RMNP over the output dimension.
template <class T>
using ColNorm = Optimizer<T, ColNormalize, Momentum<Sum, Nesterov>, Static<shape::TransposedMuonOriginal>,
                          defaults::ColNorm>;

/// OrScale (arXiv 2605.07815): Polar Express orthogonalization with a clipped trust-ratio step.
template <class T>
using OrScale = Optimizer<T, Orthogonalize<NewtonSchulz<schedules::PolarExpress>>, Momentum<Sum, Nesterov>,
                          TrustRatio<trust::OrScale, shape::Unit>, defaults::OrScale>;

/// NorMuon (arXiv 2510.05491, zichongli5/NorMuon): Muon with a per-neuron second moment of the orthogonalized
/// momentum, rescaled to keep its Frobenius norm. `normuon_axis = longer`: modded-nanogpt / NVIDIA's axis.
template <class T>
using NorMuon = Optimizer<T, SecondMoment<Orthogonalize<NewtonSchulz<schedules::Jordan>>, moments::NorMuon>,
                          Momentum<Ema, Nesterov>, Static<shape::MuonOriginal>, defaults::NorMuon>;

/// AdaMuon (arXiv 2507.11005, Chongjie-Si/AdaMuon): NS of sign(U), an elementwise second moment, update RMS 0.2.
template <class T>
using AdaMuon = Optimizer<T, SecondMoment<Orthogonalize<NewtonSchulz<schedules::Jordan>>, moments::AdaMuon>,
                          Momentum<Ema, Nesterov>, Static<shape::Unit>, defaults::AdaMuon>;

/// NAMO (arXiv 2602.17080; NVIDIA Emerging-Optimizers): the orthogonalized momentum times the scalar
/// ||U||_F / (sqrt(S) + eps), S an EMA of ||G||_F^2.
template <class T>
using NAMO = Optimizer<T, SecondMoment<Orthogonalize<NewtonSchulz<schedules::You>>, moments::Namo>,
                       Momentum<Ema, Plain>, Static<shape::SqrtMax>, defaults::NAMO>;

/// PolarGrad (arXiv 2505.21799, timlautk/polargrad): the exact polar factor of the momentum times its nuclear
/// norm. Any Orthogonalize method composes: NuclearScaled<Orthogonalize<NewtonSchulz<...>>>.
template <class T>
using PolarGrad = Optimizer<T, NuclearScaled<Orthogonalize<ExactPolar>>, Momentum<Ema, Plain>, Static<shape::Unit>,
                            defaults::PolarGrad>;

/// Turbo-Muon (arXiv 2512.04632, thib-s/flash-newton-schulz): Muon whose Newton-Schulz starts from AOL row
/// scaling instead of the Frobenius normalization, which saves one of You's five steps.
template <class T>
using TurboMuon = Optimizer<T, Orthogonalize<NewtonSchulz<schedules::Turbo>>, Momentum<Ema, Nesterov>,
                            Static<shape::MuonOriginal>, defaults::TurboMuon>;

/// Dion (arXiv 2504.05295, microsoft/dion): a rank-r power iteration on the momentum with error feedback, the
/// update P Q^T scaled by sqrt(m/n) (dion's "spectral_norm" rule). `rank_fraction`, `mu` (not `momentum`).
template <class T>
using Dion = Optimizer<T, DionPowerIteration, NoMomentum, Static<shape::Spectral>, defaults::Dion>;

/// A preset's compiled entry points for scalar T: make_state's shape form, the step of each storage order
/// (Optimizer::step_map) and the batched step, after `kind`: `extern` declares them, nothing defines them.
#define MATOPT_PRESET_STEPS(kind, Preset, T)                                                                      \
  kind template Preset<T>::State Preset<T>::make_state(Index, Index, Layout);                                     \
  kind template void Preset<T>::step_map<Layout::RowMajor>(                                                       \
      detail::StepMap<T, Layout::RowMajor>, detail::StepMap<const T, Layout::RowMajor>, Preset<T>::State&);       \
  kind template void Preset<T>::step_map<Layout::ColMajor>(                                                       \
      detail::StepMap<T, Layout::ColMajor>, detail::StepMap<const T, Layout::ColMajor>, Preset<T>::State&);       \
  kind template void Preset<T>::step(const std::vector<MatrixView<T>>&, const std::vector<MatrixView<const T>>&, \
                                     std::vector<Preset<T>::State>&);

#if defined(MATOPT_RUNTIME_COMPILED) && !defined(MATOPT_HEADER_ONLY_PRESETS)
// Linked with matopt::runtime: the presets' steps are compiled there (src/runtime_*.cpp), not in every file that
// steps one (a test file stepping a dozen presets in both orders spent most of its compile time on them). Define
// MATOPT_HEADER_ONLY_PRESETS to compile them in the including file instead, e.g. with its own -march.
#define MATOPT_EXTERN_PRESET_STEPS(Preset, ...) \
  MATOPT_PRESET_STEPS(extern, Preset, float) MATOPT_PRESET_STEPS(extern, Preset, double)
MATOPT_MATRIX_PRESETS(MATOPT_EXTERN_PRESET_STEPS)
#undef MATOPT_EXTERN_PRESET_STEPS
#endif

}  // namespace matopt

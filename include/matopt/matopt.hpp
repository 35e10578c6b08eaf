// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The CPU umbrella header: every host optimizer, policy, preset, diagnostic and the facades (needs Eigen only).
// matopt: matrix-aware optimizers (Muon, MoonlightMuon, RMNP, ColNorm, OrScale, AdamW and compositions of
// their policies) for Eigen matrices on the CPU. The CPU umbrella: needs Eigen only.

/// @mainpage matopt API reference
/// Header-only C++17 matrix-aware optimizers. Where to start:
/// - matopt::Optimizer composes a momentum, a preconditioner and a scaling policy (@ref policies); presets.hpp
///   names the published ones (matopt::Muon, matopt::MoonlightMuon, matopt::RMNP, matopt::NorMuon, matopt::Dion, ...).
/// - matopt::AdamW and matopt::Lion step the parameters that are not hidden matrices; matopt::HybridOptimizer routes
///   a whole model between the two, and matopt::AnyOptimizer / matopt::make_optimizer build any preset at run time.
/// - Device memory: matopt::DeviceOptimizer with matopt::ThrustEngine or matopt::cuda::Engine (backend/cuda.cuh);
///   several processes: matopt::ShardedOptimizer over a matopt::Communicator; libtorch: matopt::TorchOptimizer.
/// - Checkpoints: matopt::save_checkpoint and matopt::load_checkpoint; diagnostics: diagnostics.hpp.

#include "matopt/config.hpp"
#include "matopt/version.hpp"

#include "matopt/core/optimizer.hpp"
#include "matopt/core/step_policy.hpp"
#include "matopt/core/view.hpp"

#include "matopt/momentum/momentum.hpp"

#include "matopt/precondition/adaptive.hpp"
#include "matopt/precondition/col_normalize.hpp"
#include "matopt/precondition/dion.hpp"
#include "matopt/precondition/elementwise.hpp"
#include "matopt/precondition/exact_polar.hpp"
#include "matopt/precondition/generators.hpp"
#include "matopt/precondition/newton_schulz.hpp"
#include "matopt/precondition/nuclear_scaled.hpp"
#include "matopt/precondition/on_engine.hpp"
#include "matopt/precondition/orthogonalize.hpp"
#include "matopt/precondition/row_normalize.hpp"
#include "matopt/precondition/schedule.hpp"
#include "matopt/precondition/second_moment.hpp"

#include "matopt/scaling/shape.hpp"
#include "matopt/scaling/spectral_cap.hpp"
#include "matopt/scaling/static.hpp"
#include "matopt/scaling/step_rules.hpp"
#include "matopt/scaling/trust_ratio.hpp"

#include "matopt/diagnostics.hpp"
#include "matopt/serialization/checkpoint.hpp"

#include "matopt/adamw.hpp"
#include "matopt/lion.hpp"
#include "matopt/presets.hpp"
#include "matopt/qk_clip.hpp"

#include "matopt/facade/any_optimizer.hpp"
#include "matopt/hybrid/hybrid_optimizer.hpp"

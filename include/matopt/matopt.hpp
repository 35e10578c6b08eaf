// SPDX-License-Identifier: MIT
#pragma once
// matopt: matrix-aware optimizers (Muon, MoonlightMuon, RMNP, ColNorm, OrScale, AdamW and compositions of
// their policies) for Eigen matrices on the CPU. The CPU umbrella: needs Eigen only.

#include "matopt/config.hpp"
#include "matopt/version.hpp"

#include "matopt/core/errors.hpp"
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
#include "matopt/qk_clip.hpp"
#include "matopt/presets.hpp"

#include "matopt/facade/any_optimizer.hpp"
#include "matopt/hybrid/hybrid_optimizer.hpp"

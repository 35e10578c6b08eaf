// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Umbrella header of the diagnostics: diagonal dominance, spectrum and Newton–Schulz analysis.
// matopt diagnostics (docs/math.md#diagnostics): the papers' measurements as library functions. Diagonal dominance of
// U U^T, singular-value quantiles, orthogonality residual, spectral flatness and the exact-polar stable
// step, Newton–Schulz response, failure threshold, step planner and power-law extrapolation.
// Documented in docs/diagnostics.md.

#include "matopt/diagnostics/diagonal_dominance.hpp"
#include "matopt/diagnostics/ns_analysis.hpp"
#include "matopt/diagnostics/spectrum.hpp"

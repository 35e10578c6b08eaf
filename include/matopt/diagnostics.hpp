// SPDX-License-Identifier: MIT
#pragma once
// matopt diagnostics (spec §6): the seeds' measurements as library functions. Diagonal dominance of
// U U^T, singular-value quantiles, orthogonality residual, spectral flatness and the exact-polar stable
// step, Newton–Schulz response, failure threshold, step planner and power-law extrapolation.
// Documented in docs/diagnostics.md.

#include "matopt/diagnostics/diagonal_dominance.hpp"
#include "matopt/diagnostics/ns_analysis.hpp"
#include "matopt/diagnostics/spectrum.hpp"

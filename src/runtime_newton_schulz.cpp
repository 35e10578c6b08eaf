// SPDX-License-Identifier: MIT
// matopt::runtime: the Newton–Schulz presets: the preset table's rows of part `newton_schulz`
// (src/runtime_presets.hpp).
#define MATOPT_RUNTIME_PART_newton_schulz_float(...) __VA_ARGS__
#define MATOPT_RUNTIME_PART_newton_schulz_double(...) __VA_ARGS__
#include "runtime_presets.hpp"

// SPDX-License-Identifier: MIT
// matopt::runtime: the second-moment presets: the preset table's rows of part `moments` (src/runtime_presets.hpp).
#define MATOPT_RUNTIME_PART_moments_float(...) __VA_ARGS__
#define MATOPT_RUNTIME_PART_moments_double(...) __VA_ARGS__
#include "runtime_presets.hpp"

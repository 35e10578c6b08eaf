// SPDX-License-Identifier: MIT
// matopt::runtime: the exact-polar and Dion presets in float: the preset table's rows of part `polar` for float
// (src/runtime_presets.hpp).
#define MATOPT_RUNTIME_PART_polar_float(...) __VA_ARGS__
#include "runtime_presets.hpp"

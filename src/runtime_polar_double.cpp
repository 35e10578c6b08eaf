// SPDX-License-Identifier: MIT
// matopt::runtime: the exact-polar and Dion presets in double: the preset table's rows of part `polar` for double
// (src/runtime_presets.hpp).
#define MATOPT_RUNTIME_PART_polar_double(...) __VA_ARGS__
#include "runtime_presets.hpp"

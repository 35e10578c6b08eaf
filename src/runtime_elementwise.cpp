// SPDX-License-Identifier: MIT
// matopt::runtime: the normalizations, AdamW and Lion: the preset table's rows of part `elementwise`
// (src/runtime_presets.hpp).
#define MATOPT_RUNTIME_PART_elementwise_float(...) __VA_ARGS__
#define MATOPT_RUNTIME_PART_elementwise_double(...) __VA_ARGS__
#include "runtime_presets.hpp"

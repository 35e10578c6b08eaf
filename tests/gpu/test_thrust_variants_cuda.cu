// SPDX-License-Identifier: MIT
// The peers' variants (tests/device_variant_cases.hpp) on the Thrust backend with Thrust's CUDA system: the same
// translation unit as the CPU build's (tests/test_thrust_variants.cpp), compiled by nvcc.
#include "../test_thrust_variants.cpp"

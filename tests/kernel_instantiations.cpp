// SPDX-License-Identifier: MIT
// The one instantiation of what tests/kernel_instantiations.hpp declares extern for every host test file.
#define MATOPT_TEST_KERNELS_DEFINE
#include "kernel_instantiations.hpp"

MATOPT_TEST_KERNELS()

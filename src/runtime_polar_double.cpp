// SPDX-License-Identifier: MIT
// matopt::runtime: the exact-polar and low-rank presets for double, with their BDCSVD and Householder QR
// (src/runtime_presets.hpp; the two types in two files: PolarGrad's and Dion's models took 166 s together).
#include "runtime_presets.hpp"

namespace matopt {
MATOPT_INSTANTIATE_PRESET_FOR(PolarGrad, double)
MATOPT_INSTANTIATE_PRESET_FOR(Dion, double)
}  // namespace matopt

// SPDX-License-Identifier: MIT
// matopt::runtime: the exact-polar and low-rank presets for float, with their BDCSVD and Householder QR
// (src/runtime_presets.hpp; the two types in two files: PolarGrad's and Dion's models took 166 s together).
#include "runtime_presets.hpp"

namespace matopt {
MATOPT_INSTANTIATE_PRESET_FOR(PolarGrad, float)
MATOPT_INSTANTIATE_PRESET_FOR(Dion, float)
}  // namespace matopt

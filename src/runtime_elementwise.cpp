// SPDX-License-Identifier: MIT
// matopt::runtime: the row/column-normalization and elementwise presets (src/runtime_presets.hpp).
#include "runtime_presets.hpp"

namespace matopt {
MATOPT_INSTANTIATE_PRESET(RMNP)
MATOPT_INSTANTIATE_PRESET(ColNorm)
MATOPT_INSTANTIATE_FACADE(AdamW)
MATOPT_INSTANTIATE_FACADE(Lion)
}  // namespace matopt

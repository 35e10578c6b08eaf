// SPDX-License-Identifier: MIT
// matopt::runtime: the second-moment presets (NorMuon, AdaMuon, NAMO) (src/runtime_presets.hpp).
#include "runtime_presets.hpp"

namespace matopt {
MATOPT_INSTANTIATE_PRESET(NorMuon)
MATOPT_INSTANTIATE_PRESET(AdaMuon)
MATOPT_INSTANTIATE_PRESET(NAMO)
}  // namespace matopt

// SPDX-License-Identifier: MIT
// matopt::runtime: the Newton–Schulz presets (src/runtime_presets.hpp).
#include "runtime_presets.hpp"

namespace matopt {
MATOPT_INSTANTIATE_PRESET(Muon)
MATOPT_INSTANTIATE_PRESET(MuonAutoSteps)
MATOPT_INSTANTIATE_PRESET(MoonlightMuon)
MATOPT_INSTANTIATE_PRESET(TurboMuon)
MATOPT_INSTANTIATE_PRESET(OrScale)
}  // namespace matopt

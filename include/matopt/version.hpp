// SPDX-License-Identifier: MIT
#pragma once

#define MATOPT_VERSION_MAJOR 0
#define MATOPT_VERSION_MINOR 1
#define MATOPT_VERSION_PATCH 0
#define MATOPT_VERSION_STRING "0.1.0"

namespace matopt {
/// The library version as "major.minor.patch".
inline constexpr const char* version() noexcept { return MATOPT_VERSION_STRING; }
}  // namespace matopt

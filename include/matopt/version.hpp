// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The library version, as macros (for preprocessor checks) and as matopt::version().

/// Major version number.
#define MATOPT_VERSION_MAJOR 0
/// Minor version number.
#define MATOPT_VERSION_MINOR 1
/// Patch version number.
#define MATOPT_VERSION_PATCH 0
/// The version as the string "major.minor.patch".
#define MATOPT_VERSION_STRING "0.1.0"

namespace matopt {
/// The library version as "major.minor.patch".
inline constexpr const char* version() noexcept { return MATOPT_VERSION_STRING; }
}  // namespace matopt

// SPDX-License-Identifier: MIT
// Compiled with OpenMP, linked with main.cpp compiled without it (tests/CMakeLists.txt, config_check.mismatch).
#include <matopt/core/optimizer.hpp>

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: every file of a program that includes matopt must be compiled with the same settings (namespace detail
/// only).
// OpenMP (_OPENMP: the threaded paths), the BLAS engine (MATOPT_USE_BLAS), oneDNN (MATOPT_HAS_ONEDNN) and Eigen's
// alignment (EIGEN_MAX_ALIGN_BYTES, EIGEN_MAX_STATIC_ALIGN_BYTES) change what matopt's and Eigen's inline functions
// compile to. Two translation units that disagree break the one-definition rule: the linker keeps one of the two
// bodies, silently (a serial path where a threaded one was compiled) or fatally (Eigen's alignment assertion).
// matopt's CMake targets give every file one setting (matopt::matopt's compile definitions, matopt::runtime's
// OpenMP); this check catches a program built otherwise: each translation unit registers its settings before main,
// and one that differs from those registered first stops the program with a message naming both
// (docs/reliability.md#one-configuration).

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <Eigen/Core>

/// Internal: x's value as a string literal.
#define MATOPT_DETAIL_STRING(x) MATOPT_DETAIL_STRING_(x)
/// Internal: MATOPT_DETAIL_STRING's second step.
#define MATOPT_DETAIL_STRING_(x) #x
#if defined(_OPENMP)
/// Internal: whether this translation unit is compiled with OpenMP.
#define MATOPT_DETAIL_CONFIG_OPENMP "on"
#else
#define MATOPT_DETAIL_CONFIG_OPENMP "off"
#endif
#if defined(MATOPT_USE_BLAS)
/// Internal: whether this translation unit uses the BLAS engine.
#define MATOPT_DETAIL_CONFIG_BLAS "on"
#else
#define MATOPT_DETAIL_CONFIG_BLAS "off"
#endif
#if defined(MATOPT_HAS_ONEDNN)
/// Internal: whether this translation unit has oneDNN.
#define MATOPT_DETAIL_CONFIG_ONEDNN "on"
#else
#define MATOPT_DETAIL_CONFIG_ONEDNN "off"
#endif
/// Internal: the settings of this translation unit that change inline bodies.
#define MATOPT_DETAIL_CONFIG                                                                          \
  "OpenMP " MATOPT_DETAIL_CONFIG_OPENMP ", MATOPT_USE_BLAS " MATOPT_DETAIL_CONFIG_BLAS                \
  ", MATOPT_HAS_ONEDNN " MATOPT_DETAIL_CONFIG_ONEDNN ", EIGEN_MAX_ALIGN_BYTES " MATOPT_DETAIL_STRING( \
      EIGEN_MAX_ALIGN_BYTES) ", EIGEN_MAX_STATIC_ALIGN_BYTES " MATOPT_DETAIL_STRING(EIGEN_MAX_STATIC_ALIGN_BYTES)

namespace matopt::detail {

/// Records the settings of the first translation unit that registers and stops the program, naming both, when
/// another's differ. Returns true.
inline bool register_configuration(const char* config) {
  static const char* const first = config;
  if (std::strcmp(first, config) != 0) {
    std::fprintf(stderr,
                 "matopt: the files of this program were compiled with different settings:\n  %s\n  %s\n"
                 "Compile every file that includes matopt with the same OpenMP flag and the same MATOPT_USE_BLAS, "
                 "MATOPT_HAS_ONEDNN and EIGEN_MAX_ALIGN_BYTES (linking the CMake target matopt::matopt sets them).\n",
                 first, config);
    std::abort();
  }
  return true;
}

namespace {
/// This translation unit's registration, before main.
[[maybe_unused]] const bool configuration_registered = register_configuration(MATOPT_DETAIL_CONFIG);
}  // namespace

}  // namespace matopt::detail

// SPDX-License-Identifier: MIT
// Force-included into every host test file (tests/CMakeLists.txt): the heaviest templates the suite
// instantiates, declared extern so that each file does not compile them again; tests/kernel_instantiations.cpp
// instantiates them once. The same code runs: this only moves where the compiler instantiates it (measured:
// test_orthogonalize.cpp 141 s -> 23 s of g++ -O1 CPU, docs/reliability.md#ci).
#pragma once
#include <Eigen/Core>
#include <Eigen/SVD>

#include "matopt/core/detail/engine.hpp"

#define MATOPT_TEST_KERNELS(EXTERN)                                                                     \
  EXTERN template class Eigen::BDCSVD<Eigen::MatrixXf>;   /* ExactPolar<float> */                       \
  EXTERN template class Eigen::BDCSVD<Eigen::MatrixXd>;   /* ExactPolar<double>, spectrum diagnostics */ \
  EXTERN template class Eigen::JacobiSVD<Eigen::MatrixXd>; /* the tests' reference SVDs */              \
  MATOPT_TEST_ENGINE(EXTERN, float, Eigen::ColMajor)                                                    \
  MATOPT_TEST_ENGINE(EXTERN, float, Eigen::RowMajor)                                                    \
  MATOPT_TEST_ENGINE(EXTERN, double, Eigen::ColMajor)                                                   \
  MATOPT_TEST_ENGINE(EXTERN, double, Eigen::RowMajor)
// The engine's products (core/detail/engine.hpp), whichever engine the build uses.
#define MATOPT_TEST_ENGINE(EXTERN, T, O)                                                                   \
  EXTERN template void matopt::detail::gemm<T, O>(T, const matopt::detail::DenseMap<T, O>&,                \
                                                  const matopt::detail::DenseMap<T, O>&, T,               \
                                                  matopt::detail::DenseMap<T, O>&);                        \
  EXTERN template void matopt::detail::syrk_lower<T, O>(T, const matopt::detail::DenseMap<T, O>&, T,       \
                                                        matopt::detail::DenseMap<T, O>&);

#if !defined(MATOPT_TEST_KERNELS_DEFINE)
MATOPT_TEST_KERNELS(extern)
#endif

// SPDX-License-Identifier: MIT
// Steps one RMNP parameter and checks that every row of the update has the expected norm.
#include <cmath>
#include <cstdio>

#include <matopt/matopt.hpp>

#if defined(MATOPT_USE_BLAS)
constexpr bool uses_blas = true;
#else
constexpr bool uses_blas = false;
#endif

int main() {
  if (uses_blas != bool(MATOPT_EXPECT_BLAS)) {
    std::printf("GEMM engine: got %s, expected %s\n", uses_blas ? "BLAS" : "Eigen",
                MATOPT_EXPECT_BLAS ? "BLAS" : "Eigen");
    return 1;
  }
  using Mat = matopt::RowMatrix<float>;
  Mat w = Mat::Zero(4, 8), g = Mat::Random(4, 8);
  matopt::RMNP<float> opt;
  auto state = opt.make_state(w);
  opt.step(w, g, state);
  // From W = 0: W = -lr * s * (1 + beta) G / ||(1 + beta) G_i|| row by row, s = 1 for a wide matrix.
  for (Eigen::Index i = 0; i < w.rows(); ++i)
    if (std::abs(w.row(i).norm() - 0.02f) > 1e-6f) {
      std::printf("row %ld has norm %g, expected 0.02\n", static_cast<long>(i), w.row(i).norm());
      return 1;
    }
  std::printf("matopt %s consumer OK (GEMM engine %s)\n", matopt::version(), uses_blas ? "BLAS" : "Eigen");
  return 0;
}

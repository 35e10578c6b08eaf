// SPDX-License-Identifier: MIT
// Steps every preset on the same least-squares problem, min_W 1/2 ||W X - Y||^2 with a planted W*,
// and prints the loss after each phase, the optimizer time per step, and each preset's effective lr.
#include <chrono>
#include <cstdio>
#include <string>

#include <matopt/matopt.hpp>

namespace {
using Mat = matopt::RowMatrix<float>;

struct Problem {
  Mat x, y;  // inputs (n x batch) and targets (m x batch)
  float loss(const Mat& w) const { return 0.5f * (w * x - y).squaredNorm() / float(x.cols()); }
  Mat grad(const Mat& w) const { return (w * x - y) * x.transpose() / float(x.cols()); }
};

template <class Opt>
void run(const char* name, Opt opt, const Problem& p, const Mat& w0, int steps) {
  Mat w = w0;
  auto state = opt.make_state(w);
  double seconds = 0;
  std::printf("%-14s loss %8.4f", name, p.loss(w));
  for (int k = 1; k <= steps; ++k) {
    const Mat g = p.grad(w);
    const auto t0 = std::chrono::steady_clock::now();
    opt.step(w, g, state);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (k % (steps / 4) == 0) std::printf(" -> %8.4f", p.loss(w));
  }
  std::printf("   %8.1f us/step   effective lr %.4g\n", 1e6 * seconds / steps, double(opt.effective_lr(state)));
}
}  // namespace

int main() {
  const int m = 128, n = 256, batch = 512, steps = 200;
  std::srand(7);
  const Mat w_star = Mat::Random(m, n) / std::sqrt(float(n));
  Problem p{Mat::Random(n, batch), Mat()};
  p.y = w_star * p.x;
  const Mat w0 = Mat::Zero(m, n);
  std::printf("matopt %s: %d steps on min 1/2 ||W X - Y||^2, W %dx%d\n\n", matopt::version(), steps, m, n);

  run("Muon", matopt::Muon<float>{}, p, w0, steps);
  run("MoonlightMuon", matopt::MoonlightMuon<float>{}, p, w0, steps);
  run("RMNP", matopt::RMNP<float>{}, p, w0, steps);
  run("ColNorm", matopt::ColNorm<float>{}, p, w0, steps);
  run("OrScale", matopt::OrScale<float>{}, p, w0, steps);
  matopt::AdamW<float>::Options adam;
  adam.lr = 3e-3f;
  run("AdamW", matopt::AdamW<float>(adam), p, w0, steps);
  // A composition of one's own: Polar Express orthogonalization with EMA momentum, unit scale.
  using Custom = matopt::Optimizer<float, matopt::Orthogonalize<matopt::NewtonSchulz<matopt::schedules::PolarExpress>>,
                                   matopt::Momentum<matopt::Ema>, matopt::Static<matopt::shape::Spectral>>;
  run("custom", Custom{}, p, w0, steps);
  return 0;
}

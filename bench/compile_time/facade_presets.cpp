// SPDX-License-Identifier: MIT
// What a framework's run-time-configured translation unit looks like (issue 18): every preset built by name
// through the facade, one step each, float and double, and a HybridOptimizer. scripts/facade_compile_time.sh
// compiles it header-only and against matopt::runtime, and runs the linked program.
#include <cmath>
#include <cstdio>
#include <vector>

#include <matopt/facade/any_optimizer.hpp>
#include <matopt/hybrid/hybrid_optimizer.hpp>

// Linked with matopt::runtime, these headers parse none of the presets (facade/detail/factory.hpp is compiled there).
#if defined(MATOPT_RUNTIME_COMPILED) && (defined(MATOPT_MATRIX_PRESETS) || defined(MATOPT_ELEMENTWISE_PRESETS))
#error "with matopt::runtime, the facade and hybrid headers must not include the presets"
#endif

template <class T>
int run() {
  const char* names[] = {"muon",      "moonlight_muon", "rmnp", "colnorm", "orscale", "normuon", "adamuon", "namo",
                         "polargrad", "turbo_muon",     "dion", "adamw",   "lion"};
  int bad = 0;
  for (const char* name : names) {
    std::vector<T> w(6 * 10), g(6 * 10);
    for (std::size_t i = 0; i < w.size(); ++i) {
      w[i] = T(std::sin(double(i)));
      g[i] = T(std::cos(0.7 * double(i)));
    }
    const matopt::MatrixView<T> wv{w.data(), 6, 10, matopt::Layout::RowMajor};
    const matopt::MatrixView<const T> gv{g.data(), 6, 10, matopt::Layout::RowMajor};
    auto opt = matopt::make_optimizer<T>(name, {{"lr", "0.01"}});
    auto state = opt.make_state(wv);
    opt.step(wv, gv, state);
    for (T x : w) bad += !std::isfinite(x);
  }
  std::vector<T> w(8 * 5, T(0.1)), b(8, T(0)), gw(8 * 5, T(0.2)), gb(8, T(0.3));
  matopt::HybridOptimizer<T> hybrid(matopt::make_optimizer<T>("rmnp"));
  hybrid.add("fc.weight", {w.data(), 8, 5, matopt::Layout::RowMajor});
  hybrid.add("fc.bias", {b.data(), 8, 1, matopt::Layout::RowMajor});
  hybrid.step({{gw.data(), 8, 5, matopt::Layout::RowMajor}, {gb.data(), 8, 1, matopt::Layout::RowMajor}});
  for (T x : w) bad += !std::isfinite(x);
  return bad;
}

int main() {
  const int bad = run<float>() + run<double>();
  std::printf("facade_presets: %s\n", bad == 0 ? "every preset stepped, finite" : "NON-FINITE RESULT");
  return bad == 0 ? 0 : 1;
}

// SPDX-License-Identifier: MIT
// Builds every preset by name through matopt::runtime (the facade's instantiations are extern here) and steps it.
#include <cmath>
#include <cstdio>
#include <vector>

#include <matopt/facade/any_optimizer.hpp>

#if !defined(MATOPT_RUNTIME_COMPILED)
#error "linking matopt::runtime must define MATOPT_RUNTIME_COMPILED"
#endif
// Linked with the runtime, the facade header parses none of the presets: they are compiled in the library.
#if defined(MATOPT_MATRIX_PRESETS) || defined(MATOPT_ELEMENTWISE_PRESETS)
#error "with matopt::runtime, <matopt/facade/any_optimizer.hpp> must not include the presets"
#endif

int main() {
  for (const char* name : {"muon", "moonlight_muon", "rmnp", "colnorm", "orscale", "adamw"}) {
    std::vector<float> w(4 * 8, 0.0f), g(4 * 8);
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::sin(float(i) + 1.0f);
    auto opt = matopt::make_optimizer<float>(name);
    const matopt::MatrixView<float> wv{w.data(), 4, 8, matopt::Layout::RowMajor};
    auto state = opt.make_state(wv);
    opt.step(wv, {g.data(), 4, 8, matopt::Layout::RowMajor}, state);
    double norm = 0;
    for (float x : w) norm += double(x) * x;
    if (!(norm > 0 && std::isfinite(norm))) {
      std::printf("%s: step from W = 0 gave ||W||^2 = %g\n", name, norm);
      return 1;
    }
  }
  if (matopt::optimizer_names.rfind("muon, ", 0) != 0) {  // defined once, in the library
    std::printf("optimizer_names = '%s'\n", matopt::optimizer_names.c_str());
    return 1;
  }
  std::printf("matopt::runtime consumer OK\n");
  return 0;
}

// SPDX-License-Identifier: MIT
// Prints every optimizer's option keys, one line per optimizer: "<label>\t<key>, <key>, ...", from option_keys(): the
// input of scripts/options_table.py, which renders docs/options.md (CTest docs.options_table compares the two).
#include <algorithm>
#include <cstdio>
#include <string>
#include <matopt/matopt.hpp>

template <class Opt>
void print(const char* label) {
  std::printf("%s\t%s\n", label, Opt::option_keys().c_str());
}

int main() {
  // Every name of the preset table (optimizer_names: "muon, moonlight_muon, ...").
  const std::string& names = matopt::optimizer_names;
  for (std::size_t at = 0; at < names.size();) {
    const std::size_t end = std::min(names.find(", ", at), names.size());
    const std::string n = names.substr(at, end - at);
    std::printf("%s\t%s\n", n.c_str(), matopt::make_optimizer<float>(n).option_keys().c_str());
    at = end + 2;
  }
  std::printf("muon ns_steps=auto\t%s\n", matopt::make_optimizer<float>("muon", {{"ns_steps", "auto"}}).option_keys().c_str());
  using namespace matopt;
  print<Optimizer<float, Adaptive<>, Momentum<Sum, Nesterov>, Static<>>>("Adaptive<> composition");
  print<Optimizer<float, Orthogonalize<>, Momentum<Ema, Nesterov>, SpectralCap<Static<>>>>("SpectralCap<Static<>> composition");
  print<Optimizer<float, Identity, Momentum<Sum, Plain>, TrustRatio<trust::Lars>>>("TrustRatio<trust::Lars> composition");
  print<Optimizer<float, Orthogonalize<ExactPolar>, Momentum<Ema>, Static<>>>("Orthogonalize<ExactPolar> composition");
  return 0;
}

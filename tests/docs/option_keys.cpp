// SPDX-License-Identifier: MIT
// Prints every optimizer's options from their descriptors (core/options.hpp), one line per option:
// "<label>\t<key>\t<values>\t<default>\t<doc>", in the order option_keys() lists them: the input of
// scripts/options_table.py, which renders docs/options.md (CTest docs.options_table compares the two).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <matopt/matopt.hpp>

void print(const std::string& label, const std::vector<matopt::OptionInfo>& options) {
  for (const matopt::OptionInfo& o : options)
    std::printf("%s\t%s\t%s\t%s\t%s\n", label.c_str(), o.key.c_str(), o.values.c_str(), o.value.c_str(),
                o.doc.c_str());
}

template <class Opt>
void print(const char* label) {
  print(label, matopt::option_info<Opt>(typename Opt::Options{}));
}

int main() {
  // Every name of the preset table (optimizer_names: "muon, moonlight_muon, ...").
  const std::string& names = matopt::optimizer_names;
  for (std::size_t at = 0; at < names.size();) {
    const std::size_t end = std::min(names.find(", ", at), names.size());
    const std::string n = names.substr(at, end - at);
    print(n, matopt::make_optimizer<float>(n).option_info());
    at = end + 2;
  }
  print("muon ns_steps=auto", matopt::make_optimizer<float>("muon", {{"ns_steps", "auto"}}).option_info());
  using namespace matopt;
  print<Optimizer<float, Adaptive<>, Momentum<Sum, Nesterov>, Static<>>>("Adaptive<> composition");
  print<Optimizer<float, Orthogonalize<>, Momentum<Ema, Nesterov>, SpectralCap<Static<>>>>(
      "SpectralCap<Static<>> composition");
  print<Optimizer<float, Identity, Momentum<Sum, Plain>, TrustRatio<trust::Lars>>>("TrustRatio<trust::Lars> composition");
  print<Optimizer<float, Orthogonalize<ExactPolar>, Momentum<Ema>, Static<>>>("Orthogonalize<ExactPolar> composition");
  return 0;
}

// libFuzzer target for the checkpoint loader (issue: reliability). Every input is tried twice against
// several optimizers: as a whole file (header parsing), and as a payload sealed with a valid header and
// checksum (so that mutations reach the field parser). Loading must either succeed or throw
// CheckpointError; any other exception, crash, leak or undefined behaviour is a finding.
//
//   MATOPT_FUZZ_SEED_DIR=corpus ./fuzz_checkpoint corpus -max_total_time=60
// writes valid seed checkpoints into corpus/ first.

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <matopt/matopt.hpp>

namespace {

using RowF = matopt::RowMatrix<float>;
using RowD = matopt::RowMatrix<double>;
using Capped = matopt::Optimizer<float, matopt::Orthogonalize<>, matopt::Momentum<matopt::Ema, matopt::Nesterov>,
                                 matopt::SpectralCap<matopt::Static<>>>;
using Adaptive = matopt::Optimizer<double, matopt::Adaptive<>, matopt::Momentum<matopt::Sum, matopt::Nesterov>,
                                   matopt::Static<>>;

struct Targets {
  RowF wf = RowF::Random(4, 3), bf = RowF::Random(1, 5);
  RowD wd = RowD::Random(3, 6);
  matopt::Muon<float> muon;
  std::vector<matopt::Muon<float>::State> muon_states{muon.make_state(wf), muon.make_state(bf)};
  matopt::OrScale<double> orscale;
  std::vector<matopt::OrScale<double>::State> orscale_states{orscale.make_state(wd)};
  Capped capped;
  std::vector<Capped::State> capped_states{capped.make_state(wf)};
  Adaptive adaptive;
  std::vector<Adaptive::State> adaptive_states{adaptive.make_state(wd)};
  matopt::AdamW<float> adamw;
  std::vector<matopt::AdamW<float>::State> adamw_states{adamw.make_state(bf)};
  // The typed wrapper, not make_optimizer: the same Muon, without instantiating every preset behind the facade
  // (with all 13 presets the fuzz stage's build took 265 s in CI).
  matopt::HybridOptimizer<float> hybrid{matopt::AnyOptimizer<float>(matopt::Muon<float>{})};
  Targets() {
    hybrid.add("w", matopt::view(wf));
    hybrid.add("b", matopt::view(bf));
  }
};

Targets& targets() {
  static Targets t;
  return t;
}

template <class Load>
void attempt(const std::string& bytes, Load&& load) {
  std::istringstream is(bytes);
  try {
    load(is);
  } catch (const matopt::CheckpointError&) {
  }
}

void write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

/// The payload of a checkpoint (the file without its 40-byte header).
std::string payload(const std::string& file) { return file.substr(matopt::detail::checkpoint_header_bytes); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("MATOPT_FUZZ_SEED_DIR");
  if (dir == nullptr) return 0;
  Targets& t = targets();
  auto save = [&](const std::string& name, auto& opt, auto& states) {
    std::ostringstream os;
    matopt::save_checkpoint(os, opt, states);
    write(dir, name + ".ckpt", os.str());
    write(dir, name + ".payload", payload(os.str()));
  };
  save("muon", t.muon, t.muon_states);
  save("orscale", t.orscale, t.orscale_states);
  save("capped", t.capped, t.capped_states);
  save("adaptive", t.adaptive, t.adaptive_states);
  save("adamw", t.adamw, t.adamw_states);
  std::ostringstream os;
  save_checkpoint(os, t.hybrid, true);
  write(dir, "hybrid.ckpt", os.str());
  write(dir, "hybrid.payload", payload(os.str()));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Targets& t = targets();
  const std::string raw(reinterpret_cast<const char*>(data), size);
  const std::string sealed4 = matopt::detail::seal(raw, 4), sealed8 = matopt::detail::seal(raw, 8);
  for (const std::string* bytes : {&raw, &sealed4, &sealed8}) {
    attempt(*bytes, [&](std::istream& is) { matopt::load_checkpoint(is, t.muon, t.muon_states); });
    attempt(*bytes, [&](std::istream& is) { matopt::load_checkpoint(is, t.orscale, t.orscale_states); });
    attempt(*bytes, [&](std::istream& is) { matopt::load_checkpoint(is, t.capped, t.capped_states); });
    attempt(*bytes, [&](std::istream& is) { matopt::load_checkpoint(is, t.adaptive, t.adaptive_states); });
    attempt(*bytes, [&](std::istream& is) { matopt::load_checkpoint(is, t.adamw, t.adamw_states); });
    attempt(*bytes, [&](std::istream& is) { load_checkpoint(is, t.hybrid); });
  }
  return 0;
}

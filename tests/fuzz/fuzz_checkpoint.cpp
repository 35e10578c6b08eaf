// SPDX-License-Identifier: MIT
// libFuzzer target for the checkpoint loader (issue: reliability). Every input is tried three times against
// several optimizers: as a whole file (header parsing), and as a payload sealed with a valid header and checksum
// for float and for double (so that mutations reach the field parser and the checks of what fields mean).
// Each input gets fresh optimizers and states (its three forms then load into the same ones, in order), so a
// finding reproduces from its input alone. A finding is:
//  - an exception other than CheckpointError, a crash, a leak or undefined behaviour (ASan + UBSan);
//  - a failed load that changed the live state (compared through its serialized bytes);
//  - a successful load after which one step with a finite gradient leaves a non-finite weight: for the matrix
//    optimizers whatever finite state was loaded (their directions are normalized), for AdamW when the loaded
//    moments are at most 1e6 in magnitude (a forged first moment near FLT_MAX overflows m / (1 - beta1^t) by
//    itself: finite, non-negative where required, but not a state any run reaches).
//
//   MATOPT_FUZZ_SEED_DIR=corpus ./fuzz_checkpoint corpus -max_total_time=60
// writes valid seed checkpoints into corpus/ first (tests/fuzz/corpus holds them and what earlier runs kept).

#include <cmath>
#include <cstdint>
#include <cstdio>
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

/// Fixed weights (not Eigen's Random, whose state would carry over from one input to the next).
template <class M>
M fixed(matopt::Index m, matopt::Index n) {
  return M::NullaryExpr(m, n, [n](matopt::Index i, matopt::Index j) {
    const double k = double(i * n + j + 1);
    return typename M::Scalar(std::sin(0.37 * k * k));
  });
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_checkpoint finding: %s\n", what);
  std::abort();
}

/// One optimizer, its parameters and their states: load, then check.
template <class Opt, class M>
struct Target {
  Opt opt;
  std::vector<M> ws;
  std::vector<typename Opt::State> states;
  explicit Target(std::vector<M> w) : ws(std::move(w)) {
    for (auto& x : ws) states.push_back(opt.make_state(x));
  }
  /// Two steps, so that the seed files hold states with content (step k's gradient: the fixed matrix k rows on).
  void train() {
    for (int k = 0; k < 2; ++k)
      for (std::size_t i = 0; i < ws.size(); ++i)
        opt.step(ws[i], fixed<M>(ws[i].rows() + k, ws[i].cols()).topRows(ws[i].rows()).eval(), states[i]);
  }
  std::string bytes() const {
    std::ostringstream os;
    matopt::save_checkpoint(os, opt, states);
    return os.str();
  }
  /// Largest magnitude of the states' floating-point values (after a load).
  double largest() {
    double big = 0;
    for (auto& s : states)
      s.fields([&](const char*, auto& v) { visit(v, big); });
    return big;
  }
  template <class V>
  static void visit(V& v, double& big) {
    if constexpr (std::is_floating_point_v<V>) big = std::max(big, std::abs(double(v)));
    else if constexpr (std::is_base_of_v<Eigen::EigenBase<V>, V>) {
      if (v.size() != 0) big = std::max(big, double(v.cwiseAbs().maxCoeff()));
    } else if constexpr (std::is_class_v<V>) v.fields([&](const char*, auto& x) { visit(x, big); });
  }
  void attempt(const std::string& file, double finite_below) {
    const std::string before = bytes();
    std::istringstream is(file);
    try {
      matopt::load_checkpoint(is, opt, states);
    } catch (const matopt::CheckpointError&) {
      if (bytes() != before) finding("a failed load changed the state");
      return;
    }
    const double big = largest();
    for (std::size_t i = 0; i < ws.size(); ++i) {
      const M g = M::Constant(ws[i].rows(), ws[i].cols(), typename M::Scalar(0.5));
      opt.step(ws[i], g, states[i]);
      if (big <= finite_below && !ws[i].allFinite()) finding("a step after a successful load is not finite");
    }
  }
};

struct Targets {
  Target<matopt::Muon<float>, RowF> muon{{fixed<RowF>(4, 3), fixed<RowF>(1, 5)}};
  Target<matopt::OrScale<double>, RowD> orscale{{fixed<RowD>(3, 6)}};
  Target<Capped, RowF> capped{{fixed<RowF>(4, 3)}};
  Target<Adaptive, RowD> adaptive{{fixed<RowD>(3, 6)}};
  Target<matopt::AdamW<float>, RowF> adamw{{fixed<RowF>(1, 5)}};
  // The typed wrapper, not make_optimizer: the same Muon, without instantiating every preset behind the facade
  // (with all 13 presets the fuzz stage's build took 265 s in CI).
  RowF wf = fixed<RowF>(4, 3), bf = fixed<RowF>(1, 5);
  matopt::HybridOptimizer<float> hybrid{matopt::AnyOptimizer<float>(matopt::Muon<float>{})};
  Targets() {
    hybrid.add("w", matopt::view(wf));  // Muon
    hybrid.add("b", matopt::view(bf));  // AdamW
  }
  std::string hybrid_bytes() const {
    std::ostringstream os;
    save_checkpoint(os, hybrid, true);
    return os.str();
  }
  void attempt_hybrid(const std::string& file) {
    const std::string before = hybrid_bytes();
    std::istringstream is(file);
    try {
      load_checkpoint(is, hybrid);
    } catch (const matopt::CheckpointError&) {
      if (hybrid_bytes() != before) finding("a failed load changed the hybrid");
      return;
    }
    const RowF gw = RowF::Constant(4, 3, 0.5f), gb = RowF::Constant(1, 5, 0.5f);
    hybrid.step({matopt::view(gw), matopt::view(gb)});
    if (!wf.allFinite()) finding("the hybrid's Muon step after a successful load is not finite");
  }
};

void write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

/// The payload of a checkpoint (the file without its 40-byte header).
std::string payload(const std::string& file) { return file.substr(matopt::detail::checkpoint_header_bytes); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("MATOPT_FUZZ_SEED_DIR");
  if (dir == nullptr) return 0;
  Targets t;
  t.muon.train();
  t.orscale.train();
  t.capped.train();
  t.adaptive.train();
  t.adamw.train();
  const RowF gw = fixed<RowF>(5, 3).topRows(4), gb = fixed<RowF>(2, 5).topRows(1);
  t.hybrid.step({matopt::view(gw), matopt::view(gb)});
  auto save = [&](const std::string& name, const std::string& file) {
    write(dir, name + ".ckpt", file);
    write(dir, name + ".payload", payload(file));
  };
  save("muon", t.muon.bytes());
  save("orscale", t.orscale.bytes());
  save("capped", t.capped.bytes());
  save("adaptive", t.adaptive.bytes());
  save("adamw", t.adamw.bytes());
  save("hybrid", t.hybrid_bytes());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string raw(reinterpret_cast<const char*>(data), size);
  const std::string sealed4 = matopt::detail::seal(raw, 4), sealed8 = matopt::detail::seal(raw, 8);
  constexpr double any = HUGE_VAL;  // a finite step for every finite state
  Targets t;  // fresh per input: nothing carries over from one input to the next
  for (const std::string* bytes : {&raw, &sealed4, &sealed8}) {
    t.muon.attempt(*bytes, any);
    t.orscale.attempt(*bytes, any);
    t.capped.attempt(*bytes, any);
    t.adaptive.attempt(*bytes, any);
    t.adamw.attempt(*bytes, 1e6);
    t.attempt_hybrid(*bytes);
  }
  return 0;
}

// SPDX-License-Identifier: MIT
// A byte-level GPT (examples/gpt/model.hpp) trained on the text of Debian's `fortunes` package with each
// optimizer from the same initial weights and the same batch sequence. The matrix optimizers (Muon, RMNP,
// ColNorm, OrScale) run through matopt::TorchOptimizer (hidden matrices; embeddings, head and vectors on
// AdamW); `adamw` is matopt's AdamW on every parameter, `torch_adamw` libtorch's torch::optim::AdamW on every
// parameter. Measured along the way: validation loss against steps and against optimizer time, the diagonal
// dominance r_min/avg/max of U U^T per layer type (q, k, v, o, fc, proj; math.md#diagnostics: U is what the optimizer
// preconditions; for the AdamW runs a side momentum buffer V = 0.95 V + G), and the singular-value
// quantiles of U / ||U||_F per matrix (seed 001). docs/gpt.md has the measured results and their reading.
// --lr-grid runs a learning-rate grid per width instead (docs/gpt.md, "Learning rate across width"): every
// (width, configuration, lr) from the same weights and batches, one row of lr_transfer.csv per run, resumable.
// --ranks N trains data-parallel on N processes of this machine (docs/distributed.md#data-parallel-libtorch-c10d):
// gpt starts N copies of itself, which meet through a c10d FileStore in --out and form a Gloo process group; each
// rank takes 1/N of every global batch, matopt::TorchOptimizer averages the gradients and steps each hidden matrix
// on its owner rank; rank 0 writes the outputs (the other ranks' console output goes to --out/rank<r>.log).
//
//   gpt [--optimizers a,b,...] [--steps N] [--d-model N] [--layers N] [--heads N] [--context N] [--batch N]
//       [--lr name=value]... [--option name:key=value]... [--adam-lr X] [--seed N] [--threads N]
//       [--eval-every N] [--dominance-every N]
//       [--eval-batches N] [--warmup N] [--sweep 64,128,256] [--lr-grid name=a,b,...]... [--quick] [--out DIR]
//       [--data DIR] [--ranks N]
// A name is an optimizer (muon, rmnp, ...) or a label optimizer@tag (tag: letters, digits, '_', '.', '-'): the
// same optimizer under several configurations, e.g. --lr-grid muon@moonlight=0.002,0.004 with
// --option muon@moonlight:lr_rule=sqrt_max --option muon@moonlight:extra_scale_factor=0.2. A label's --option
// and --lr entries are its own (a label does not inherit its optimizer's --option).
//
// Exit status: 0; 2 on bad arguments or an error; 77 when the fortunes text is missing (CTest: skipped).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <torch/torch.h>

#include <matopt/diagnostics.hpp>
#include <matopt/integration/libtorch.hpp>
#if defined(MATOPT_GPT_C10D)
#include <matopt/integration/c10d.hpp>
#include <sys/wait.h>
#endif

#include "../common/torch_threads.hpp"
#include "corpus.hpp"
#include "model.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The default comparison, and every name --optimizers accepts (the peers' variants of issue 20 too).
const std::vector<std::string> kDefault{"muon", "rmnp", "colnorm", "orscale", "adamw", "torch_adamw"};
// muon_auto: Muon with ns_steps=auto (the Newton–Schulz steps re-planned per matrix, precondition/auto_steps.hpp).
const std::vector<std::string> kKnown{"muon",      "muon_auto",  "rmnp", "colnorm", "orscale",    "normuon", "adamuon",
                                      "namo",      "polargrad",  "turbo_muon", "dion", "adamw", "torch_adamw"};
const std::vector<std::string> kTypes{"q", "k", "v", "o", "fc", "proj"};
const std::vector<double> kQuantiles{0.05, 0.25, 0.5};

/// The optimizer of a name: `muon` for `muon` and for the label `muon@moonlight`.
std::string base_of(const std::string& label) { return label.substr(0, label.find('@')); }

/// Whether `label` is a known optimizer, or one followed by '@' and a tag of letters, digits, '_', '.', '-'.
bool valid_label(const std::string& label) {
  if (std::find(kKnown.begin(), kKnown.end(), base_of(label)) == kKnown.end()) return false;
  const auto at = label.find('@');
  if (at == std::string::npos) return true;
  const std::string tag = label.substr(at + 1);
  return !tag.empty() && std::all_of(tag.begin(), tag.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '-';
  });
}

/// An lr as the grid keys and prints it (6 significant digits; a grid lr is rounded to it before it is run).
std::string lr_text(double lr) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", lr);
  return b;
}

/// A number as the facade's option text, every digit kept (std::to_string would keep 6 decimals: 3.125e-05 -> 3.1e-05).
std::string exact_text(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

struct GridEntry {
  std::string label;        // an optimizer or optimizer@tag
  std::vector<double> lrs;  // in the order given
};

struct Args {
  std::vector<std::string> optimizers = kDefault;
  std::int64_t steps = 600;
  gpt::GptConfig model;
  std::int64_t batch = 16;
  std::map<std::string, double> lr;  // --lr name=value
  std::map<std::string, matopt::Config> options;  // --option name:key=value (the facade's keys)
  double adam_lr = 2e-3;             // the AdamW route of the matrix optimizers, and the AdamW baselines' lr
  std::uint64_t seed = 0;
  int threads = 0;
  std::int64_t eval_every = 50;
  std::int64_t dominance_every = 50;
  std::int64_t eval_batches = 16;
  std::int64_t warmup = -1;  // -1: 5% of the steps
  std::vector<std::int64_t> sweep;
  std::vector<GridEntry> grid;     // --lr-grid name=a,b,...: the lr grid's configurations, in the order given
  bool stop_on_divergence = false;  // set for the grid's runs: a diverged run stops early (train())
  std::string out = "gpt_out";
  std::string data;
  int ranks = 1;  // --ranks N: data parallel over N processes (c10d, Gloo)
};

/// Data parallel (--ranks): this process's rank and the group's communicator (nullptr on one process).
struct Dist {
  int rank = 0, size = 1;
  matopt::Communicator* comm = nullptr;
};
Dist g_dist;

// The matrix route's lr: each preset's default (KellerJordan/Muon's 0.02 for Muon, OrScale; 0.02 for RMNP and
// ColNorm, matopt's presets; the reference codes' 0.02 for NorMuon, AdaMuon, PolarGrad, Turbo-Muon; 0.01 for
// Dion; 1e-3 for NAMO, whose update has an AdamW-like RMS), unless --lr name=value says otherwise; --adam-lr
// for the AdamW baselines.
double lr_of(const Args& a, const std::string& label) {
  if (auto it = a.lr.find(label); it != a.lr.end()) return it->second;
  const std::string name = base_of(label);
  if (auto it = a.lr.find(name); it != a.lr.end()) return it->second;
  if (name == "adamw" || name == "torch_adamw") return a.adam_lr;
  if (name == "namo") return 1e-3;
  if (name == "dion") return 0.01;
  return 0.02;
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "gpt: %s\n"
               "usage: gpt [--optimizers muon,rmnp,colnorm,orscale,adamw,torch_adamw (also muon_auto,normuon,adamuon,namo,\n"
               "            polargrad,turbo_muon,dion)]\n"
               "           [--steps N] [--d-model N]\n"
               "           [--layers N] [--heads N] [--context N] [--batch N] [--lr name=value]... [--adam-lr X]\n"
               "           [--option name:key=value]...\n"
               "           [--seed N] [--threads N] [--eval-every N] [--dominance-every N] [--eval-batches N]\n"
               "           [--warmup N] [--sweep 64,128,256] [--lr-grid name=lr,lr,...]... [--quick] [--out DIR]\n"
               "           [--data DIR] [--ranks N]\n"
               "a name is an optimizer or a label optimizer@tag with its own --option/--lr entries, e.g.\n"
               "  --lr-grid muon@moonlight=0.002,0.004,0.008 --option muon@moonlight:lr_rule=sqrt_max\n"
               "  --option muon@moonlight:extra_scale_factor=0.2\n"
               "--lr-grid (repeatable; with --sweep, per width) runs every (width, name, lr) instead of\n"
               "--optimizers and appends a row per run to DIR/lr_transfer.csv; a run already there is skipped\n",
               why.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string p; std::getline(in, p, ',');)
    if (!p.empty()) parts.push_back(p);
  return parts;
}

Args parse(int argc, char** argv) {
  Args a;
  bool quick = false, steps_given = false, d_given = false, layers_given = false, every_given = false,
       dom_given = false, evalb_given = false, optimizers_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key == "--quick") {
      quick = true;
      continue;
    }
    if (i + 1 >= argc) usage("missing value for " + key);
    const std::string value = argv[++i];
    auto integer = [&](long long lo) {
      char* end = nullptr;
      const long long v = std::strtoll(value.c_str(), &end, 10);
      if (end == value.c_str() || *end != '\0' || v < lo) usage(key + ": bad value '" + value + "'");
      return std::int64_t(v);
    };
    auto real = [&](const std::string& text) {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !(v > 0) || !std::isfinite(v)) usage(key + ": bad value '" + text + "'");
      return v;
    };
    if (key == "--optimizers") {
      a.optimizers = split(value);
      optimizers_given = true;
      for (const auto& o : a.optimizers)
        if (!valid_label(o))
          usage("unknown optimizer '" + o +
                "' (known: muon, muon_auto, rmnp, colnorm, orscale, normuon, adamuon, namo, polargrad, turbo_muon, dion, "
                "adamw, torch_adamw; or one of them @tag)");
      if (a.optimizers.empty()) usage("--optimizers is empty");
    } else if (key == "--steps") a.steps = integer(1), steps_given = true;
    else if (key == "--d-model") a.model.d_model = integer(1), d_given = true;
    else if (key == "--layers") a.model.layers = integer(1), layers_given = true;
    else if (key == "--heads") a.model.heads = integer(1);
    else if (key == "--context") a.model.context = integer(2);
    else if (key == "--batch") a.batch = integer(1);
    else if (key == "--lr") {
      const auto eq = value.find('=');
      if (eq == std::string::npos) usage("--lr takes name=value (e.g. --lr rmnp=0.005)");
      const std::string name = value.substr(0, eq);
      if (!valid_label(name)) usage("--lr: unknown optimizer '" + name + "'");
      a.lr[name] = real(value.substr(eq + 1));
    } else if (key == "--option") {
      const auto colon = value.find(':'), eq = value.find('=');
      if (colon == std::string::npos || eq == std::string::npos || eq < colon)
        usage("--option takes name:key=value (e.g. --option muon_auto:ns_plan_quantile=0.25)");
      const std::string name = value.substr(0, colon);
      if (!valid_label(name) || base_of(name) == "adamw" || base_of(name) == "torch_adamw")
        usage("--option: '" + name + "' is not a matrix optimizer of --optimizers");
      a.options[name][value.substr(colon + 1, eq - colon - 1)] = value.substr(eq + 1);
    } else if (key == "--adam-lr") a.adam_lr = real(value);
    else if (key == "--seed") a.seed = std::uint64_t(integer(0));
    else if (key == "--threads") a.threads = int(integer(0));
    else if (key == "--eval-every") a.eval_every = integer(1), every_given = true;
    else if (key == "--dominance-every") a.dominance_every = integer(1), dom_given = true;
    else if (key == "--eval-batches") a.eval_batches = integer(1), evalb_given = true;
    else if (key == "--warmup") a.warmup = integer(0);
    else if (key == "--sweep") {
      for (const auto& w : split(value)) {
        char* end = nullptr;
        const long long v = std::strtoll(w.c_str(), &end, 10);
        if (end == w.c_str() || *end != '\0' || v < 1) usage("--sweep: bad width '" + w + "'");
        a.sweep.push_back(v);
      }
      if (a.sweep.empty()) usage("--sweep is empty");
    } else if (key == "--lr-grid") {
      const auto eq = value.find('=');
      if (eq == std::string::npos) usage("--lr-grid takes name=lr,lr,... (e.g. --lr-grid muon=0.01,0.02,0.04)");
      GridEntry g{value.substr(0, eq), {}};
      if (!valid_label(g.label)) usage("--lr-grid: unknown optimizer '" + g.label + "'");
      for (const auto& e : a.grid)
        if (e.label == g.label) usage("--lr-grid: '" + g.label + "' given twice");
      for (const auto& text : split(value.substr(eq + 1))) {
        const double lr = std::strtod(lr_text(real(text)).c_str(), nullptr);
        if (std::find(g.lrs.begin(), g.lrs.end(), lr) != g.lrs.end()) usage("--lr-grid: lr " + text + " twice");
        g.lrs.push_back(lr);
      }
      if (g.lrs.empty()) usage("--lr-grid: no lr for '" + g.label + "'");
      a.grid.push_back(std::move(g));
    } else if (key == "--ranks") a.ranks = int(integer(1));
    else if (key == "--out") a.out = value;
    else if (key == "--data") a.data = value;
    else usage("unknown option " + key);
  }
  if (quick) {  // about 2-3 minutes on 2 cores for every default optimizer
    if (!steps_given) a.steps = 120;
    if (!d_given) a.model.d_model = 64;
    if (!layers_given) a.model.layers = 2;
    if (!every_given) a.eval_every = 30;
    if (!dom_given) a.dominance_every = 30;
    if (!evalb_given) a.eval_batches = 8;
  }
  if (!a.grid.empty() && optimizers_given) usage("--lr-grid runs its own names: drop --optimizers");
  if (a.model.d_model % a.model.heads != 0) usage("--d-model must be a multiple of --heads");
  for (auto w : a.sweep)
    if (w % a.model.heads != 0) usage("--sweep: width " + std::to_string(w) + " is not a multiple of --heads");
  if (a.warmup < 0) a.warmup = std::max<std::int64_t>(1, a.steps / 20);
  if (a.warmup >= a.steps) usage("--warmup must be below --steps");
  if (a.ranks > 1) {
#if !defined(MATOPT_GPT_C10D)
    usage("--ranks needs matopt::c10d (this gpt was built without libtorch's c10d and the gloo headers: "
          "apt-get install libgloo-dev, then reconfigure)");
#endif
    if (a.batch % a.ranks != 0)
      usage("--ranks " + std::to_string(a.ranks) + ": --batch " + std::to_string(a.batch) +
            " must be a multiple of the ranks (each takes an equal share of every batch)");
    if (!a.grid.empty()) usage("--ranks runs --optimizers and --sweep; --lr-grid runs on one process");
    if (a.threads == 0)  // the cores shared among the ranks
      a.threads = std::max(1, int(std::thread::hardware_concurrency()) / a.ranks);
    for (const auto& o : a.optimizers)
      if (base_of(o) == "torch_adamw")
        usage("--ranks: torch_adamw is libtorch's own AdamW, which has no data-parallel step (matopt's is 'adamw')");
  }
  return a;
}

// ---------------------------------------------------------------------------------------------------
// Data: random windows of the training text, fixed windows of the validation text

struct Data {
  torch::Tensor train, val;  // uint8 bytes as int64
};

torch::Tensor bytes_tensor(const std::string& s) {
  auto t = torch::empty({std::int64_t(s.size())}, torch::kInt64);
  auto* p = t.data_ptr<std::int64_t>();
  for (std::size_t i = 0; i < s.size(); ++i) p[i] = std::int64_t(static_cast<unsigned char>(s[i]));
  return t;
}

/// x = text[o, o + T), y = text[o + 1, o + T + 1) for each offset.
std::pair<torch::Tensor, torch::Tensor> windows(const torch::Tensor& text, const std::vector<std::int64_t>& offsets,
                                                std::int64_t T) {
  std::vector<torch::Tensor> xs, ys;
  for (auto o : offsets) {
    xs.push_back(text.narrow(0, o, T));
    ys.push_back(text.narrow(0, o + 1, T));
  }
  return {torch::stack(xs), torch::stack(ys)};
}

/// Linear warm-up to 1 over `warm` steps, then linear decay to 1/(total - warm) at the last step (t 0-based;
/// matopt's lrs are > 0, so the decay stops one step short of 0).
double schedule(std::int64_t t, std::int64_t total, std::int64_t warm) {
  if (t < warm) return double(t + 1) / double(warm);
  return double(total - t) / double(total - warm);
}

// ---------------------------------------------------------------------------------------------------
// One run

struct EvalPoint {
  std::int64_t step;
  double train_loss, val_loss, optimizer_s, fwd_bwd_s;
};
struct DominancePoint {
  std::int64_t step;
  std::string type;  // a layer type, or "all"
  double r_min, r_avg, r_max;
};
struct SpectrumPoint {
  std::int64_t step;
  std::string name, type;
  int layer;
  std::vector<double> q;
};
struct PlanPoint {
  std::int64_t step = 0;
  std::string name, type;
  std::int64_t ns_steps = 0, ns_work = 0, calls = 0;
  double quantile = 0;
};

struct RunResult {
  std::string optimizer;
  std::int64_t d_model = 0, layers = 0, steps = 0;
  std::int64_t steps_run = 0;  // below steps when a run with stop_on_divergence diverged
  bool diverged = false;
  double lr = 0, final_val = 0, best_val = 1e300, final_train = 0, optimizer_s = 0, fwd_bwd_s = 0;
  double r_min = 0, r_avg = 0, r_max = 0;
  std::vector<EvalPoint> evals;
  std::vector<DominancePoint> dominance;
  std::vector<SpectrumPoint> spectrum;
  std::vector<PlanPoint> plans;  // muon_auto: each hidden matrix's NS plan at every --dominance-every sample
  int ranks = 1;                 // --ranks: the payload handed to the collectives, per step
  double allreduce_bytes = 0;    // by one rank (every rank hands the same)
  double allgather_bytes = 0;    // by all ranks together (each hands the matrices it owns)
  std::int64_t params = 0, matrix_params = 0;  // elements: all parameters, the matrix route's
};

class Progress {
 public:
  Progress(std::string label, std::int64_t total) : label_(std::move(label)), total_(total), tty_(isatty(1) != 0) {}
  void update(std::int64_t step, double loss) {
    if (!tty_) return;
    const auto now = Clock::now();
    if (step != total_ && std::chrono::duration<double>(now - last_).count() < 0.2) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const int width = 30, filled = int(double(width) * double(step) / double(total_));
    std::printf("\r%-12s [%s%s] %3d%%  loss %.4f  %.1f steps/s ", label_.c_str(),
                std::string(std::size_t(filled), '#').c_str(), std::string(std::size_t(width - filled), '.').c_str(),
                int(100.0 * double(step) / double(total_)), loss, elapsed > 0 ? double(step) / elapsed : 0.0);
    std::fflush(stdout);
  }
  void finish() {
    if (tty_) std::printf("\n");
  }

 private:
  std::string label_;
  std::int64_t total_;
  bool tty_;
  Clock::time_point start_ = Clock::now(), last_ = Clock::now();
};

/// Dominance and spectrum of one hidden matrix's U (row-major m x n), recorded at `step`.
struct Diagnostics {
  std::map<std::string, std::vector<matopt::DiagonalDominance>> by_type;  // this sample's, per layer type
  void add(RunResult& r, std::int64_t step, const std::string& name, const float* u, matopt::Index m, matopt::Index n) {
    const std::string type = gpt::layer_type(name);
    if (type.empty()) return;
    const Eigen::Map<const matopt::RowMatrix<float>> U(u, m, n);
    by_type[type].push_back(matopt::diagonal_dominance(U));
    if (U.norm() > 0) r.spectrum.push_back({step, name, type, gpt::layer_index(name), matopt::singular_value_quantiles(U, kQuantiles)});
  }
  /// Means per layer type and over all matrices; returns the overall mean.
  matopt::DiagonalDominanceMean flush(RunResult& r, std::int64_t step) {
    std::vector<matopt::DiagonalDominance> all;
    for (const auto& t : kTypes) {
      const auto it = by_type.find(t);
      if (it == by_type.end()) continue;
      const auto mean = matopt::mean_diagonal_dominance(it->second);
      r.dominance.push_back({step, t, mean.r_min, mean.r_avg, mean.r_max});
      all.insert(all.end(), it->second.begin(), it->second.end());
    }
    by_type.clear();
    const auto mean = matopt::mean_diagonal_dominance(all);
    if (!all.empty()) r.dominance.push_back({step, "all", mean.r_min, mean.r_avg, mean.r_max});
    return mean;
  }
};

/// One run of `label` (an optimizer, or optimizer@tag with its own --option entries) at `lr`. With
/// a.stop_on_divergence, a run stops, diverged (final validation loss NaN), at a training or validation loss that
/// is not finite, or when the training loss has been above 1.5 times the first step's (the untrained model's,
/// about ln 256 = 5.55 nats/byte) for kDivergedSteps steps in a row. Not at once: RMNP runs showed one-step spikes
/// (3.1 -> 9.1 -> 3.2 nats/byte, d_model 128, lr 0.002, step 29 of 300) that the next step undid.
constexpr int kDivergedSteps = 5;

RunResult train(const std::string& label, double lr, const gpt::GptConfig& cfg, const Data& d, const Args& a) {
  const std::string name = base_of(label);
  RunResult r;
  r.optimizer = label;
  r.d_model = cfg.d_model;
  r.layers = cfg.layers;
  r.steps = a.steps;
  r.lr = lr;
  torch::manual_seed(a.seed);  // every optimizer starts from the same weights
  gpt::Gpt model(cfg);

  const bool matrix = name != "adamw" && name != "torch_adamw";
  std::unique_ptr<torch::optim::Optimizer> opt;
  matopt::TorchOptimizer* mopt = nullptr;
  bool auto_steps = false;  // the matrix route is AutoSteps (ns_steps=auto): record its plans
  const std::string adam_lr = exact_text(a.adam_lr);
  if (name == "torch_adamw") {
    opt = std::make_unique<torch::optim::AdamW>(
        model->parameters(), torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(0));
  } else if (name == "adamw") {  // matopt's AdamW on every parameter: one explicit group routed to AdamW
    std::vector<matopt::TorchParamGroup> groups(1);
    for (const auto& item : model->named_parameters()) groups[0].params.emplace_back(item.key(), item.value());
    groups[0].route = matopt::Route::AdamW;
    matopt::TorchOptions o;
    o.adamw = {{"lr", exact_text(lr)}, {"beta2", "0.95"}};
    o.communicator = g_dist.comm;
    auto p = std::make_unique<matopt::TorchOptimizer>(groups, "muon", matopt::Config{}, o);
    mopt = p.get();
    opt = std::move(p);
  } else {
    matopt::TorchOptions o;
    o.adamw = {{"lr", adam_lr}, {"beta2", "0.95"}};
    o.communicator = g_dist.comm;
    matopt::Config config{{"lr", exact_text(lr)}};
    if (name == "muon_auto") config["ns_steps"] = "auto";
    if (auto it = a.options.find(label); it != a.options.end())
      for (const auto& [key, value] : it->second) config[key] = value;
    // (data parallel: a rank holds the plans of the matrices it owns only; not recorded)
    auto_steps = config.count("ns_steps") != 0 && config["ns_steps"] == "auto" && g_dist.size == 1;
    auto p = std::make_unique<matopt::TorchOptimizer>(model->named_parameters(), name == "muon_auto" ? "muon" : name,
                                                      config, o);
    mopt = p.get();
    opt = std::move(p);
  }
  std::vector<double> base_lr;
  for (const auto& g : opt->param_groups()) base_lr.push_back(g.options().get_lr());

  // Diagnostics: the matrix optimizers report U through telemetry every dominance_every steps; the AdamW runs
  // keep a side momentum buffer per hidden matrix. Not with --ranks (each rank sees the matrices it owns only).
  const bool diagnose = g_dist.size == 1;
  Diagnostics diag;
  double diagnostics_s = 0;  // spent in the telemetry callback: not optimizer time
  std::int64_t step = 0;
  if (matrix && diagnose)
    mopt->hybrid<float>().set_telemetry(int(a.dominance_every), [&](const std::string& pname, const matopt::StepReport<float>& rep) {
      const auto t0 = Clock::now();
      diag.add(r, rep.step, pname, rep.direction.data, rep.rows, rep.cols);
      diagnostics_s += seconds_since(t0);
    });
  std::vector<std::pair<std::string, torch::Tensor>> hidden;  // side momentum buffers (AdamW runs)
  std::vector<torch::Tensor> side;
  if (!matrix && diagnose)
    for (const auto& item : model->named_parameters())
      if (!gpt::layer_type(item.key()).empty()) {
        hidden.emplace_back(item.key(), item.value());
        side.push_back(torch::zeros_like(item.value()));
      }

  std::mt19937_64 rng(a.seed + 1);  // the same batch sequence for every optimizer
  const std::int64_t T = cfg.context;
  std::uniform_int_distribution<std::int64_t> offset(0, d.train.size(0) - T - 2);
  std::vector<std::int64_t> val_offsets;
  for (std::int64_t i = 0; i < a.eval_batches * a.batch; ++i)
    val_offsets.push_back(i * (d.val.size(0) - T - 2) / std::max<std::int64_t>(1, a.eval_batches * a.batch - 1));
  auto validation_loss = [&] {
    torch::NoGradGuard no_grad;
    model->eval();
    double sum = 0;
    for (std::int64_t b = 0; b < a.eval_batches; ++b) {
      const std::vector<std::int64_t> o(val_offsets.begin() + b * a.batch, val_offsets.begin() + (b + 1) * a.batch);
      const auto [x, y] = windows(d.val, o, T);
      sum += model->loss(x, y).item<double>();
    }
    model->train();
    return sum / double(a.eval_batches);
  };

  Progress progress(label + " " + std::to_string(cfg.d_model), a.steps);
  const matopt::CommCounters traffic0 = g_dist.comm ? g_dist.comm->counters() : matopt::CommCounters{};
  double window_loss = 0, first_loss = 0;
  std::int64_t window = 0;
  int above = 0;  // steps in a row with a training loss above 1.5 times the first
  for (step = 0; step < a.steps; ++step) {
    std::vector<std::int64_t> o(std::size_t(a.batch));
    for (auto& v : o) v = offset(rng);
    if (g_dist.size > 1) {  // this rank's share of the global batch (its loss is the mean over its share)
      const std::size_t share = o.size() / std::size_t(g_dist.size);
      o = std::vector<std::int64_t>(o.begin() + std::ptrdiff_t(share * std::size_t(g_dist.rank)),
                                    o.begin() + std::ptrdiff_t(share * std::size_t(g_dist.rank + 1)));
    }
    const auto [x, y] = windows(d.train, o, T);
    const auto t0 = Clock::now();
    opt->zero_grad();
    const auto loss = model->loss(x, y);
    loss.backward();
    r.fwd_bwd_s += seconds_since(t0);
    const double f = schedule(step, a.steps, a.warmup);
    for (std::size_t g = 0; g < base_lr.size(); ++g) opt->param_groups()[g].options().set_lr(base_lr[g] * f);
    const double before = diagnostics_s;
    const auto t1 = Clock::now();
    opt->step();
    r.optimizer_s += seconds_since(t1) - (diagnostics_s - before);
    double l = loss.item<double>();
    if (g_dist.size > 1) {  // the global batch's loss: every rank takes the same early-stop decision
      g_dist.comm->all_reduce(&l, 1);
      l /= double(g_dist.size);
    }
    if (step == 0) first_loss = l;
    above = l > 1.5 * first_loss ? above + 1 : 0;
    if (a.stop_on_divergence && (!std::isfinite(l) || above >= kDivergedSteps)) {
      r.diverged = true;
      break;
    }
    window_loss += l;
    ++window;
    const bool sample = diagnose && (step + 1) % a.dominance_every == 0;
    if (!matrix && diagnose) {
      torch::NoGradGuard no_grad;
      const auto t2 = Clock::now();
      for (std::size_t i = 0; i < hidden.size(); ++i) side[i].mul_(0.95).add_(hidden[i].second.grad());
      if (sample)
        for (std::size_t i = 0; i < hidden.size(); ++i) {
          const auto& v = side[i];
          diag.add(r, step + 1, hidden[i].first, v.data_ptr<float>(), v.size(0), v.numel() / v.size(0));
        }
      diagnostics_s += seconds_since(t2);
    }
    if (sample && auto_steps) {
      const auto& names = mopt->names();
      for (std::size_t i = 0; i < names.size(); ++i)
        if (mopt->route(names[i]) == matopt::Route::Matrix) {
          const auto& st = mopt->hybrid<float>().state(i);
          r.plans.push_back({step + 1, names[i], gpt::layer_type(names[i]),
                             std::int64_t(st.field("precondition.ns_steps")), std::int64_t(st.field("precondition.ns_work")),
                             std::int64_t(st.field("precondition.calls")), st.field("precondition.quantile")});
        }
    }
    if (sample) {
      const auto mean = diag.flush(r, step + 1);
      r.r_min = mean.r_min;
      r.r_avg = mean.r_avg;
      r.r_max = mean.r_max;
    }
    if ((step + 1) % a.eval_every == 0 || step + 1 == a.steps) {
      const double val = validation_loss();
      if (a.stop_on_divergence && !std::isfinite(val)) {
        r.diverged = true;
        break;
      }
      r.evals.push_back({step + 1, window_loss / double(window), val, r.optimizer_s, r.fwd_bwd_s});
      r.final_val = val;
      r.best_val = std::min(r.best_val, val);
      r.final_train = window_loss / double(window);
      window_loss = 0;
      window = 0;
    }
    progress.update(step + 1, l);
  }
  progress.finish();
  r.steps_run = r.diverged ? step + 1 : a.steps;
  for (const auto& item : model->named_parameters()) {
    r.params += item.value().numel();
    if (mopt != nullptr && mopt->route(item.key()) == matopt::Route::Matrix) r.matrix_params += item.value().numel();
  }
  if (g_dist.comm) {
    const matopt::CommCounters t = g_dist.comm->counters() - traffic0;
    r.ranks = g_dist.size;
    r.allreduce_bytes = double(t.bytes_of(matopt::CommKind::AllReduce)) / double(r.steps_run);
    r.allgather_bytes = double(t.bytes_of(matopt::CommKind::AllGather)) / double(r.steps_run);
    g_dist.comm->all_reduce(&r.allgather_bytes, 1);
  }
  if (r.diverged) r.final_val = std::numeric_limits<double>::quiet_NaN();
  if (r.best_val == 1e300) r.best_val = std::numeric_limits<double>::quiet_NaN();
  return r;
}

// ---------------------------------------------------------------------------------------------------
// Output

void write_run(const std::filesystem::path& dir, const RunResult& r) {
  if (!r.plans.empty()) {  // the NS work at the last sample, summed over the hidden matrices
    std::int64_t work = 0, muon = 0, last = r.plans.back().step;
    for (const auto& p : r.plans)
      if (p.step == last) work += p.ns_work, muon += 5 * p.calls;
    std::printf("%s: %lld Newton-Schulz iterations in %lld steps, Muon's 5 per step: %lld (%.1f%%)\n",
                r.optimizer.c_str(), static_cast<long long>(work), static_cast<long long>(last),
                static_cast<long long>(muon), 100.0 * double(work) / double(muon));
  }
  const std::string tag = r.optimizer;
  std::ofstream e(dir / ("eval_" + tag + ".csv"));
  e << "step,train_loss,val_loss,optimizer_seconds,fwd_bwd_seconds\n";
  for (const auto& p : r.evals)
    e << p.step << ',' << p.train_loss << ',' << p.val_loss << ',' << p.optimizer_s << ',' << p.fwd_bwd_s << '\n';
  std::ofstream dm(dir / ("dominance_" + tag + ".csv"));
  dm << "step,layer_type,r_min,r_avg,r_max\n";
  for (const auto& p : r.dominance) dm << p.step << ',' << p.type << ',' << p.r_min << ',' << p.r_avg << ',' << p.r_max << '\n';
  // One wide file per layer type for the plots: step, r_min, r_avg, r_max.
  for (const auto& t : kTypes) {
    std::ofstream f(dir / ("dominance_" + tag + "_" + t + ".csv"));
    f << "step,r_min,r_avg,r_max\n";
    for (const auto& p : r.dominance)
      if (p.type == t) f << p.step << ',' << p.r_min << ',' << p.r_avg << ',' << p.r_max << '\n';
  }
  std::ofstream s(dir / ("spectrum_" + tag + ".csv"));
  s << "step,name,layer,layer_type";
  for (double q : kQuantiles) s << ",q" << int(std::lround(q * 100));
  s << '\n';
  for (const auto& p : r.spectrum) {
    s << p.step << ',' << p.name << ',' << p.layer << ',' << p.type;
    for (double q : p.q) s << ',' << q;
    s << '\n';
  }
}

/// muon_auto's plans: per sample and hidden matrix, the planned NS steps, the quantile they were planned for, and
/// the NS iterations run so far against Muon's 5 per step.
void write_plans(const std::filesystem::path& dir, const RunResult& r) {
  if (r.plans.empty()) return;
  std::ofstream f(dir / ("ns_plan_" + r.optimizer + ".csv"));
  f << "step,name,layer_type,ns_steps,quantile,ns_work,muon_ns_work\n";
  for (const auto& p : r.plans)
    f << p.step << ',' << p.name << ',' << p.type << ',' << p.ns_steps << ',' << p.quantile << ',' << p.ns_work << ','
      << 5 * p.calls << '\n';
}

void write_summary(const std::filesystem::path& file, const std::vector<RunResult>& runs) {
  std::ofstream f(file);
  f << "optimizer,d_model,layers,steps,lr,final_val_loss,best_val_loss,final_train_loss,optimizer_seconds,"
       "fwd_bwd_seconds,r_min,r_avg,r_max\n";
  for (const auto& r : runs)
    f << r.optimizer << ',' << r.d_model << ',' << r.layers << ',' << r.steps << ',' << r.lr << ',' << r.final_val << ','
      << r.best_val << ',' << r.final_train << ',' << r.optimizer_s << ',' << r.fwd_bwd_s << ',' << r.r_min << ','
      << r.r_avg << ',' << r.r_max << '\n';
}

void print_table(const std::vector<RunResult>& runs) {
  std::printf("\n%-12s %7s %9s %10s %10s %11s %12s %10s %7s %7s %7s\n", "optimizer", "d_model", "lr", "val loss",
              "best val", "train loss", "optimizer s", "fwd/bwd s", "r_min", "r_avg", "r_max");
  for (const auto& r : runs)
    std::printf("%-12s %7lld %9.3g %10.4f %10.4f %11.4f %12.2f %10.2f %7.2f %7.2f %7.2f\n", r.optimizer.c_str(),
                static_cast<long long>(r.d_model), r.lr, r.final_val, r.best_val, r.final_train, r.optimizer_s,
                r.fwd_bwd_s, r.r_min, r.r_avg, r.r_max);
}

/// --ranks: per run, time per step and the collectives' payload per step against the parameter counts.
void write_data_parallel(const std::filesystem::path& file, const std::vector<RunResult>& runs) {
  std::ofstream f(file);
  f << "optimizer,ranks,steps,optimizer_s_per_step,fwd_bwd_s_per_step,params,matrix_params,"
       "allreduce_payload_bytes_per_rank,allgather_payload_bytes_all_ranks\n";
  std::printf("\ndata parallel, %d ranks (per step; payload as handed to the collectives):\n", runs.front().ranks);
  for (const auto& r : runs) {
    const double n = double(r.steps_run);
    f << r.optimizer << ',' << r.ranks << ',' << r.steps_run << ',' << r.optimizer_s / n << ',' << r.fwd_bwd_s / n << ','
      << r.params << ',' << r.matrix_params << ',' << std::llround(r.allreduce_bytes) << ','
      << std::llround(r.allgather_bytes) << '\n';
    std::printf("%-12s optimizer %.1f ms, fwd/bwd %.1f ms; all-reduce %.0f B per rank (4 x %lld parameters = %lld), "
                "all-gather %.0f B over all ranks (4 x %lld matrix elements = %lld)\n",
                r.optimizer.c_str(), 1e3 * r.optimizer_s / n, 1e3 * r.fwd_bwd_s / n, r.allreduce_bytes,
                static_cast<long long>(r.params), static_cast<long long>(4 * r.params), r.allgather_bytes,
                static_cast<long long>(r.matrix_params), static_cast<long long>(4 * r.matrix_params));
  }
}

bool have_gnuplot() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

void run_gnuplot(const std::filesystem::path& dir, const std::string& script) {
  if (!have_gnuplot()) {
    std::printf("gnuplot not on PATH: skipped the plots (run 'gnuplot %s' in %s later)\n", script.c_str(),
                dir.string().c_str());
    return;
  }
  const std::string cmd = "cd '" + dir.string() + "' && gnuplot " + script;
  if (std::system(cmd.c_str()) != 0)
    std::printf("gnuplot failed; the data and %s are in %s\n", script.c_str(), dir.string().c_str());
}

void write_plots(const std::filesystem::path& dir, const std::vector<RunResult>& runs, const std::string& title) {
  std::ofstream f(dir / "plots.gp");
  f << "# written by gpt; run inside this directory: gnuplot plots.gp\n"
       "set datafile separator ','\nset key outside right\nset grid\nset termoption noenhanced\n"
       "set terminal pngcairo size 900,520 font ',10' noenhanced\n";
  auto curves = [&](const std::string& using_) {
    std::string s;
    for (std::size_t i = 0; i < runs.size(); ++i)
      s += (i ? ", \\\n  " : "plot ") + ("'eval_" + runs[i].optimizer + ".csv' every ::1 using " + using_ +
                                          " with linespoints title '" + runs[i].optimizer + "' lc " +
                                          std::to_string(i + 1));
    return s + "\n";
  };
  f << "set output 'val_loss.png'\nset title 'validation loss vs step (" << title
    << ")'\nset xlabel 'step'\nset ylabel 'validation loss (nats/byte)'\n"
    << curves("1:3");
  f << "set output 'val_loss_time.png'\nset title 'validation loss vs optimizer time (" << title
    << ")'\nset xlabel 'optimizer seconds'\nset logscale x\n"
    << curves("4:3") << "unset logscale x\n";
  for (const auto& r : runs) {
    if (r.dominance.empty()) continue;
    f << "set output 'dominance_" << r.optimizer << ".png'\nset terminal pngcairo size 1200,420 font ',10' noenhanced\n"
      << "set multiplot layout 1,3 title 'diagonal dominance of U U^T per layer type, " << r.optimizer << " ("
      << title << ")'\nset xlabel 'step'\n";
    for (const auto& [col, label] : {std::pair{2, "r_min"}, std::pair{3, "r_avg"}, std::pair{4, "r_max"}}) {
      f << "set title '" << label << "'\nset ylabel '" << label << "'\nplot ";
      for (std::size_t i = 0; i < kTypes.size(); ++i)
        f << (i ? ", " : "") << "'dominance_" << r.optimizer << "_" << kTypes[i] << ".csv' every ::1 using 1:" << col
          << " with lines title '" << kTypes[i] << "' lc " << i + 1;
      f << ", 1 with lines dt 2 lc black notitle\n";
    }
    f << "unset multiplot\nset terminal pngcairo size 900,520 font ',10' noenhanced\n";
  }
}

void write_sweep(const std::filesystem::path& dir, const std::vector<std::vector<RunResult>>& rows) {
  std::ofstream c(dir / "sweep.csv");
  c << "d_model,optimizer,final_val_loss,r_min,r_avg,r_max,optimizer_seconds\n";
  std::ofstream g(dir / "sweep_gap.csv");
  g << "d_model,rmnp_minus_muon_val_loss,muon_r_avg,rmnp_r_avg\n";
  for (const auto& runs : rows) {
    const RunResult *muon = nullptr, *rmnp = nullptr;
    for (const auto& r : runs) {
      c << r.d_model << ',' << r.optimizer << ',' << r.final_val << ',' << r.r_min << ',' << r.r_avg << ',' << r.r_max
        << ',' << r.optimizer_s << '\n';
      if (r.optimizer == "muon") muon = &r;
      if (r.optimizer == "rmnp") rmnp = &r;
    }
    if (muon && rmnp)
      g << muon->d_model << ',' << rmnp->final_val - muon->final_val << ',' << muon->r_avg << ',' << rmnp->r_avg << '\n';
  }
  std::ofstream f(dir / "sweep.gp");
  f << "# written by gpt --sweep; run inside this directory: gnuplot sweep.gp\n"
       "set datafile separator ','\nset grid\nset terminal pngcairo size 1000,420 font ',10' noenhanced\n"
       "set output 'sweep.png'\nset multiplot layout 1,2\nset logscale x 2\nset xlabel 'd_model'\n"
       "set title 'mean r_avg of U U^T (all hidden matrices, end of training)'\n"
       "plot 'sweep_gap.csv' every ::1 using 1:3 with linespoints title 'muon', '' every ::1 using 1:4 with "
       "linespoints title 'rmnp', 1 with lines dt 2 lc black notitle\n"
       "set title 'RMNP - Muon final validation loss'\nplot 'sweep_gap.csv' every ::1 using 1:2 with linespoints "
       "title 'gap', 0 with lines dt 2 lc black notitle\nunset multiplot\n";
}

// ---------------------------------------------------------------------------------------------------
// The lr grid (--lr-grid): every (width, name, lr) from the same weights and batches; a row of lr_transfer.csv per
// run, appended as the run ends, so a killed grid resumes; a run already in the file is skipped.

namespace fs = std::filesystem;

const char* const kGridColumns =
    "width,optimizer,lr_rule,lr,final_val_loss,best_val_loss,diverged,steps_run,seconds,options";

/// A label's --option entries as text, key=value joined by ';' (sorted by key).
std::string options_text(const Args& a, const std::string& label) {
  std::string s;
  if (auto it = a.options.find(label); it != a.options.end())
    for (const auto& [key, value] : it->second) s += (s.empty() ? "" : ";") + key + "=" + value;
  return s;
}

/// The lr_rule column: the label's lr_rule (`preset` when not set), times its extra_scale_factor when set
/// (`sqrt_max*0.2`: Moonlight's 0.2·sqrt(max(m, n))); `none` for the AdamW baselines, which have no shape rule.
std::string lr_rule_of(const Args& a, const std::string& label) {
  const std::string name = base_of(label);
  if (name == "adamw" || name == "torch_adamw") return "none";
  std::string rule = "preset";
  if (auto it = a.options.find(label); it != a.options.end()) {
    if (auto r = it->second.find("lr_rule"); r != it->second.end()) rule = r->second;
    if (auto f = it->second.find("extra_scale_factor"); f != it->second.end()) rule += "*" + f->second;
  }
  return rule;
}

/// The settings every row of one lr_transfer.csv shares, its first line: a file written under other settings is
/// refused, not mixed in.
std::string grid_settings(const Args& a, std::size_t text_bytes) {
  std::ostringstream s;
  s << "# gpt --lr-grid: steps " << a.steps << ", warmup " << a.warmup << ", layers " << a.model.layers << ", heads "
    << a.model.heads << ", context " << a.model.context << ", batch " << a.batch << ", seed " << a.seed
    << ", eval-every " << a.eval_every << ", eval-batches " << a.eval_batches << ", adam-lr " << lr_text(a.adam_lr)
    << ", text " << text_bytes << " bytes";
  return s.str();
}

struct GridRow {
  std::int64_t width = 0;
  std::string optimizer, lr_rule, lr, options;  // lr as lr_text
  double final_val = 0, best_val = 0, seconds = 0;
  bool diverged = false;
  std::int64_t steps_run = 0;
};

std::string csv_quoted(const std::string& s) {
  if (s.find_first_of(",\"") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> f(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') f.back() += '"', ++i;
    else if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) f.emplace_back();
    else f.back() += c;
  }
  return f;
}

/// The rows of `file` (none when it does not exist). Throws std::runtime_error when its first line is not
/// `settings` (another --steps, --layers, ... or another text) or a row does not parse.
std::vector<GridRow> read_grid(const fs::path& file, const std::string& settings) {
  std::vector<GridRow> rows;
  std::ifstream in(file);
  if (!in) return rows;
  std::string line;
  std::getline(in, line);
  if (line != settings)
    throw std::runtime_error(file.string() + " was written under other settings:\n  file: " + line + "\n  now:  " +
                             settings + "\nrun with the file's settings, or give another --out");
  std::getline(in, line);
  if (line != kGridColumns) throw std::runtime_error(file.string() + ": second line is not the column header");
  for (int n = 3; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const auto f = csv_fields(line);
    if (f.size() != 10) throw std::runtime_error(file.string() + ":" + std::to_string(n) + ": not 10 fields");
    GridRow r;
    try {
      r.width = std::stoll(f[0]);
      r.final_val = std::stod(f[4]);
      r.best_val = std::stod(f[5]);
      r.steps_run = std::stoll(f[7]);
      r.seconds = std::stod(f[8]);
    } catch (const std::exception&) {
      throw std::runtime_error(file.string() + ":" + std::to_string(n) + ": a number does not parse");
    }
    r.optimizer = f[1];
    r.lr_rule = f[2];
    r.lr = f[3];
    r.diverged = f[6] == "1";
    r.options = f[9];
    rows.push_back(r);
  }
  return rows;
}

/// Appends `r` to `file` (created with the settings line and the header), flushed and closed at once.
void append_grid(const fs::path& file, const std::string& settings, const GridRow& r) {
  bool fresh = !fs::exists(file), newline = false;
  if (!fresh) {  // a file cut inside a row: start the new row on a line of its own
    std::ifstream in(file, std::ios::binary | std::ios::ate);
    if (in.tellg() > 0) {
      in.seekg(-1, std::ios::end);
      newline = in.get() != '\n';
    }
  }
  std::ofstream f(file, std::ios::app);
  if (fresh) f << settings << '\n' << kGridColumns << '\n';
  if (newline) f << '\n';
  char loss[80];
  std::snprintf(loss, sizeof loss, "%.6f,%.6f,%d,%lld,%.2f", r.final_val, r.best_val, r.diverged ? 1 : 0,
                static_cast<long long>(r.steps_run), r.seconds);
  f << r.width << ',' << csv_quoted(r.optimizer) << ',' << csv_quoted(r.lr_rule) << ',' << r.lr << ',' << loss << ','
    << csv_quoted(r.options) << '\n';
  f.flush();
  if (!f) throw std::runtime_error("cannot append to " + file.string());
}

std::string duration_text(double s) {
  char b[32];
  if (s >= 3600) std::snprintf(b, sizeof b, "%dh%02dm", int(s / 3600), int(std::fmod(s, 3600) / 60));
  else if (s >= 60) std::snprintf(b, sizeof b, "%dm%02ds", int(s / 60), int(std::fmod(s, 60)));
  else std::snprintf(b, sizeof b, "%.1fs", s);
  return b;
}

/// A full run's seconds at `width`, from the rows' times (a diverged run's scaled to the full steps): their mean at
/// that width, else the mean of all rows scaled by (width / their width)^2; negative when there is no row.
double run_seconds(const std::vector<GridRow>& rows, std::int64_t width, std::int64_t steps) {
  double same = 0, any = 0;
  int n_same = 0, n_any = 0;
  for (const auto& r : rows) {
    if (r.steps_run <= 0) continue;
    const double full = r.seconds * double(steps) / double(r.steps_run);
    if (r.width == width) same += full, ++n_same;
    any += full * std::pow(double(width) / double(r.width), 2.0), ++n_any;
  }
  return n_same > 0 ? same / n_same : n_any > 0 ? any / n_any : -1.0;
}

/// Per name and width: the lr of the lowest final validation loss, whether it is the grid's smallest or largest lr
/// there (then the optimum may lie outside), and what the smallest width's best lr costs at this width.
struct GridBest {
  std::string optimizer, lr_rule;
  std::int64_t width = 0;
  std::string best_lr, base_lr;  // base_lr: the best lr at the smallest width
  double best_val = std::numeric_limits<double>::quiet_NaN(), base_val = std::numeric_limits<double>::quiet_NaN();
  bool at_edge = false, base_diverged = false;
  int runs = 0, diverged = 0;
};

std::vector<std::string> grid_names(const std::vector<GridRow>& rows, const std::vector<std::string>& first) {
  std::vector<std::string> names = first;
  for (const auto& r : rows)
    if (std::find(names.begin(), names.end(), r.optimizer) == names.end()) names.push_back(r.optimizer);
  return names;
}

std::vector<std::int64_t> grid_widths(const std::vector<GridRow>& rows) {
  std::vector<std::int64_t> w;
  for (const auto& r : rows) w.push_back(r.width);
  std::sort(w.begin(), w.end());
  w.erase(std::unique(w.begin(), w.end()), w.end());
  return w;
}

std::vector<GridBest> grid_best(const std::vector<GridRow>& rows, const std::vector<std::string>& names) {
  std::vector<GridBest> out;
  for (const auto& name : names) {
    std::string base_lr;
    for (auto w : grid_widths(rows)) {
      GridBest b;
      b.optimizer = name;
      b.width = w;
      double lo = 1e300, hi = 0;
      for (const auto& r : rows) {
        if (r.optimizer != name || r.width != w) continue;
        b.lr_rule = r.lr_rule;
        ++b.runs;
        b.diverged += r.diverged ? 1 : 0;
        const double lr = std::stod(r.lr);
        lo = std::min(lo, lr), hi = std::max(hi, lr);
        if (!r.diverged && !(r.final_val >= b.best_val)) b.best_val = r.final_val, b.best_lr = r.lr;
      }
      if (b.runs == 0) continue;
      if (!b.best_lr.empty()) {
        const double best = std::stod(b.best_lr);
        b.at_edge = b.runs > 1 && (best == lo || best == hi);
        if (base_lr.empty()) base_lr = b.best_lr;
      }
      b.base_lr = base_lr;
      for (const auto& r : rows)
        if (r.optimizer == name && r.width == w && r.lr == base_lr)
          b.base_val = r.final_val, b.base_diverged = r.diverged;
      out.push_back(b);
    }
  }
  return out;
}

void write_grid_summary(const fs::path& dir, const std::vector<GridBest>& best) {
  std::ofstream f(dir / "lr_transfer_summary.csv");
  f << "optimizer,lr_rule,width,best_lr,best_final_val_loss,at_edge,runs,diverged,smallest_width_best_lr,"
       "final_val_loss_at_it,cost\n";
  std::printf("\n%-18s %-16s %6s %9s %10s %5s %12s %10s %8s\n", "optimizer", "lr_rule", "width", "best lr", "val loss",
              "edge", "small's lr", "val there", "cost");
  for (const auto& b : best) {
    const bool have = !b.base_lr.empty() && !std::isnan(b.base_val) && !std::isnan(b.best_val);
    char cost[32] = "", there[32] = "";
    if (have) std::snprintf(cost, sizeof cost, "%.4f", b.base_val - b.best_val);
    if (have) std::snprintf(there, sizeof there, "%.4f", b.base_val);
    if (b.base_diverged) std::snprintf(there, sizeof there, "diverged");
    f << csv_quoted(b.optimizer) << ',' << csv_quoted(b.lr_rule) << ',' << b.width << ',' << b.best_lr << ',';
    if (!b.best_lr.empty()) f << b.best_val;
    f << ',' << (b.at_edge ? 1 : 0) << ',' << b.runs << ',' << b.diverged << ',' << b.base_lr << ',' << there << ','
      << cost << '\n';
    std::printf("%-18s %-16s %6lld %9s %10.4f %5s %12s %10s %8s\n", b.optimizer.c_str(), b.lr_rule.c_str(),
                static_cast<long long>(b.width), b.best_lr.empty() ? "-" : b.best_lr.c_str(), b.best_val,
                b.at_edge ? "yes" : "", b.base_lr.empty() ? "-" : b.base_lr.c_str(), there, cost);
  }
}

/// lr_transfer_curves.dat (one block per name and width: lr, final validation loss of the runs that did not
/// diverge, sorted by lr) and lr_transfer.gp: one panel per name, one curve per width, log2 lr axis.
void write_grid_plot(const fs::path& dir, const std::vector<GridRow>& rows, const std::vector<std::string>& names,
                     const std::string& title) {
  std::ofstream dat(dir / "lr_transfer_curves.dat");
  std::ofstream g(dir / "lr_transfer.gp");
  const auto widths = grid_widths(rows);
  const std::size_t cols = std::min<std::size_t>(4, std::max<std::size_t>(1, names.size()));
  const std::size_t lines = (names.size() + cols - 1) / cols;
  g << "# written by gpt --lr-grid; run inside this directory: gnuplot lr_transfer.gp\n"
       "set terminal pngcairo size "
    << 420 * cols << ',' << 340 * lines + 40
    << " font ',9' noenhanced\nset output 'lr_transfer.png'\nset grid\nset logscale x 2\nset format x '%g'\n"
       "set xlabel 'lr'\nset ylabel 'final validation loss'\nset key top center\nset xtics rotate by -45\n"
       "set multiplot layout "
    << lines << ',' << cols << " title 'final validation loss against lr, one curve per d_model (" << title << ")'\n";
  int block = 0;
  for (const auto& name : names) {
    std::string rule, plot;
    double lo = 1e300, hi = -1e300;
    std::vector<double> lrs;  // every lr run, the diverged too: the x tics
    int diverged = 0;
    for (std::size_t wi = 0; wi < widths.size(); ++wi) {
      std::vector<std::pair<double, double>> pts;
      for (const auto& r : rows)
        if (r.optimizer == name && r.width == widths[wi]) {
          rule = r.lr_rule;
          lrs.push_back(std::stod(r.lr));
          diverged += r.diverged ? 1 : 0;
          if (!r.diverged && std::isfinite(r.final_val)) pts.emplace_back(std::stod(r.lr), r.final_val);
        }
      if (pts.empty()) continue;
      std::sort(pts.begin(), pts.end());
      dat << "# " << name << " d_model " << widths[wi] << '\n';
      for (const auto& [lr, v] : pts) {
        dat << lr_text(lr) << ' ' << v << '\n';
        lo = std::min(lo, v), hi = std::max(hi, v);
      }
      dat << "\n\n";
      plot += std::string(plot.empty() ? "plot " : ", ") + "'lr_transfer_curves.dat' index " + std::to_string(block++) +
              " using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc " + std::to_string(wi + 1) + " title 'd_model " +
              std::to_string(widths[wi]) + "'";
    }
    if (lrs.empty()) continue;
    std::sort(lrs.begin(), lrs.end());
    lrs.erase(std::unique(lrs.begin(), lrs.end()), lrs.end());
    g << "set title '" << name << " (lr_rule " << rule;
    if (diverged > 0) g << "; " << diverged << " diverged, not drawn";
    g << ")'\nset xtics (";
    for (std::size_t i = 0; i < lrs.size(); ++i) g << (i ? ", " : "") << '\'' << lr_text(lrs[i]) << "' " << lrs[i];
    g << ")\nset xrange [" << lrs.front() / 1.3 << ':' << lrs.back() * 1.3 << "]\n";
    if (plot.empty()) {  // every run of this name diverged: an empty panel keeps the layout
      g << "unset key\nset yrange [0:1]\nplot 2 notitle\nset key top center\n";
      continue;
    }
    // up to 1 nat/byte above the best (a far-off lr would flatten the rest), and a third more on top for the key
    const double span = std::min(hi, lo + 1.0) - lo;
    g << "set yrange [" << lo - 0.05 * span - 0.005 << ':' << lo + 1.4 * span + 0.005 << "]\n" << plot << '\n';
  }
  g << "unset multiplot\n";
}

int run_grid(Args a, const Data& d, std::size_t text_bytes, const fs::path& out) {
  a.stop_on_divergence = true;
  a.dominance_every = a.steps + 1;  // no dominance or spectrum samples: only the losses are kept
  const std::vector<std::int64_t> widths = a.sweep.empty() ? std::vector<std::int64_t>{a.model.d_model} : a.sweep;
  const fs::path file = out / "lr_transfer.csv";
  const std::string settings = grid_settings(a, text_bytes);
  std::vector<GridRow> rows = read_grid(file, settings);
  std::vector<std::string> names;
  for (const auto& g : a.grid) {
    names.push_back(g.label);
    for (const auto& r : rows)
      if (r.optimizer == g.label && (r.options != options_text(a, g.label) || r.lr_rule != lr_rule_of(a, g.label)))
        throw std::runtime_error(file.string() + " has '" + g.label + "' with options '" + r.options +
                                 "'; now they are '" + options_text(a, g.label) + "': give this configuration another "
                                 "label (name@tag)");
  }
  struct Todo {
    std::int64_t width;
    std::string label;
    double lr;
  };
  std::vector<Todo> todo;
  std::size_t total = 0;
  for (auto w : widths)
    for (const auto& g : a.grid)
      for (double lr : g.lrs) {
        ++total;
        const bool done = std::any_of(rows.begin(), rows.end(), [&](const GridRow& r) {
          return r.width == w && r.optimizer == g.label && r.lr_rule == lr_rule_of(a, g.label) && r.lr == lr_text(lr);
        });
        if (!done) todo.push_back({w, g.label, lr});
      }
  std::printf("lr grid: %zu runs (%zu widths), %zu already in %s, %zu to run; %lld layers, %lld steps (warm-up %lld) "
              "each\n",
              total, widths.size(), total - todo.size(), file.string().c_str(), todo.size(),
              static_cast<long long>(a.model.layers), static_cast<long long>(a.steps),
              static_cast<long long>(a.warmup));
  std::fflush(stdout);
  for (std::size_t k = 0; k < todo.size(); ++k) {
    const auto& t = todo[k];
    gpt::GptConfig cfg = a.model;
    cfg.d_model = t.width;
    const auto t0 = Clock::now();
    const RunResult r = train(t.label, t.lr, cfg, d, a);
    GridRow row;
    row.width = t.width;
    row.optimizer = t.label;
    row.lr_rule = lr_rule_of(a, t.label);
    row.lr = lr_text(t.lr);
    row.options = options_text(a, t.label);
    row.final_val = r.final_val;
    row.best_val = r.best_val;
    row.diverged = r.diverged;
    row.steps_run = r.steps_run;
    row.seconds = seconds_since(t0);
    append_grid(file, settings, row);
    rows.push_back(row);
    double eta = 0;
    for (std::size_t j = k + 1; j < todo.size(); ++j) eta += run_seconds(rows, todo[j].width, a.steps);
    char outcome[96];
    if (r.diverged)
      std::snprintf(outcome, sizeof outcome, "diverged at step %lld", static_cast<long long>(r.steps_run));
    else
      std::snprintf(outcome, sizeof outcome, "final %.4f, best %.4f", r.final_val, r.best_val);
    std::fprintf(stderr, "[%zu/%zu] width %lld optimizer %s lr %s: %s, %s, eta %s\n", k + 1, todo.size(),
                 static_cast<long long>(t.width), t.label.c_str(), row.lr.c_str(), outcome,
                 duration_text(row.seconds).c_str(), duration_text(eta).c_str());
  }
  names = grid_names(rows, names);
  write_grid_summary(out, grid_best(rows, names));
  write_grid_plot(out, rows, names,
                  std::to_string(a.model.layers) + " layers, " + std::to_string(a.steps) + " steps, seed " +
                      std::to_string(a.seed));
  run_gnuplot(out, "lr_transfer.gp");
  std::printf("lr_transfer.csv (%zu new rows, %zu in all), lr_transfer_summary.csv, lr_transfer.png in %s\n",
              todo.size(), rows.size(), out.string().c_str());
  return 0;
}

int run(Args a) {
  const examples::Threads threads = examples::set_threads(a.threads);
  const std::string dir = a.data.empty() ? gpt::default_fortunes_dir() : a.data;
  gpt::Corpus corpus;
  try {
    corpus = gpt::load_corpus(dir);
  } catch (const std::runtime_error& e) {
    std::printf("%s; skipped\n", e.what());
    return 77;
  }
  Data d{bytes_tensor(corpus.train()), bytes_tensor(corpus.validation())};
  std::printf("matopt %s, libtorch %s; threads: libtorch %d, matopt (OpenMP) %d\n", matopt::version(), TORCH_VERSION,
              threads.torch, threads.openmp);
  std::printf("text: %zu files from %s, %zu bytes (%lld training, %lld validation)\n", corpus.files.size(),
              dir.c_str(), corpus.text.size(), static_cast<long long>(d.train.size(0)),
              static_cast<long long>(d.val.size(0)));
  const std::filesystem::path out(a.out);
  std::filesystem::create_directories(out);
  if (!a.grid.empty()) return run_grid(a, d, corpus.text.size(), out);
#if defined(MATOPT_GPT_C10D)
  // --ranks: this process is one rank of a Gloo group (started by main's launcher).
  std::unique_ptr<matopt::C10dCommunicator> comm;
  if (a.ranks > 1) {
    g_dist.rank = std::atoi(std::getenv("MATOPT_GPT_RANK"));
    g_dist.size = a.ranks;
    comm = std::make_unique<matopt::C10dCommunicator>(
        matopt::make_gloo_group((out / "c10d_store").string(), g_dist.rank, g_dist.size));
    g_dist.comm = comm.get();
    std::printf("data parallel: rank %d of %d (c10d %s), %lld sequences of each batch of %lld\n", g_dist.rank,
                g_dist.size, comm->group().getBackendName().c_str(), static_cast<long long>(a.batch / a.ranks),
                static_cast<long long>(a.batch));
  }
#endif

  auto run_all = [&](const gpt::GptConfig& cfg, const std::vector<std::string>& names,
                     const std::filesystem::path& where) {
    std::filesystem::create_directories(where);
    std::printf("model: d_model %lld, %lld layers, %lld heads, context %lld; batch %lld, %lld steps (warm-up %lld), "
                "seed %llu\n",
                static_cast<long long>(cfg.d_model), static_cast<long long>(cfg.layers),
                static_cast<long long>(cfg.heads), static_cast<long long>(cfg.context),
                static_cast<long long>(a.batch), static_cast<long long>(a.steps), static_cast<long long>(a.warmup),
                static_cast<unsigned long long>(a.seed));
    std::vector<RunResult> runs;
    const bool writer = g_dist.rank == 0;  // --ranks: rank 0 writes the outputs
    for (const auto& name : names) {
      runs.push_back(train(name, lr_of(a, name), cfg, d, a));
      if (!writer) continue;
      write_run(where, runs.back());
      write_plans(where, runs.back());
    }
    if (!writer) return runs;
    write_summary(where / "summary.csv", runs);
    print_table(runs);
    if (g_dist.size > 1) write_data_parallel(where / "data_parallel.csv", runs);
    const std::string title = "d_model " + std::to_string(cfg.d_model) + ", " + std::to_string(cfg.layers) +
                              " layers, " + std::to_string(a.steps) + " steps";
    write_plots(where, runs, title);
    run_gnuplot(where, "plots.gp");
    return runs;
  };

  if (a.sweep.empty()) {
    run_all(a.model, a.optimizers, out);
    if (g_dist.rank == 0) std::printf("CSV files and plots in %s\n", out.string().c_str());
    return 0;
  }
  std::vector<std::vector<RunResult>> rows;
  for (auto w : a.sweep) {
    gpt::GptConfig cfg = a.model;
    cfg.d_model = w;
    rows.push_back(run_all(cfg, a.optimizers, out / ("d_model_" + std::to_string(w))));
  }
  if (g_dist.rank != 0) return 0;
  write_sweep(out, rows);
  run_gnuplot(out, "sweep.gp");
  std::printf("sweep.csv, sweep_gap.csv, sweep.png in %s (each width's runs in d_model_*/)\n", out.string().c_str());
  return 0;
}

}  // namespace

#if defined(MATOPT_GPT_C10D)
/// --ranks N: starts N copies of this program as ranks 0..N-1 (environment MATOPT_GPT_RANK), the others' console
/// output in --out/rank<r>.log; returns the first non-zero exit status, or 0.
int launch(const Args& a, char** argv) {
  const std::filesystem::path out(a.out);
  std::filesystem::create_directories(out);
  std::filesystem::remove(out / "c10d_store");  // a FileStore left by an interrupted run would confuse the new group
  std::vector<pid_t> pids;
  for (int r = 0; r < a.ranks; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("gpt: fork");
      return 2;
    }
    if (pid == 0) {
      setenv("MATOPT_GPT_RANK", std::to_string(r).c_str(), 1);
      if (r != 0) {
        const std::string log = (out / ("rank" + std::to_string(r) + ".log")).string();
        if (std::freopen(log.c_str(), "w", stdout) == nullptr) std::_Exit(2);
      }
      execv("/proc/self/exe", argv);
      std::perror("gpt: execv");
      std::_Exit(127);
    }
    pids.push_back(pid);
  }
  int result = 0;
  for (int r = 0; r < a.ranks; ++r) {
    int status = 0;
    waitpid(pids[std::size_t(r)], &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0) std::fprintf(stderr, "gpt: rank %d exited with status %d\n", r, code);
    if (result == 0) result = code;
  }
  return result;
}
#endif

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
#if defined(MATOPT_GPT_C10D)
  if (args.ranks > 1 && std::getenv("MATOPT_GPT_RANK") == nullptr) return launch(args, argv);
#endif
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt: %s\n", e.what());
    return 2;
  }
}

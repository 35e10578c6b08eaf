// SPDX-License-Identifier: MIT
// A byte-level GPT (examples/gpt/model.hpp) trained on the text of Debian's `fortunes` package with each
// optimizer from the same initial weights and the same batch sequence. The matrix optimizers (Muon, RMNP,
// ColNorm, OrScale) run through matopt::TorchOptimizer (hidden matrices; embeddings, head and vectors on
// AdamW); `adamw` is matopt's AdamW on every parameter, `torch_adamw` libtorch's torch::optim::AdamW on every
// parameter. Measured along the way: validation loss against steps and against optimizer time, the diagonal
// dominance r_min/avg/max of U U^T per layer type (q, k, v, o, fc, proj; spec §6: U is what the optimizer
// preconditions; for the AdamW runs a side momentum buffer V = 0.95 V + G), and the singular-value
// quantiles of U / ||U||_F per matrix (seed 001). docs/gpt.md has the measured results and their reading.
//
//   gpt [--optimizers a,b,...] [--steps N] [--d-model N] [--layers N] [--heads N] [--context N] [--batch N]
//       [--lr name=value]... [--option name:key=value]... [--adam-lr X] [--seed N] [--threads N]
//       [--eval-every N] [--dominance-every N]
//       [--eval-batches N] [--warmup N] [--sweep 64,128,256] [--quick] [--out DIR] [--data DIR]
//
// Exit status: 0; 2 on bad arguments or an error; 77 when the fortunes text is missing (CTest: skipped).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include <torch/torch.h>

#include <matopt/diagnostics.hpp>
#include <matopt/integration/libtorch.hpp>

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
  std::string out = "gpt_out";
  std::string data;
};

// The matrix route's lr: each preset's default (KellerJordan/Muon's 0.02 for Muon, OrScale; 0.02 for RMNP and
// ColNorm, matopt's presets; the reference codes' 0.02 for NorMuon, AdaMuon, PolarGrad, Turbo-Muon; 0.01 for
// Dion; 1e-3 for NAMO, whose update has an AdamW-like RMS), unless --lr name=value says otherwise; --adam-lr
// for the AdamW baselines.
double lr_of(const Args& a, const std::string& name) {
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
               "           [--warmup N] [--sweep 64,128,256] [--quick] [--out DIR] [--data DIR]\n",
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
       dom_given = false, evalb_given = false;
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
      for (const auto& o : a.optimizers)
        if (std::find(kKnown.begin(), kKnown.end(), o) == kKnown.end())
          usage("unknown optimizer '" + o +
                "' (known: muon, muon_auto, rmnp, colnorm, orscale, normuon, adamuon, namo, polargrad, turbo_muon, dion, "
                "adamw, torch_adamw)");
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
      if (std::find(kKnown.begin(), kKnown.end(), name) == kKnown.end()) usage("--lr: unknown optimizer '" + name + "'");
      a.lr[name] = real(value.substr(eq + 1));
    } else if (key == "--option") {
      const auto colon = value.find(':'), eq = value.find('=');
      if (colon == std::string::npos || eq == std::string::npos || eq < colon)
        usage("--option takes name:key=value (e.g. --option muon_auto:ns_plan_quantile=0.25)");
      const std::string name = value.substr(0, colon);
      if (std::find(kKnown.begin(), kKnown.end(), name) == kKnown.end() || name == "adamw" || name == "torch_adamw")
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
    } else if (key == "--out") a.out = value;
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
  if (a.model.d_model % a.model.heads != 0) usage("--d-model must be a multiple of --heads");
  for (auto w : a.sweep)
    if (w % a.model.heads != 0) usage("--sweep: width " + std::to_string(w) + " is not a multiple of --heads");
  if (a.warmup < 0) a.warmup = std::max<std::int64_t>(1, a.steps / 20);
  if (a.warmup >= a.steps) usage("--warmup must be below --steps");
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
  double lr = 0, final_val = 0, best_val = 1e300, final_train = 0, optimizer_s = 0, fwd_bwd_s = 0;
  double r_min = 0, r_avg = 0, r_max = 0;
  std::vector<EvalPoint> evals;
  std::vector<DominancePoint> dominance;
  std::vector<SpectrumPoint> spectrum;
  std::vector<PlanPoint> plans;  // muon_auto: each hidden matrix's NS plan at every --dominance-every sample
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

RunResult train(const std::string& name, double lr, const gpt::GptConfig& cfg, const Data& d, const Args& a) {
  RunResult r;
  r.optimizer = name;
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
  const std::string adam_lr = std::to_string(a.adam_lr);
  if (name == "torch_adamw") {
    opt = std::make_unique<torch::optim::AdamW>(
        model->parameters(), torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(0));
  } else if (name == "adamw") {  // matopt's AdamW on every parameter: one explicit group routed to AdamW
    std::vector<matopt::TorchParamGroup> groups(1);
    for (const auto& item : model->named_parameters()) groups[0].params.emplace_back(item.key(), item.value());
    groups[0].route = matopt::Route::AdamW;
    matopt::TorchOptions o;
    o.adamw = {{"lr", std::to_string(lr)}, {"beta2", "0.95"}};
    auto p = std::make_unique<matopt::TorchOptimizer>(groups, "muon", matopt::Config{}, o);
    mopt = p.get();
    opt = std::move(p);
  } else {
    matopt::TorchOptions o;
    o.adamw = {{"lr", adam_lr}, {"beta2", "0.95"}};
    matopt::Config config{{"lr", std::to_string(lr)}};
    if (name == "muon_auto") config["ns_steps"] = "auto";
    if (auto it = a.options.find(name); it != a.options.end())
      for (const auto& [key, value] : it->second) config[key] = value;
    auto_steps = config.count("ns_steps") != 0 && config["ns_steps"] == "auto";
    auto p = std::make_unique<matopt::TorchOptimizer>(model->named_parameters(), name == "muon_auto" ? "muon" : name,
                                                      config, o);
    mopt = p.get();
    opt = std::move(p);
  }
  std::vector<double> base_lr;
  for (const auto& g : opt->param_groups()) base_lr.push_back(g.options().get_lr());

  // Diagnostics: the matrix optimizers report U through telemetry every dominance_every steps; the AdamW runs
  // keep a side momentum buffer per hidden matrix.
  Diagnostics diag;
  double diagnostics_s = 0;  // spent in the telemetry callback: not optimizer time
  std::int64_t step = 0;
  if (matrix)
    mopt->hybrid<float>().set_telemetry(int(a.dominance_every), [&](const std::string& pname, const matopt::StepReport<float>& rep) {
      const auto t0 = Clock::now();
      diag.add(r, rep.step, pname, rep.direction.data, rep.rows, rep.cols);
      diagnostics_s += seconds_since(t0);
    });
  std::vector<std::pair<std::string, torch::Tensor>> hidden;  // side momentum buffers (AdamW runs)
  std::vector<torch::Tensor> side;
  if (!matrix)
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

  Progress progress(name + " " + std::to_string(cfg.d_model), a.steps);
  double window_loss = 0;
  std::int64_t window = 0;
  for (step = 0; step < a.steps; ++step) {
    std::vector<std::int64_t> o(std::size_t(a.batch));
    for (auto& v : o) v = offset(rng);
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
    const double l = loss.item<double>();
    window_loss += l;
    ++window;
    const bool sample = (step + 1) % a.dominance_every == 0;
    if (!matrix) {
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
    for (const auto& name : names) {
      runs.push_back(train(name, lr_of(a, name), cfg, d, a));
      write_run(where, runs.back());
      write_plans(where, runs.back());
    }
    write_summary(where / "summary.csv", runs);
    print_table(runs);
    const std::string title = "d_model " + std::to_string(cfg.d_model) + ", " + std::to_string(cfg.layers) +
                              " layers, " + std::to_string(a.steps) + " steps";
    write_plots(where, runs, title);
    run_gnuplot(where, "plots.gp");
    return runs;
  };

  if (a.sweep.empty()) {
    run_all(a.model, a.optimizers, out);
    std::printf("CSV files and plots in %s\n", out.string().c_str());
    return 0;
  }
  std::vector<std::vector<RunResult>> rows;
  for (auto w : a.sweep) {
    gpt::GptConfig cfg = a.model;
    cfg.d_model = w;
    rows.push_back(run_all(cfg, a.optimizers, out / ("d_model_" + std::to_string(w))));
  }
  write_sweep(out, rows);
  run_gnuplot(out, "sweep.gp");
  std::printf("sweep.csv, sweep_gap.csv, sweep.png in %s (each width's runs in d_model_*/)\n", out.string().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt: %s\n", e.what());
    return 2;
  }
}

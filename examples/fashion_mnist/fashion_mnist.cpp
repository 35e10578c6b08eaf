// SPDX-License-Identifier: MIT
// Trains the same MLP on Fashion-MNIST with each matrix optimizer (through matopt::HybridOptimizer) and
// with AdamW alone, from the same initial weights, and reports test accuracy, training loss, the time
// spent in the optimizer step apart from forward/backward, and the diagonal dominance of U U^T for every
// hidden layer over training (docs/math.md#diagnostics: when U U^T is diagonal, RMNP's row normalization equals Muon's
// orthogonalization). With --sweep it trains Muon and RMNP at several widths and reports the accuracy
// gap next to the dominance.
//
//   fashion_mnist [--hidden H] [--depth D] [--epochs N] [--batch B] [--seed S] [--limit N]
//                 [--optimizers muon,rmnp,colnorm,orscale,adamw] [--lr name=value,...] [--warmup F]
//                 [--adamw-route-lr LR] [--head adamw|matrix] [--dominance-every K] [--out DIR]
//                 [--sweep W1,W2,...] [--data DIR]
//
// Routing (the Muon convention, KellerJordan/Muon README; docs/math.md#presets): every weight matrix of a hidden layer,
// the first (784 -> H) included, goes to the matrix optimizer; the classifier (H -> 10) is the output
// head and goes to AdamW with every bias. The first layer is a dense layer on pixel values, not an
// embedding lookup, so it counts as hidden. "adamw" trains every parameter with AdamW.
//
// Schedule: linear warm-up over the first --warmup fraction of the steps (default 2%), then linear decay
// to 1/(steps - warm-up) of the base lr at the last step (set_lr refuses 0), one factor on both routes.
// Measured results and their reading: docs/fashion_mnist.md.
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <unistd.h>
#include <vector>

#include <matopt/matopt.hpp>

#include "../common/fashion_mnist.hpp"
#include "mlp.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using Mat = mlp::Mat<float>;
using Vec = mlp::Vec<float>;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// ---------------------------------------------------------------------------------------------------
// Command line

const char* const kKnown[] = {"muon",      "rmnp",       "colnorm", "orscale", "normuon", "adamuon",
                              "namo",      "polargrad",  "turbo_muon", "dion",  "adamw"};

// The matrix route's lr per optimizer: the presets' published 0.02 for Muon (KellerJordan/Muon) and OrScale;
// 0.01 for ColNorm and 0.005 for RMNP, where the PyTorch reference runs of this MLP did best (and RMNP did
// best here too, docs/fashion_mnist.md); PyTorch's AdamW defaults for "adamw" (lr 1e-3, betas 0.9/0.999,
// weight decay 0.01).
double default_lr(const std::string& name) {
  if (name == "colnorm") return 0.01;
  if (name == "rmnp") return 0.005;
  if (name == "adamw") return 1e-3;
  if (name == "namo") return 1e-3;  // the preset's (an AdamW-like update RMS)
  if (name == "dion") return 0.01;  // the preset's (dion's)
  return 0.02;
}

struct Args {
  int hidden = 512;
  int depth = 2;
  int epochs = 5;
  int batch = 128;
  std::uint64_t seed = 0;
  std::size_t limit = 0;
  std::vector<std::string> optimizers{"muon", "rmnp", "colnorm", "orscale", "adamw"};
  bool optimizers_given = false;
  std::map<std::string, double> lr;
  double warmup = 0.02;
  double route_lr = 3e-3;    // the AdamW route's lr in the matrix optimizers' runs (head and biases)
  bool head_to_adamw = true;  // --head adamw (the Muon convention) or --head matrix
  int dominance_every = 50;
  std::string out = "fashion_mnist_out";
  std::vector<int> sweep;
  std::string data = fmnist::default_dir();
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "fashion_mnist: %s\n"
               "usage: fashion_mnist [--hidden H] [--depth D] [--epochs N] [--batch B] [--seed S] [--limit N]\n"
               "                     [--optimizers muon,rmnp,colnorm,orscale,adamw (also normuon,adamuon,namo,polargrad,\n"
               "                                   turbo_muon,dion)]\n"
               "                     [--lr name=value,...]\n"
               "                     [--warmup F] [--adamw-route-lr LR] [--head adamw|matrix] [--dominance-every K]\n"
               "                     [--out DIR]"
" [--sweep W1,W2,...] [--data DIR]\n",
               why.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

long long parse_int(const std::string& flag, const std::string& text, long long min) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0) usage(flag + ": '" + text + "' is not an integer");
  if (v < min) usage(flag + " must be >= " + std::to_string(min) + " (got " + text + ")");
  return v;
}

double parse_double(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v)) usage(flag + ": '" + text + "' is not a number");
  return v;
}

bool known(const std::string& name) {
  return std::find(std::begin(kKnown), std::end(kKnown), name) != std::end(kKnown);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") usage("help");
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string v = argv[++i];
    if (flag == "--hidden") a.hidden = int(parse_int(flag, v, 1));
    else if (flag == "--depth") a.depth = int(parse_int(flag, v, 1));
    else if (flag == "--epochs") a.epochs = int(parse_int(flag, v, 1));
    else if (flag == "--batch") a.batch = int(parse_int(flag, v, 1));
    else if (flag == "--seed") a.seed = std::uint64_t(parse_int(flag, v, 0));
    else if (flag == "--limit") a.limit = std::size_t(parse_int(flag, v, 1));
    else if (flag == "--dominance-every") a.dominance_every = int(parse_int(flag, v, 1));
    else if (flag == "--out") a.out = v;
    else if (flag == "--data") a.data = v;
    else if (flag == "--head") {
      if (v != "adamw" && v != "matrix") usage("--head must be adamw or matrix (got '" + v + "')");
      a.head_to_adamw = v == "adamw";
    } else if (flag == "--adamw-route-lr") {
      a.route_lr = parse_double(flag, v);
      if (a.route_lr <= 0) usage("--adamw-route-lr must be > 0 (got " + v + ")");
    } else if (flag == "--warmup") {
      a.warmup = parse_double(flag, v);
      if (a.warmup < 0 || a.warmup >= 1) usage("--warmup must be in [0, 1) (got " + v + ")");
    } else if (flag == "--optimizers") {
      a.optimizers = split(v, ',');
      a.optimizers_given = true;
      if (a.optimizers.empty()) usage("--optimizers: empty list");
      for (const auto& o : a.optimizers)
        if (!known(o)) usage("--optimizers: unknown optimizer '" + o +
                    "' (known: muon, rmnp, colnorm, orscale, normuon, adamuon, namo, polargrad, turbo_muon, dion, "
                    "adamw)");
    } else if (flag == "--lr") {
      for (const auto& kv : split(v, ',')) {
        const auto eq = kv.find('=');
        if (eq == std::string::npos) usage("--lr: '" + kv + "' is not name=value");
        const std::string name = kv.substr(0, eq);
        if (!known(name)) usage("--lr: unknown optimizer '" + name + "'");
        const double lr = parse_double("--lr " + name, kv.substr(eq + 1));
        if (lr <= 0) usage("--lr " + name + " must be > 0 (got " + kv.substr(eq + 1) + ")");
        a.lr[name] = lr;
      }
    } else if (flag == "--sweep") {
      for (const auto& w : split(v, ',')) a.sweep.push_back(int(parse_int("--sweep", w, 1)));
      if (a.sweep.empty()) usage("--sweep: empty list");
    } else {
      usage("unknown flag '" + flag + "'");
    }
  }
  if (!a.sweep.empty() && !a.optimizers_given) a.optimizers = {"muon", "rmnp"};
  return a;
}

// ---------------------------------------------------------------------------------------------------
// Optimizers

constexpr double kMomentum = 0.95;  // every matrix preset's default beta (Nesterov)

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The HybridOptimizer for one run. Matrix presets keep their published defaults (momentum 0.95, Nesterov,
// no weight decay, their NS schedules) except lr. The AdamW route (head and biases) uses KellerJordan/Muon's
// betas 0.9/0.95 and weight decay 0.01 with lr --adamw-route-lr (3e-3: best of 3e-4, 1e-3, 3e-3 for RMNP
// over three seeds, docs/fashion_mnist.md). "adamw" puts AdamW on both routes.
matopt::HybridOptimizer<float> make_hybrid(const std::string& name, double lr, double route_lr, bool head_to_adamw) {
  using matopt::make_optimizer;
  if (name == "adamw") {
    const matopt::Config c{{"lr", fmt(lr)}, {"beta1", "0.9"}, {"beta2", "0.999"}, {"weight_decay", "0.01"}};
    return matopt::HybridOptimizer<float>(make_optimizer<float>("adamw", c), make_optimizer<float>("adamw", c));
  }
  auto matrix = make_optimizer<float>(name, {{"lr", fmt(lr)}});
  if (matrix.option_keys().find("momentum,") != std::string::npos) {  // Dion has none (its own is mu)
    matrix.set("momentum", fmt(kMomentum));
    matrix.set("nesterov", "true");
  }
  const matopt::Config adamw{{"lr", fmt(route_lr)}, {"beta1", "0.9"}, {"beta2", "0.95"}, {"weight_decay", "0.01"}};
  matopt::HybridOptimizer<float>::Options routing;
  routing.heads_to_adamw = head_to_adamw;
  return matopt::HybridOptimizer<float>(std::move(matrix), make_optimizer<float>("adamw", adamw), routing);
}

// ---------------------------------------------------------------------------------------------------
// Diagonal dominance of each hidden layer's momentum direction

// matopt keeps its momentum inside the optimizer state, so the example mirrors it: V <- beta V + G and
// U = G + beta V (Sum convention, Nesterov), exactly what RMNP, ColNorm and OrScale hand their
// preconditioner; Muon's EMA momentum is (1 - beta) times this, and the ratios are scale-invariant. For
// "adamw" it is the direction a Muon-family optimizer would receive along AdamW's trajectory.
struct DominanceProbe {
  std::vector<Mat> v;  // one buffer per hidden layer
  Mat u;
  matopt::DiagonalDominanceWorkspace<double> ws;

  void update(std::size_t l, const Mat& g) {
    if (v.size() <= l) v.resize(l + 1);
    if (v[l].size() == 0) v[l] = Mat::Zero(g.rows(), g.cols());
    v[l] = float(kMomentum) * v[l] + g;
  }
  matopt::DiagonalDominance measure(std::size_t l, const Mat& g) {
    u = g + float(kMomentum) * v[l];
    return matopt::diagonal_dominance(u, ws);
  }
};

// ---------------------------------------------------------------------------------------------------
// Training

struct Data {
  fmnist::Dataset train, test;
};

struct RunResult {
  std::string optimizer;
  double lr = 0;
  std::vector<double> epoch_accuracy;
  double test_accuracy = 0;
  double train_loss = 0;  // mean batch loss over the last epoch
  double optimizer_seconds = 0;
  double forward_backward_seconds = 0;
  double optimizer_ms_median = 0, forward_backward_ms_median = 0;  // robust to other jobs on the machine
  long steps = 0;
  // Per hidden layer: mean over the sampled steps of r_min, r_avg, r_max.
  std::vector<double> r_min_mean, r_avg_mean, r_max_mean;
  std::vector<double> zero_rows_mean;  // units inactive on a whole batch (zero gradient row), mean over samples
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + std::ptrdiff_t(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

struct Evaluation {
  double accuracy = 0, loss = 0;
};

Evaluation evaluate(const mlp::Params<float>& p, const fmnist::Dataset& d) {
  mlp::Workspace<float> ws;
  const Eigen::Index n = d.images.rows(), chunk = 1000;
  std::size_t correct = 0;
  double loss = 0;
  Mat x;
  for (Eigen::Index i = 0; i < n; i += chunk) {
    const Eigen::Index b = std::min(chunk, n - i);
    x = d.images.middleRows(i, b);
    const Mat& logits = mlp::forward(p, x, ws);
    correct += mlp::count_correct(logits, d.labels.data() + i);
    loss += double(mlp::cross_entropy<float>(logits, d.labels.data() + i, nullptr)) * double(b);
  }
  return {double(correct) / double(n), loss / double(n)};
}

// Linear warm-up to 1 over `warm` steps, then linear decay to 1/(total - warm) at the last step (t is 0-based).
double schedule(long t, long total, long warm) {
  if (t < warm) return double(t + 1) / double(warm);
  return double(total - t) / double(total - warm);
}

class Progress {
 public:
  Progress(std::string label, long total) : label_(std::move(label)), total_(total), tty_(isatty(1) != 0) {}
  void update(long step, int epoch, int epochs, double loss) {
    if (!tty_) return;
    const auto now = Clock::now();
    if (step != total_ && step > 1 && std::chrono::duration<double>(now - last_).count() < 0.2) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const int width = 30, filled = int(double(width) * double(step) / double(total_));
    std::printf("\r%-8s epoch %d/%d [%s%s] %3d%%  loss %.4f  %.1f steps/s ", label_.c_str(), epoch, epochs,
                std::string(std::size_t(filled), '#').c_str(), std::string(std::size_t(width - filled), '.').c_str(),
                int(100.0 * double(step) / double(total_)), loss, elapsed > 0 ? double(step) / elapsed : 0.0);
    std::fflush(stdout);
  }
  void finish() {
    if (tty_) std::printf("\n");
  }

 private:
  std::string label_;
  long total_;
  bool tty_;
  Clock::time_point start_ = Clock::now(), last_ = Clock::now();
};

RunResult train(const std::string& name, double lr, const std::vector<int>& sizes, const mlp::Params<float>& init,
                const Data& data, const Args& a, const std::filesystem::path& dir) {
  RunResult r;
  r.optimizer = name;
  r.lr = lr;
  mlp::Params<float> p = init;  // every optimizer starts from the same weights
  mlp::Params<float> g = mlp::Params<float>::zeros_like(sizes);
  const std::size_t L = p.layers(), hidden = L - 1;

  matopt::HybridOptimizer<float> opt = make_hybrid(name, lr, a.route_lr, a.head_to_adamw);
  // Registration order = gradient order below: w[0], b[0], w[1], b[1], ...
  for (std::size_t l = 0; l < L; ++l) {
    const bool head = l + 1 == L;
    opt.add("fc" + std::to_string(l + 1) + ".weight", matopt::view(p.w[l]), head ? matopt::Role::Head : matopt::Role::Hidden);
    opt.add("fc" + std::to_string(l + 1) + ".bias", matopt::view(p.b[l]), matopt::Role::Vector);
  }
  std::vector<matopt::MatrixView<const float>> grads;
  for (std::size_t l = 0; l < L; ++l) {
    grads.push_back(matopt::view(static_cast<const Mat&>(g.w[l])));
    grads.push_back(matopt::view(static_cast<const Vec&>(g.b[l])));
  }
  const float base_matrix = opt.matrix_optimizer().lr(), base_adamw = opt.adamw().lr();

  const std::size_t n = std::size_t(data.train.images.rows());
  const long per_epoch = long((n + std::size_t(a.batch) - 1) / std::size_t(a.batch));
  const long total = per_epoch * a.epochs;
  const long warm = std::min(total - 1, long(std::ceil(a.warmup * double(total))));

  std::ofstream steps_csv(dir / ("steps_" + name + ".csv"));
  steps_csv << "step,epoch,loss,loss_smooth,lr,optimizer_ms,forward_backward_ms";
  for (std::size_t l = 0; l < hidden; ++l)
    for (const char* s : {"r_min", "r_avg", "r_max", "zero_rows"}) steps_csv << ",fc" << l + 1 << "_" << s;
  steps_csv << "\n";
  std::ofstream epochs_csv(dir / ("epochs_" + name + ".csv"));
  epochs_csv << "epoch,train_loss,test_loss,test_accuracy,optimizer_seconds,forward_backward_seconds\n";

  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t(0));
  mlp::Workspace<float> ws;
  DominanceProbe probe;
  Mat x;
  std::vector<int> y;
  r.r_min_mean.assign(hidden, 0.0);
  r.zero_rows_mean.assign(hidden, 0.0);
  r.r_avg_mean.assign(hidden, 0.0);
  r.r_max_mean.assign(hidden, 0.0);
  long samples = 0;
  double smooth = 0;
  std::vector<double> opt_times, fb_times;
  Progress bar(name, total);
  long step = 0;
  for (int epoch = 1; epoch <= a.epochs; ++epoch) {
    // The same shuffled order for every optimizer: seeded by (seed, epoch).
    std::mt19937_64 rng(a.seed * 1000003u + std::uint64_t(epoch));
    std::shuffle(order.begin(), order.end(), rng);
    double epoch_loss = 0, epoch_opt = 0, epoch_fb = 0;
    for (long k = 0; k < per_epoch; ++k, ++step) {
      const std::size_t lo = std::size_t(k) * std::size_t(a.batch), hi = std::min(n, lo + std::size_t(a.batch));
      x.resize(Eigen::Index(hi - lo), data.train.images.cols());
      y.resize(hi - lo);
      for (std::size_t i = lo; i < hi; ++i) {
        x.row(Eigen::Index(i - lo)) = data.train.images.row(Eigen::Index(order[i]));
        y[i - lo] = data.train.labels[order[i]];
      }
      const double f = schedule(step, total, warm);
      opt.matrix_optimizer().set_lr(float(base_matrix * f));
      opt.adamw().set_lr(float(base_adamw * f));

      auto t0 = Clock::now();
      const float loss = mlp::loss_and_grad(p, x, y.data(), g, ws);
      const double fb_ms = ms_since(t0);
      t0 = Clock::now();
      opt.step(grads);
      const double opt_ms = ms_since(t0);
      if (!std::isfinite(loss))
        throw std::runtime_error(name + ": the training loss became " + std::to_string(loss) + " at step " +
                                 std::to_string(step + 1) + " (lr " + fmt(lr) + " too large?)");

      smooth = step == 0 ? double(loss) : 0.98 * smooth + 0.02 * double(loss);
      epoch_loss += double(loss);
      epoch_opt += opt_ms;
      epoch_fb += fb_ms;
      opt_times.push_back(opt_ms);
      fb_times.push_back(fb_ms);
      steps_csv << step + 1 << ',' << epoch << ',' << loss << ',' << smooth << ',' << base_matrix * f << ','
                << opt_ms << ',' << fb_ms;
      // Outside both timings: mirror the momentum every step, measure every `dominance_every` steps.
      const bool sample = (step + 1) % a.dominance_every == 0 || step == 0;
      for (std::size_t l = 0; l < hidden; ++l) {
        probe.update(l, g.w[l]);
        if (sample) {
          const matopt::DiagonalDominance d = probe.measure(l, g.w[l]);
          // A unit inactive on every sample of the batch has a zero gradient row; once it stays dead its
          // momentum row decays as beta^t, which is what drives r_min toward 0.
          const long zero_rows = long((g.w[l].rowwise().squaredNorm().array() == 0.0f).count());
          steps_csv << ',' << d.r_min << ',' << d.r_avg << ',' << d.r_max << ',' << zero_rows;
          r.zero_rows_mean[l] += double(zero_rows);
          r.r_min_mean[l] += d.r_min;
          r.r_avg_mean[l] += d.r_avg;
          r.r_max_mean[l] += d.r_max;
        } else {
          steps_csv << ",,,,";
        }
      }
      if (sample) ++samples;
      steps_csv << '\n';
      bar.update(step + 1, epoch, a.epochs, smooth);
    }
    const Evaluation e = evaluate(p, data.test);
    r.epoch_accuracy.push_back(e.accuracy);
    r.train_loss = epoch_loss / double(per_epoch);
    r.optimizer_seconds += epoch_opt / 1e3;
    r.forward_backward_seconds += epoch_fb / 1e3;
    epochs_csv << epoch << ',' << r.train_loss << ',' << e.loss << ',' << e.accuracy << ',' << epoch_opt / 1e3 << ','
               << epoch_fb / 1e3 << '\n';
    if (isatty(1) == 0)
      std::printf("%-8s epoch %d/%d  train loss %.4f  test accuracy %.2f%%  optimizer %.1f s\n", name.c_str(), epoch,
                  a.epochs, r.train_loss, 100 * e.accuracy, r.optimizer_seconds);
    std::fflush(stdout);
  }
  bar.finish();
  r.steps = step;
  r.test_accuracy = r.epoch_accuracy.back();
  r.optimizer_ms_median = median(opt_times);
  r.forward_backward_ms_median = median(fb_times);
  for (std::size_t l = 0; l < hidden; ++l) {
    r.r_min_mean[l] /= double(samples);
    r.zero_rows_mean[l] /= double(samples);
    r.r_avg_mean[l] /= double(samples);
    r.r_max_mean[l] /= double(samples);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------------
// Output

void write_summary(const std::filesystem::path& dir, const std::vector<RunResult>& runs) {
  std::ofstream f(dir / "summary.csv");
  f << "optimizer,test_accuracy,train_loss,optimizer_seconds,steps\n";
  for (const auto& r : runs)
    f << r.optimizer << ',' << r.test_accuracy << ',' << r.train_loss << ',' << r.optimizer_seconds << ',' << r.steps
      << '\n';
}

const RunResult* find(const std::vector<RunResult>& runs, const std::string& name) {
  for (const auto& r : runs)
    if (r.optimizer == name) return &r;
  return nullptr;
}

void print_table(const std::vector<RunResult>& runs) {
  std::printf("\n| optimizer | lr | test accuracy | train loss | optimizer time (s) | optimizer ms/step "
              "(mean / median) | forward+backward ms/step (mean / median) |\n|---|---|---|---|---|---|---|\n");
  for (const auto& r : runs)
    std::printf("| %s | %g | %.2f%% | %.4f | %.2f | %.3f / %.3f | %.2f / %.2f |\n", r.optimizer.c_str(), r.lr,
                100 * r.test_accuracy, r.train_loss, r.optimizer_seconds, 1e3 * r.optimizer_seconds / double(r.steps),
                r.optimizer_ms_median, 1e3 * r.forward_backward_seconds / double(r.steps), r.forward_backward_ms_median);
  const RunResult *muon = find(runs, "muon"), *rmnp = find(runs, "rmnp");
  if (muon != nullptr && rmnp != nullptr)
    std::printf("\nRMNP/Muon optimizer time: %.4f in total (RMNP %.3f ms/step, Muon %.3f ms/step: %.0fx less); "
                "%.4f by median step (%.0fx)\n",
                rmnp->optimizer_seconds / muon->optimizer_seconds, 1e3 * rmnp->optimizer_seconds / double(rmnp->steps),
                1e3 * muon->optimizer_seconds / double(muon->steps), muon->optimizer_seconds / rmnp->optimizer_seconds,
                rmnp->optimizer_ms_median / muon->optimizer_ms_median, muon->optimizer_ms_median / rmnp->optimizer_ms_median);
}

bool have_gnuplot() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

void run_gnuplot(const std::filesystem::path& dir, const std::string& script, const std::string& pngs) {
  if (!have_gnuplot()) {
    std::printf("gnuplot not on PATH: skipped the plots (run 'gnuplot %s' in %s later)\n", script.c_str(),
                dir.string().c_str());
    return;
  }
  const std::string cmd = "cd '" + dir.string() + "' && gnuplot " + script;
  if (std::system(cmd.c_str()) == 0)
    std::printf("plots: %s in %s\n", pngs.c_str(), dir.string().c_str());
  else
    std::printf("gnuplot failed; the data and %s are in %s\n", script.c_str(), dir.string().c_str());
}

// One gnuplot script for the four figures of a run. Empty CSV fields (steps without a dominance sample)
// are skipped by `set datafile missing ""`.
void write_plots(const std::filesystem::path& dir, const std::vector<RunResult>& runs, std::size_t hidden,
                 const std::string& title) {
  std::ofstream f(dir / "plots.gp");
  f << "# written by fashion_mnist; run inside this directory: gnuplot plots.gp\n"
       "set datafile separator ','\nset datafile missing ''\nset key outside right\nset grid\n"
       "set terminal pngcairo size 900,520 font ',10'\n";
  // One curve per optimizer: 'PREFIX<name>.csv' using USING title '<name>' with STYLE lc <i>.
  auto each = [&](const std::string& prefix, const std::string& using_, const std::string& style) {
    std::string s;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      if (i) s += ", \\\n     ";
      s += "'" + prefix + runs[i].optimizer + ".csv' using " + using_ + " title '" + runs[i].optimizer + "' with " +
           style + " lc " + std::to_string(i + 1);
    }
    return s + "\n";
  };
  f << "set output 'loss.png'\nset title 'Training loss (EMA 0.98 of batch loss), " << title
    << "'\nset xlabel 'step'\nset ylabel 'loss'\nset logscale y\nplot " << each("steps_", "1:4", "lines lw 1.5")
    << "unset logscale y\n";
  f << "set output 'accuracy.png'\nset title 'Test accuracy, " << title
    << "'\nset xlabel 'epoch'\nset ylabel 'test accuracy (%)'\nset xtics 1\nplot "
    << each("epochs_", "1:(100*$4)", "linespoints lw 1.5 pt 7") << "set xtics autofreq\n";
  f << "set output 'optimizer_time.png'\nset title 'Optimizer step time (whole model), " << title
    << "'\nset xlabel 'step'\nset ylabel 'ms per step'\nset logscale y\nplot "
    << each("steps_", "1:6", "lines lw 1") << "unset logscale y\n";
  if (hidden > 0) {
    // Top row: mean_i r_i per layer. Bottom row: units with a zero gradient row on the sampled batch. min_i r_i
    // is in the CSV but not plotted: it follows the dead units' decaying momentum rows toward 0 (see above).
    f << "set output 'dominance.png'\nset terminal pngcairo size " << std::max<std::size_t>(700, 500 * hidden) << ",620 font ',10'\n"
      << "set multiplot layout 2," << hidden << " title 'Diagonal dominance of U U^T, U = G + 0.95 V (Nesterov "
      << "momentum), " << title << "'\nset xlabel 'step'\nset key inside top right\n";
    for (std::size_t l = 0; l < hidden; ++l)
      f << "set title 'fc" << l + 1 << ": mean_i r_i'\nset ylabel 'r_{avg}'\nplot "
        << each("steps_", "1:" + std::to_string(9 + 4 * l), "lines lw 1.2");
    for (std::size_t l = 0; l < hidden; ++l)
      f << "set title 'fc" << l + 1 << ": units inactive on the whole batch'\nset ylabel 'zero rows of G'\nplot "
        << each("steps_", "1:" + std::to_string(11 + 4 * l), "lines lw 1.2");
    f << "unset multiplot\n";
  }
}

std::string layout_string(const std::vector<int>& sizes) {
  std::string s;
  for (std::size_t i = 0; i < sizes.size(); ++i) s += (i ? "-" : "") + std::to_string(sizes[i]);
  return s;
}

std::vector<RunResult> run_all(const Args& a, int hidden_width, const Data& data, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  std::vector<int> sizes{fmnist::kPixels};
  for (int d = 0; d < a.depth; ++d) sizes.push_back(hidden_width);
  sizes.push_back(fmnist::kClasses);
  const mlp::Params<float> init = mlp::init<float>(sizes, a.seed);
  std::printf("MLP %s, batch %d, %d epochs, %zu training samples; routing: fc1..fc%d weights -> matrix optimizer, "
              "fc%d weight (head) -> %s, biases -> AdamW (\"adamw\": all AdamW)\n",
              layout_string(sizes).c_str(), a.batch, a.epochs, std::size_t(data.train.images.rows()), a.depth,
              a.depth + 1, a.head_to_adamw ? "AdamW" : "matrix optimizer");
  std::fflush(stdout);
  std::vector<RunResult> runs;
  for (const auto& name : a.optimizers) {
    const auto it = a.lr.find(name);
    const double lr = it != a.lr.end() ? it->second : default_lr(name);
    runs.push_back(train(name, lr, sizes, init, data, a, dir));
    write_summary(dir, runs);  // after every run, so an interrupted demo keeps what finished
  }
  write_plots(dir, runs, std::size_t(a.depth), "MLP " + layout_string(sizes));
  return runs;
}

struct SweepRow {
  int width;
  std::vector<RunResult> runs;
};

// The sweep's figure: the gap and each hidden layer's r̄_avg against width, from an inline data block
// (width, RMNP - Muon in points, then r̄_avg of the Muon and of the RMNP run per layer).
void write_sweep_plot(const std::filesystem::path& dir, const std::vector<SweepRow>& rows, std::size_t hidden) {
  std::ofstream f(dir / "sweep.gp");
  f << "# written by fashion_mnist --sweep; run inside this directory: gnuplot sweep.gp\n$sweep << EOD\n";
  for (const auto& row : rows) {
    const RunResult *muon = find(row.runs, "muon"), *rmnp = find(row.runs, "rmnp");
    if (muon == nullptr || rmnp == nullptr) continue;
    f << row.width << ' ' << 100 * (rmnp->test_accuracy - muon->test_accuracy);
    for (std::size_t l = 0; l < hidden; ++l) f << ' ' << muon->r_avg_mean[l] << ' ' << rmnp->r_avg_mean[l];
    f << '\n';
  }
  f << "EOD\nset terminal pngcairo size 1000,420 font ',10'\nset output 'sweep.png'\n"
       "set grid\nset logscale x 2\nset xlabel 'hidden width'\nset multiplot layout 1,2\n"
       "set title 'Test accuracy gap RMNP - Muon'\nset ylabel 'percentage points'\n"
       "plot $sweep using 1:2 title 'RMNP - Muon' with linespoints pt 7 lw 2\n"
       "set title 'mean_i r_i averaged over training'\nset ylabel 'r_{avg}'\nplot ";
  for (std::size_t l = 0; l < hidden; ++l) {
    if (l) f << ", ";
    f << "$sweep using 1:" << 3 + 2 * l << " title 'fc" << l + 1 << ", Muon run' with linespoints pt 7 lc " << l + 1
      << ", $sweep using 1:" << 4 + 2 * l << " title 'fc" << l + 1 << ", RMNP run' with linespoints dt 2 pt 6 lc "
      << l + 1;
  }
  f << "\nunset multiplot\n";
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    Data data{fmnist::load(a.data, true, a.limit), fmnist::load(a.data, false)};
    const std::filesystem::path out(a.out);
    std::filesystem::create_directories(out);
    if (a.sweep.empty()) {
      const std::vector<RunResult> runs = run_all(a, a.hidden, data, out);
      print_table(runs);
      run_gnuplot(out, "plots.gp", "loss.png, accuracy.png, optimizer_time.png, dominance.png");
      std::printf("CSV files (steps_*.csv, epochs_*.csv, summary.csv) in %s\n", out.string().c_str());
      return 0;
    }
    // Width sweep: the same depth at each width; Muon vs RMNP gap next to the dominance.
    std::ofstream sweep(out / "sweep.csv");
    sweep << "width,optimizer_index,optimizer,test_accuracy,train_loss,optimizer_seconds,rmnp_minus_muon";
    for (int l = 0; l < a.depth; ++l)
      for (const char* s : {"r_min_mean", "r_avg_mean", "r_max_mean", "zero_rows_mean"})
        sweep << ",fc" << l + 1 << "_" << s;
    sweep << "\n";
    std::vector<SweepRow> rows;
    for (const int w : a.sweep) {
      std::printf("\n== width %d ==\n", w);
      SweepRow row{w, run_all(a, w, data, out / ("width_" + std::to_string(w)))};
      const RunResult *muon = find(row.runs, "muon"), *rmnp = find(row.runs, "rmnp");
      const double gap = (muon && rmnp) ? rmnp->test_accuracy - muon->test_accuracy : std::nan("");
      for (std::size_t i = 0; i < row.runs.size(); ++i) {
        const RunResult& r = row.runs[i];
        sweep << w << ',' << i << ',' << r.optimizer << ',' << r.test_accuracy << ',' << r.train_loss << ','
              << r.optimizer_seconds << ',' << gap;
        for (int l = 0; l < a.depth; ++l)
          sweep << ',' << r.r_min_mean[std::size_t(l)] << ',' << r.r_avg_mean[std::size_t(l)] << ','
                << r.r_max_mean[std::size_t(l)] << ',' << r.zero_rows_mean[std::size_t(l)];
        sweep << '\n';
      }
      sweep.flush();
      rows.push_back(std::move(row));
    }
    sweep.close();
    // r̄ = the per-step statistic averaged over the sampled steps of that run; "zero" = mean number of units
    // inactive on the whole batch (zero gradient rows), which is what pulls r_min toward 0.
    std::printf("\n| width | Muon acc | RMNP acc | RMNP - Muon |");
    for (int l = 0; l < a.depth; ++l)
      std::printf(" fc%d r̄_min / r̄_avg / zero, Muon run | fc%d, RMNP run |", l + 1, l + 1);
    std::printf(" RMNP/Muon optimizer ms/step (median) |\n|---|---|---|---|");
    for (int l = 0; l < a.depth; ++l) std::printf("---|---|");
    std::printf("---|\n");
    for (const auto& row : rows) {
      const RunResult *muon = find(row.runs, "muon"), *rmnp = find(row.runs, "rmnp");
      if (muon == nullptr || rmnp == nullptr) continue;
      std::printf("| %d | %.2f%% | %.2f%% | %+.2f |", row.width, 100 * muon->test_accuracy, 100 * rmnp->test_accuracy,
                  100 * (rmnp->test_accuracy - muon->test_accuracy));
      for (std::size_t l = 0; l < std::size_t(a.depth); ++l)
        std::printf(" %.2g / %.3g / %.1f | %.2g / %.3g / %.1f |", muon->r_min_mean[l], muon->r_avg_mean[l],
                    muon->zero_rows_mean[l], rmnp->r_min_mean[l], rmnp->r_avg_mean[l], rmnp->zero_rows_mean[l]);
      std::printf(" %.3f / %.1f |\n", rmnp->optimizer_ms_median, muon->optimizer_ms_median);
    }
    write_sweep_plot(out, rows, std::size_t(a.depth));
    run_gnuplot(out, "sweep.gp", "sweep.png (and each width's plots in width_*/)");
    for (const auto& row : rows) run_gnuplot(out / ("width_" + std::to_string(row.width)), "plots.gp", "plots");
    std::printf("sweep.csv in %s\n", out.string().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 1;
  }
}

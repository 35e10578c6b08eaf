// SPDX-License-Identifier: MIT
// matopt inside libtorch: a torch::nn MLP trained on Fashion-MNIST twice from the same initial weights,
// (a) by matopt::TorchOptimizer (include/matopt/integration/libtorch.hpp: hidden matrices -> a Muon-family
//     preset, biases and the output head -> AdamW), a torch::optim::Optimizer that steps the tensors' own
//     storage in place, and
// (b) by torch::optim::AdamW,
// then prints each run's test accuracy and optimizer time. docs/integration.md walks through this file.
//
//   libtorch_mlp [--optimizer muon|rmnp|colnorm|orscale|moonlight_muon] [--epochs N] [--limit N]
//                [--batch N] [--seed N] [--threads N] [--hidden N] [--lr X] [--adam-lr X]
//                [--min-accuracy X] [--data DIR]
//
// Exit status: 0, 1 when the matopt run's test accuracy is below --min-accuracy, 2 on bad arguments or
// an error, 77 when the Fashion-MNIST files are missing (CTest reports the test as skipped).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <matopt/integration/libtorch.hpp>

#include "../common/fashion_mnist.hpp"
#include "../common/torch_threads.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// ---- the model -------------------------------------------------------------------------------------

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(std::int64_t hidden) {
    fc1 = register_module("fc1", torch::nn::Linear(784, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    head = register_module("head", torch::nn::Linear(hidden, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1->forward(x));
    x = torch::relu(fc2->forward(x));
    return head->forward(x);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, head{nullptr};
};
TORCH_MODULE(Mlp);

// ---- arguments -------------------------------------------------------------------------------------

struct Args {
  std::string optimizer = "muon";
  int epochs = 1;
  std::int64_t limit = 0;  // 0: the whole training set
  std::int64_t batch = 128;
  std::uint64_t seed = 0;
  int threads = 0;  // 0: libtorch's and OpenMP's defaults
  std::int64_t hidden = 256;
  std::string lr;  // empty: the preset's default
  double adam_lr = 1e-3;
  double min_accuracy = 0;
  std::string data;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "libtorch_mlp: %s\n"
               "usage: libtorch_mlp [--optimizer muon|rmnp|colnorm|orscale|moonlight_muon] [--epochs N]\n"
               "                    [--limit N] [--batch N] [--seed N] [--threads N] [--hidden N] [--lr X]\n"
               "                    [--adam-lr X] [--min-accuracy X] [--data DIR]\n",
               why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (i + 1 >= argc) usage("missing value for " + key);
    const std::string value = argv[++i];
    auto integer = [&](long long lo) {
      char* end = nullptr;
      const long long v = std::strtoll(value.c_str(), &end, 10);
      if (end == value.c_str() || *end != '\0' || v < lo) usage(key + ": bad value '" + value + "'");
      return v;
    };
    auto real = [&] {
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !(v >= 0)) usage(key + ": bad value '" + value + "'");
      return v;
    };
    if (key == "--optimizer") a.optimizer = value;
    else if (key == "--epochs") a.epochs = int(integer(1));
    else if (key == "--limit") a.limit = integer(0);
    else if (key == "--batch") a.batch = integer(1);
    else if (key == "--seed") a.seed = std::uint64_t(integer(0));
    else if (key == "--threads") a.threads = int(integer(0));
    else if (key == "--hidden") a.hidden = integer(1);
    else if (key == "--lr") a.lr = value;
    else if (key == "--adam-lr") a.adam_lr = real();
    else if (key == "--min-accuracy") a.min_accuracy = real();
    else if (key == "--data") a.data = value;
    else usage("unknown option " + key);
  }
  if (a.optimizer == "adamw") usage("--optimizer names the matrix optimizer; AdamW is run (b)");
  return a;
}

// ---- training --------------------------------------------------------------------------------------

struct Data {
  fmnist::Dataset train_set, test_set;
  torch::Tensor train_x, train_y, test_x, test_y;  // train_x, test_x alias the datasets' images
};

torch::Tensor labels_tensor(const std::vector<int>& labels) {
  return torch::tensor(std::vector<std::int64_t>(labels.begin(), labels.end()), torch::kInt64);
}

double accuracy(Mlp& model, const torch::Tensor& x, const torch::Tensor& y) {
  torch::NoGradGuard no_grad;
  model->eval();
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < x.size(0); i += 2000) {
    const std::int64_t n = std::min<std::int64_t>(2000, x.size(0) - i);
    const auto pred = model->forward(x.narrow(0, i, n)).argmax(1);
    correct += pred.eq(y.narrow(0, i, n)).sum().item<std::int64_t>();
  }
  model->train();
  return double(correct) / double(x.size(0));
}

struct RunResult {
  double accuracy = 0, optimizer_s = 0, train_s = 0, last_loss = 0;
};

/// Trains `model` with `step()` after each backward pass and `set_lr_factor(f)` before it (a linear decay
/// to 10% of the base lr). The batch order depends on the seed only, so both runs see the same batches.
template <class Step, class SetLr>
RunResult train(Mlp& model, const Data& d, const Args& a, Step&& step, SetLr&& set_lr_factor) {
  const std::int64_t n = d.train_x.size(0);
  const std::int64_t batches_per_epoch = (n + a.batch - 1) / a.batch;
  const double total = double(batches_per_epoch) * a.epochs;
  std::mt19937_64 rng(a.seed + 1);
  std::vector<std::int64_t> order(std::size_t(n), 0);
  std::iota(order.begin(), order.end(), 0);
  RunResult r;
  std::int64_t k = 0;
  const auto t_start = Clock::now();
  for (int epoch = 0; epoch < a.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    const auto perm = torch::from_blob(order.data(), {n}, torch::kInt64);
    double loss_sum = 0;
    for (std::int64_t b = 0; b < batches_per_epoch; ++b, ++k) {
      const auto idx = perm.narrow(0, b * a.batch, std::min(a.batch, n - b * a.batch));
      const auto x = d.train_x.index_select(0, idx), y = d.train_y.index_select(0, idx);
      model->zero_grad();
      const auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      loss.backward();
      loss_sum += loss.item<double>();
      set_lr_factor(1.0 - 0.9 * double(k) / total);
      const auto t0 = Clock::now();
      step();
      r.optimizer_s += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    r.last_loss = loss_sum / double(batches_per_epoch);
    std::printf("  epoch %d: mean train loss %.4f\n", epoch + 1, r.last_loss);
  }
  r.train_s = std::chrono::duration<double>(Clock::now() - t_start).count();
  r.accuracy = accuracy(model, d.test_x, d.test_y);
  return r;
}

void set_parameters(Mlp& model, const std::vector<torch::Tensor>& values) {
  torch::NoGradGuard no_grad;
  auto params = model->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(values[i]);  // in place: same storage
}

/// A non-contiguous tensor must be refused with an error, not copied.
void check_non_contiguous_is_refused() {
  torch::OrderedDict<std::string, torch::Tensor> params;
  params.insert("transposed.weight", torch::zeros({4, 3}).t());
  try {
    matopt::TorchOptimizer opt(params, "muon");
  } catch (const std::invalid_argument& e) {
    std::printf("check: non-contiguous tensor refused (%s)\n", e.what());
    return;
  }
  throw std::logic_error("a non-contiguous tensor was accepted");
}

int run(const Args& a) {
  const examples::Threads threads = examples::set_threads(a.threads);
  std::printf("matopt %s, libtorch %s; threads: libtorch %d, matopt (OpenMP) %d\n", matopt::version(),
              TORCH_VERSION, threads.torch, threads.openmp);
  check_non_contiguous_is_refused();

  const std::string dir = a.data.empty() ? fmnist::default_dir() : a.data;
  if (!std::filesystem::exists(std::filesystem::path(dir) / "train-images-idx3-ubyte.gz")) {
    std::printf("Fashion-MNIST not found in %s (apt-get install dataset-fashion-mnist, or set "
                "MATOPT_FASHION_MNIST_DIR); skipped\n", dir.c_str());
    return 77;
  }
  Data d;
  d.train_set = fmnist::load(dir, true, std::size_t(a.limit));
  d.test_set = fmnist::load(dir, false);
  const auto as_tensor = [](fmnist::Dataset& s) {
    return torch::from_blob(s.images.data(), {s.images.rows(), s.images.cols()}, torch::kFloat32);
  };
  d.train_x = as_tensor(d.train_set);
  d.test_x = as_tensor(d.test_set);
  d.train_y = labels_tensor(d.train_set.labels);
  d.test_y = labels_tensor(d.test_set.labels);
  std::printf("Fashion-MNIST: %lld training, %lld test images; MLP 784-%lld-%lld-10, batch %lld, %d epoch(s)\n",
              static_cast<long long>(d.train_x.size(0)), static_cast<long long>(d.test_x.size(0)),
              static_cast<long long>(a.hidden), static_cast<long long>(a.hidden),
              static_cast<long long>(a.batch), a.epochs);

  torch::manual_seed(a.seed);
  Mlp model(a.hidden);
  std::vector<torch::Tensor> initial;
  for (const auto& p : model->parameters()) initial.push_back(p.detach().clone());

  // (a) matopt: the matrix preset by name, AdamW (torch's defaults) for biases and the head. One line in place
  // of torch::optim::AdamW; its param groups 0 (matrix) and 1 (AdamW) carry each route's lr.
  matopt::Config matrix_config;
  if (!a.lr.empty()) matrix_config["lr"] = a.lr;
  matopt::TorchOptions options;
  options.adamw = {{"lr", std::to_string(a.adam_lr)}, {"beta2", "0.999"}, {"weight_decay", "0.01"}};
  matopt::TorchOptimizer mopt(model->named_parameters(), a.optimizer, matrix_config, options);
  std::printf("\n(a) matopt::TorchOptimizer, matrix route %s:\n", a.optimizer.c_str());
  for (const auto& name : mopt.names())
    std::printf("  %-12s -> %-6s effective lr %.4g\n", name.c_str(),
                mopt.route(name) == matopt::Route::Matrix ? "matrix" : "AdamW", mopt.effective_lr(name));
  std::vector<double> base_lr;
  for (const auto& g : mopt.param_groups()) base_lr.push_back(g.options().get_lr());
  const auto set_lr_factor = [&](torch::optim::Optimizer& opt, const std::vector<double>& base, double f) {
    for (std::size_t g = 0; g < base.size(); ++g) opt.param_groups()[g].options().set_lr(base[g] * f);
  };
  const RunResult ra = train(model, d, a, [&] { mopt.step(); }, [&](double f) { set_lr_factor(mopt, base_lr, f); });
  for (std::size_t i = 0; i < initial.size(); ++i)  // updated in place: the same storage, new values
    if (model->parameters()[i].equal(initial[i])) throw std::logic_error("a parameter was not updated");

  // (b) torch::optim::AdamW from the same initial weights and the same batches.
  set_parameters(model, initial);
  torch::optim::AdamW adamw(model->parameters(), torch::optim::AdamWOptions(a.adam_lr).weight_decay(0.01));
  std::printf("\n(b) torch::optim::AdamW, lr %g:\n", a.adam_lr);
  const RunResult rb = train(model, d, a, [&] { adamw.step(); }, [&](double f) { set_lr_factor(adamw, {a.adam_lr}, f); });

  std::printf("\n%-44s %14s %16s %12s\n", "run", "test accuracy", "optimizer time", "train time");
  std::printf("%-44s %13.2f%% %14.2f s %10.2f s\n", ("(a) matopt::TorchOptimizer (" + a.optimizer + " + AdamW)").c_str(),
              100 * ra.accuracy, ra.optimizer_s, ra.train_s);
  std::printf("%-44s %13.2f%% %14.2f s %10.2f s\n", "(b) torch::optim::AdamW", 100 * rb.accuracy, rb.optimizer_s,
              rb.train_s);
  if (a.min_accuracy > 0 && ra.accuracy < a.min_accuracy) {
    std::printf("FAIL: matopt test accuracy %.4f is below --min-accuracy %.4f\n", ra.accuracy, a.min_accuracy);
    return 1;
  }
  if (a.min_accuracy > 0) std::printf("OK: matopt test accuracy %.4f >= %.4f\n", ra.accuracy, a.min_accuracy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "libtorch_mlp: %s\n", e.what());
    return 2;
  }
}

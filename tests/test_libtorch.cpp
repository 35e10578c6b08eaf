// SPDX-License-Identifier: MIT
// matopt::TorchOptimizer (include/matopt/integration/libtorch.hpp): routing, bitwise agreement with
// HybridOptimizer on the same views, the AdamW route against torch::optim::AdamW (an independent
// implementation), param-group lr changes and libtorch's schedulers, save/load, refused tensors; and steps against
// closed forms written out here in double: explicit groups' lr and decay, StepLR, options() changes, tied weights,
// the typed-optimizer constructor.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

// First, and twice: the header is self-contained and guarded (it is not in matopt_header_check, which has no
// libtorch include paths).
#include <matopt/integration/libtorch.hpp>
#include <matopt/integration/libtorch.hpp>
#include <matopt/presets.hpp>

#include <torch/optim/schedulers/step_lr.h>
#include <torch/torch.h>

#include "doctest_after_torch.hpp"

namespace {

using matopt::Role;
using matopt::Route;

/// Embedding, hidden Linear, conv, norm and head: every routing rule.
struct NetImpl : torch::nn::Module {
  NetImpl() {
    emb = register_module("emb", torch::nn::Embedding(10, 6));
    fc1 = register_module("fc1", torch::nn::Linear(6, 8));
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 3, 3)));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({8})));
    head = register_module("head", torch::nn::Linear(8, 4));
  }
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear fc1{nullptr}, head{nullptr};
  torch::nn::Conv2d conv{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(Net);

Net make_net(torch::ScalarType dtype, int seed) {
  torch::manual_seed(seed);
  Net net;
  net->to(dtype);
  return net;
}

/// Gradients for step k: the same values for every copy of the model.
void set_grads(Net& net, int k) {
  torch::NoGradGuard no_grad;
  int i = 0;
  for (auto& p : net->parameters()) {
    torch::manual_seed(1000 * k + i++);
    p.mutable_grad() = torch::randn(p.sizes(), p.options());
  }
}

bool bitwise_equal(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), std::size_t(a.numel()) * a.element_size()) == 0;
}

std::vector<torch::Tensor> snapshot(Net& net) {
  std::vector<torch::Tensor> v;
  for (const auto& p : net->parameters()) v.push_back(p.detach().clone());
  return v;
}

template <class T>
torch::ScalarType dtype_of() {
  return std::is_same_v<T, float> ? torch::kFloat32 : torch::kFloat64;
}

/// max |a - b| over the entries, in double.
double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.detach().to(torch::kFloat64) - b.detach().to(torch::kFloat64)).abs().max().item<double>();
}

/// What storing a step's result in T may cost: a few units in the last place of the largest weight.
template <class T>
double step_tol(const torch::Tensor& w) {
  return 2 * double(std::numeric_limits<T>::epsilon()) * std::max(1.0, w.detach().abs().max().item<double>());
}

/// Each row of U's (size(0), numel / size(0)) view over its l2 norm, in double (RMNP's direction, arXiv
/// 2603.20527; Dominator-Index/RMNP: F.normalize over the input dimension).
torch::Tensor rows_normalized(const torch::Tensor& u) {
  const auto u2 = u.detach().to(torch::kFloat64).reshape({u.size(0), -1});
  return (u2 / u2.norm(2, {1}, true)).reshape(u.sizes());
}

/// Muon's shape factor max(1, m/n)^(1/2) of that view (KellerJordan/Muon).
double muon_scale(const torch::Tensor& w) {
  const double m = double(w.size(0)), n = double(w.numel()) / m;
  return std::sqrt(std::max(1.0, m / n));
}

/// One step of RMNP (the matrix route) or AdamW on a gradient G that was the same at every step so far, written
/// out in double. RMNP: each Sum-Nesterov direction (1 + b) G + b^2 V is then a positive multiple of G, so the
/// step is W (1 - lr wd) - lr s G_i / ||G_i|| row by row. AdamW (torch.optim.AdamW): the bias-corrected moments
/// are G and G^2, so the step is W (1 - lr wd) - lr G / (|G| + eps). Both linear in lr, for any step count.
torch::Tensor constant_grad_step(const torch::Tensor& w, const torch::Tensor& g, Route route, double lr, double wd) {
  const auto w64 = w.detach().to(torch::kFloat64), g64 = g.detach().to(torch::kFloat64);
  if (route == Route::AdamW) return w64 * (1 - lr * wd) - lr * g64 / (g64.abs() + 1e-8);
  return w64 * (1 - lr * wd) - lr * muon_scale(w) * rows_normalized(g64);
}

matopt::TorchGroupOptions& group_options(matopt::TorchOptimizer& opt, std::size_t g) {
  return static_cast<matopt::TorchGroupOptions&>(opt.param_groups()[g].options());
}

/// One opt.step() on `net` (constant gradients), each parameter checked against constant_grad_step at its route's
/// lr and weight decay ([0]: the matrix route's group, [1]: AdamW's); returns each parameter's W before the step and
/// its update W - W_before, in double, for the caller's checks across steps.
template <class T>
std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> step_checked(Net& net, matopt::TorchOptimizer& opt,
                                                                              const double (&lr)[2],
                                                                              const double (&wd)[2]) {
  auto before = snapshot(net);
  opt.step();
  std::vector<torch::Tensor> update;
  std::size_t i = 0;
  for (const auto& item : net->named_parameters()) {
    CAPTURE(item.key());
    const torch::Tensor& b = before[i++];
    const std::size_t g = opt.route(item.key()) == Route::Matrix ? 0 : 1;
    CHECK(max_diff(item.value(), constant_grad_step(b, item.value().grad(), opt.route(item.key()), lr[g], wd[g])) <=
          step_tol<T>(b));
    update.push_back(item.value().to(torch::kFloat64) - b.to(torch::kFloat64));
  }
  return {std::move(before), std::move(update)};
}

/// A module that holds a given tensor as its "weight": one tensor registered in two modules is a tied weight
/// (GPT-2's lm_head and wte; a layer applied twice).
struct TiedImpl : torch::nn::Module {
  explicit TiedImpl(torch::Tensor w) { weight = register_parameter("weight", std::move(w)); }
  torch::Tensor weight;
};
TORCH_MODULE(Tied);

struct TiedNetImpl : torch::nn::Module {
  TiedNetImpl() {
    wte = register_module("wte", torch::nn::Embedding(10, 6));
    layer0 = register_module("layer0", torch::nn::Linear(torch::nn::LinearOptions(6, 6).bias(false)));
    layer1 = register_module("layer1", Tied(layer0->weight));  // layer0's weight, applied a second time
    lm_head = register_module("lm_head", Tied(wte->weight));   // the output head is the embedding
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto x = torch::tanh(layer0(wte(tokens)));
    x = torch::tanh(torch::matmul(x, layer1->weight.t()));
    return torch::matmul(x, lm_head->weight.t());
  }
  torch::nn::Embedding wte{nullptr};
  torch::nn::Linear layer0{nullptr};
  Tied layer1{nullptr}, lm_head{nullptr};
};
TORCH_MODULE(TiedNet);

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE_TEMPLATE("TorchOptimizer routes like HybridOptimizer and steps the same bits on the same views", T, float,
                   double) {
  const auto dtype = std::is_same_v<T, float> ? torch::kFloat32 : torch::kFloat64;
  Net net = make_net(dtype, 1);
  matopt::TorchOptimizer opt(net->named_parameters(), "muon", {{"weight_decay", "0.01"}});
  CHECK(opt.route("emb.weight") == Route::AdamW);
  CHECK(opt.route("fc1.weight") == Route::Matrix);
  CHECK(opt.route("fc1.bias") == Route::AdamW);
  CHECK(opt.route("conv.weight") == Route::Matrix);  // (3, 2*3*3)
  CHECK(opt.route("norm.weight") == Route::AdamW);
  CHECK(opt.route("head.weight") == Route::AdamW);
  REQUIRE(opt.param_groups().size() == 2);
  CHECK(opt.param_groups()[0].params().size() == 2);
  CHECK(opt.param_groups()[1].params().size() == 7);

  // The reference: a HybridOptimizer over Eigen copies of the same values, the same roles.
  using M = matopt::RowMatrix<T>;
  matopt::HybridOptimizer<T> ref(matopt::make_optimizer<T>("muon", {{"weight_decay", "0.01"}}));
  std::vector<M> w, g;
  std::vector<std::string> names;
  for (const auto& item : net->named_parameters()) {
    const auto& t = item.value();
    const auto rows = t.dim() <= 1 ? t.numel() : t.size(0);
    M m = Eigen::Map<const M>(t.data_ptr<T>(), rows, t.numel() / rows);
    w.push_back(m);
    g.push_back(m);
    names.push_back(item.key());
  }
  for (std::size_t i = 0; i < w.size(); ++i) {
    const Role role = names[i] == "emb.weight" ? Role::Embedding : names[i].rfind("head.", 0) == 0 ? Role::Head : Role::Auto;
    ref.add(names[i], matopt::view(w[i]), role);
  }
  for (int k = 0; k < 3; ++k) {
    set_grads(net, k);
    std::vector<matopt::MatrixView<const T>> gv;
    std::size_t i = 0;
    for (const auto& p : net->parameters()) {
      g[i] = Eigen::Map<const M>(p.grad().data_ptr<T>(), w[i].rows(), w[i].cols());
      gv.push_back(matopt::view(std::as_const(g[i])));
      ++i;
    }
    opt.step();
    ref.step(gv);
  }
  std::size_t i = 0;
  for (const auto& item : net->named_parameters()) {
    CAPTURE(item.key());
    CHECK(std::memcmp(item.value().data_ptr<T>(), w[i].data(), std::size_t(w[i].size()) * sizeof(T)) == 0);
    CHECK(opt.effective_lr(item.key()) == doctest::Approx(double(ref.effective_lr(i))).epsilon(1e-6));
    ++i;
  }
}

TEST_CASE_TEMPLATE("TorchOptimizer's AdamW route matches torch::optim::AdamW", T, float, double) {
  const auto dtype = std::is_same_v<T, float> ? torch::kFloat32 : torch::kFloat64;
  Net a = make_net(dtype, 2), b = make_net(dtype, 2);
  matopt::TorchOptions o;
  o.adamw = {{"lr", "1e-3"}, {"beta1", "0.9"}, {"beta2", "0.999"}, {"eps", "1e-8"}, {"weight_decay", "0.01"}};
  matopt::TorchOptimizer ours(a->named_parameters(), "rmnp", {}, o);
  std::vector<torch::Tensor> adamw_params;  // what ours routes to AdamW, as torch's optimizer's own params
  for (const auto& item : b->named_parameters())
    if (ours.route(item.key()) == Route::AdamW) adamw_params.push_back(item.value());
  torch::optim::AdamW theirs(adamw_params, torch::optim::AdamWOptions(1e-3).betas({0.9, 0.999}).eps(1e-8).weight_decay(0.01));
  for (int k = 0; k < 5; ++k) {
    set_grads(a, k);
    set_grads(b, k);
    ours.step();
    theirs.step();
  }
  // Five steps of 1e-3 from the same start: the two implementations differ by rounding only.
  const double tol = std::is_same_v<T, float> ? 2e-7 : 1e-15;
  const auto pb = b->named_parameters();
  for (const auto& item : a->named_parameters()) {
    if (ours.route(item.key()) != Route::AdamW) continue;
    CAPTURE(item.key());
    const double diff = (item.value() - pb[item.key()]).abs().max().item<double>();
    CHECK(diff <= tol);
    CHECK(!bitwise_equal(item.value(), make_net(dtype, 2)->named_parameters()[item.key()]));  // it moved
  }
}

TEST_CASE_TEMPLATE("TorchOptimizer's non-matrix route can be Lion (vector_optimizer = lion)", T, float, double) {
  const auto dtype = std::is_same_v<T, float> ? torch::kFloat32 : torch::kFloat64;
  Net net = make_net(dtype, 3);
  matopt::TorchOptions o;
  o.vector_optimizer = "lion";
  o.adamw = {{"lr", "1e-3"}, {"beta1", "0.9"}, {"beta2", "0.99"}, {"weight_decay", "0.1"}};
  matopt::TorchOptimizer opt(net->named_parameters(), "muon", {}, o);
  // Lion written here with torch's own ops (variants.md §5: W <- W (1 - lr wd) - lr sign(b1 m + (1 - b1) g),
  // m <- b2 m + (1 - b2) g), on copies of the parameters that opt routes to its second optimizer.
  std::map<std::string, torch::Tensor> w, m;
  for (const auto& item : net->named_parameters())
    if (opt.route(item.key()) == Route::AdamW) {
      w[item.key()] = item.value().detach().clone();
      m[item.key()] = torch::zeros_like(item.value());
    }
  REQUIRE(w.size() == 7);
  for (int k = 0; k < 3; ++k) {
    set_grads(net, k);
    torch::NoGradGuard no_grad;
    for (const auto& item : net->named_parameters()) {
      if (!w.count(item.key())) continue;
      const torch::Tensor g = item.value().grad();
      torch::Tensor& wk = w[item.key()];
      wk.mul_(1 - 1e-3 * 0.1).sub_(1e-3 * (0.9 * m[item.key()] + 0.1 * g).sign());
      m[item.key()].mul_(0.99).add_(0.01 * g);
    }
    opt.step();
  }
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-14;  // (rounding of the decay and of b1 m + (1 - b1) g)
  for (const auto& item : net->named_parameters()) {
    if (!w.count(item.key())) continue;
    CAPTURE(item.key());
    CHECK((item.value() - w[item.key()]).abs().max().item<double>() <= tol);
  }
  matopt::TorchOptions bad;
  bad.vector_optimizer = "sgd";
  CHECK(error_of([&] { matopt::TorchOptimizer(net->named_parameters(), "muon", {}, bad); })
            .find("vector_optimizer 'sgd' is not one of adamw, lion") != std::string::npos);
}

TEST_CASE("TorchOptimizer: a param group's lr change and libtorch's StepLR take effect") {
  Net a = make_net(torch::kFloat64, 3), b = make_net(torch::kFloat64, 3);
  matopt::TorchOptimizer oa(a->named_parameters(), "muon"), ob(b->named_parameters(), "muon");
  set_grads(a, 0);
  set_grads(b, 0);
  oa.step();
  ob.step();
  const double lr = oa.param_groups()[0].options().get_lr();
  CHECK(lr == doctest::Approx(0.02).epsilon(1e-7));
  ob.param_groups()[0].options().set_lr(2 * lr);  // torch's own options: b's matrix route at twice the lr
  const auto before = snapshot(a);
  set_grads(a, 1);
  set_grads(b, 1);
  oa.step();
  ob.step();
  // Muon's update is lr * s(m, n) * O (weight decay 0): twice the lr, twice the change, to rounding.
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  std::size_t i = 0;
  for (const auto& item : pa) {
    CAPTURE(item.key());
    const auto da = item.value() - before[i], db = pb[item.key()] - before[i];
    ++i;
    if (oa.route(item.key()) == Route::Matrix)
      CHECK((db - 2 * da).abs().max().item<double>() <= 1e-14);
    else
      CHECK(bitwise_equal(da, db));  // AdamW group untouched
  }
  CHECK(ob.effective_lr("fc1.weight") == doctest::Approx(2 * oa.effective_lr("fc1.weight")).epsilon(1e-12));

  torch::optim::StepLR schedule(oa, /*step_size=*/1, /*gamma=*/0.5);
  const double adam_lr = oa.param_groups()[1].options().get_lr();
  schedule.step();  // libtorch's StepLR: the first step() is epoch 0 (lrs unchanged), each later one multiplies
  CHECK(oa.param_groups()[0].options().get_lr() == lr);
  schedule.step();
  CHECK(oa.param_groups()[0].options().get_lr() == doctest::Approx(lr / 2).epsilon(1e-12));
  CHECK(oa.param_groups()[1].options().get_lr() == doctest::Approx(adam_lr / 2).epsilon(1e-12));
  CHECK(oa.effective_lr("emb.weight") == doctest::Approx(adam_lr / 2).epsilon(1e-7));

  // lr 0 is not a matopt lr: refused at step, nothing changes.
  oa.param_groups()[0].options().set_lr(0);
  const auto kept = snapshot(a);
  set_grads(a, 2);
  CHECK(error_of([&] { oa.step(); }).find("param group 0: lr must be > 0") != std::string::npos);
  for (std::size_t j = 0; j < kept.size(); ++j) CHECK(bitwise_equal(kept[j], a->parameters()[j]));
}

TEST_CASE("TorchOptimizer: torch::save and torch::load resume bitwise, and a mismatched archive changes nothing") {
  Net a = make_net(torch::kFloat32, 4);
  matopt::TorchOptimizer oa(a->named_parameters(), "orscale");
  for (int k = 0; k < 2; ++k) {
    set_grads(a, k);
    oa.step();
  }
  oa.param_groups()[1].options().set_lr(5e-4);
  std::stringstream model_bytes, opt_bytes;
  torch::save(a, model_bytes);
  torch::save(oa, opt_bytes);
  for (int k = 2; k < 5; ++k) {
    set_grads(a, k);
    oa.step();
  }

  // Other weights and a fresh state, then the saved ones. torch::load gives the module's tensors new storage
  // (Tensor::set_): the optimizer, built before, steps the new storage.
  Net b = make_net(torch::kFloat32, 99);
  matopt::TorchOptimizer ob(b->named_parameters(), "orscale");
  const void* old_storage = b->fc1->weight.data_ptr();
  torch::load(b, model_bytes);
  torch::load(ob, opt_bytes);
  CHECK(b->fc1->weight.data_ptr() != old_storage);
  CHECK(ob.param_groups()[1].options().get_lr() == 5e-4);
  for (int k = 2; k < 5; ++k) {
    set_grads(b, k);
    ob.step();
  }
  const auto pb = b->named_parameters();
  for (const auto& item : a->named_parameters()) {
    CAPTURE(item.key());
    CHECK(bitwise_equal(item.value(), pb[item.key()]));
  }

  // Another optimizer's archive: refused with the reason, nothing restored.
  Net c = make_net(torch::kFloat32, 5);
  matopt::TorchOptimizer oc(c->named_parameters(), "muon");
  opt_bytes.seekg(0);
  CHECK_THROWS_WITH_AS(torch::load(oc, opt_bytes), doctest::Contains("was stepped by 'matopt::OrScale"),
                       matopt::CheckpointError);
  Net fresh = make_net(torch::kFloat32, 5);  // oc is still a fresh optimizer: it steps as one
  matopt::TorchOptimizer of(fresh->named_parameters(), "muon");
  for (int k = 0; k < 2; ++k) {
    set_grads(c, k);
    set_grads(fresh, k);
    oc.step();
    of.step();
  }
  const auto pf = fresh->named_parameters();
  for (const auto& item : c->named_parameters()) CHECK(bitwise_equal(item.value(), pf[item.key()]));
}

TEST_CASE("TorchOptimizer refuses what it cannot step in place, naming the parameter, dtype, shape and strides") {
  auto refused = [](torch::Tensor t) {
    torch::OrderedDict<std::string, torch::Tensor> params;
    params.insert("fc.weight", t);
    return error_of([&] { matopt::TorchOptimizer opt(params, "muon"); });
  };
  const std::string transposed = refused(torch::zeros({4, 3}).t());
  CHECK(transposed.find("'fc.weight' (Float, cpu, shape [3, 4], strides [1, 3])") != std::string::npos);
  CHECK(transposed.find("not contiguous") != std::string::npos);
  CHECK(refused(torch::zeros({4, 3}, torch::kHalf)).find("(Half, cpu, shape [4, 3], strides [3, 1]): matopt steps "
                                                          "float32 and float64 tensors only") != std::string::npos);
  CHECK(refused(torch::zeros({4, 3}, torch::kInt64)).find("float32 and float64") != std::string::npos);

  torch::OrderedDict<std::string, torch::Tensor> mixed;
  mixed.insert("a", torch::zeros({4, 3}));
  mixed.insert("b", torch::zeros({4, 3}, torch::kFloat64));
  CHECK(error_of([&] { matopt::TorchOptimizer opt(mixed, "muon"); }).find("one dtype") != std::string::npos);

  // A gradient it cannot read in place: refused at step, every parameter and state unchanged.
  Net net = make_net(torch::kFloat32, 6);
  matopt::TorchOptimizer opt(net->named_parameters(), "muon");
  set_grads(net, 0);
  opt.step();
  const auto kept = snapshot(net);
  set_grads(net, 1);
  net->fc1->weight.mutable_grad() = torch::zeros({6, 8}).t();  // right shape, transposed storage
  const std::string e = error_of([&] { opt.step(); });
  CHECK(e.find("gradient of 'fc1.weight' (Float, cpu, shape [8, 6], strides [1, 8])") != std::string::npos);
  for (std::size_t j = 0; j < kept.size(); ++j) CHECK(bitwise_equal(kept[j], net->parameters()[j]));
  CHECK(opt.hybrid<float>().effective_lr(0) > 0);

  // A parameter whose storage became another dtype since construction: refused at step, nothing changed.
  set_grads(net, 2);
  {
    torch::NoGradGuard no_grad;
    net->fc1->weight.set_data(torch::zeros({8, 6}, torch::kFloat64));
  }
  const auto kept2 = snapshot(net);
  CHECK(error_of([&] { opt.step(); }).find("'fc1.weight' (Double, cpu, shape [8, 6], strides [6, 1]) changed since the "
                                           "optimizer was built") != std::string::npos);
  for (std::size_t j = 0; j < kept2.size(); ++j) CHECK(bitwise_equal(kept2[j], net->parameters()[j]));
}

TEST_CASE("TorchOptimizer skips parameters without a gradient, runs the closure, and bumps version counters") {
  Net net = make_net(torch::kFloat32, 7);
  matopt::TorchOptimizer opt(net->named_parameters(), "rmnp");
  set_grads(net, 0);
  net->fc1->bias.mutable_grad() = torch::Tensor();  // no gradient this step
  const auto bias = net->fc1->bias.detach().clone(), weight = net->fc1->weight.detach().clone();
  const auto version = net->fc1->weight._version(), bias_version = net->fc1->bias._version();
  int calls = 0;
  const auto loss = opt.step([&] {
    ++calls;
    return torch::ones({}) * 3;
  });
  CHECK(calls == 1);
  CHECK(loss.item<float>() == 3);
  CHECK(bitwise_equal(net->fc1->bias, bias));
  CHECK(!bitwise_equal(net->fc1->weight, weight));
  CHECK(net->fc1->weight._version() > version);
  CHECK(net->fc1->bias._version() == bias_version);  // not stepped: its counter is not advanced

  // zero_grad is torch's own, over the same param groups.
  opt.zero_grad();
  for (const auto& p : net->parameters())
    if (p.grad().defined()) CHECK(p.grad().abs().max().item<float>() == 0);
}

TEST_CASE("TorchOptimizer: explicit param groups with their own lr, and roles by name override the rules") {
  Net net = make_net(torch::kFloat32, 8);
  std::vector<matopt::TorchParamGroup> groups(2);
  groups[0].params = {{"fc1.weight", net->fc1->weight}, {"conv.weight", net->conv->weight}};
  groups[0].route = Route::Matrix;
  groups[0].lr = 0.01;
  groups[1].params = {{"fc1.bias", net->fc1->bias}};
  groups[1].route = Route::AdamW;
  matopt::TorchOptimizer opt(groups, "muon");
  CHECK(opt.param_groups()[0].options().get_lr() == 0.01);
  CHECK(opt.param_groups()[1].options().get_lr() == doctest::Approx(3e-4).epsilon(1e-6));  // AdamW's default

  groups[1].params.push_back({"fc2.weight", net->fc1->weight.detach().clone()});
  groups[0].params.push_back({"norm.weight", net->norm->weight});
  CHECK(error_of([&] { matopt::TorchOptimizer bad(groups, "muon"); }).find("'norm.weight'") != std::string::npos);

  // Two names over one storage (tied weights): stepped once, under its first name; both names are known.
  torch::OrderedDict<std::string, torch::Tensor> tied;
  tied.insert("emb.weight", net->fc1->weight);
  tied.insert("out.weight", net->fc1->weight);
  matopt::TorchOptimizer once(tied, "muon");
  CHECK(once.names() == std::vector<std::string>{"emb.weight"});
  CHECK(once.route("out.weight") == once.route("emb.weight"));

  matopt::TorchOptions o;
  o.roles["head.weight"] = Role::Hidden;  // the head to the matrix optimizer, by name
  o.role = [](const std::string& name, const torch::Tensor&) { return name == "emb.weight" ? Role::Hidden : Role::Auto; };
  matopt::TorchOptimizer custom(net->named_parameters(), "muon", {}, o);
  CHECK(custom.route("head.weight") == Route::Matrix);
  CHECK(custom.route("emb.weight") == Route::Matrix);
  CHECK(custom.route("head.bias") == Route::AdamW);
}

TEST_CASE_TEMPLATE("TorchOptimizer: an explicit TorchParamGroup's lr and weight decay are what its steps use", T, float,
                   double) {
  Net net = make_net(dtype_of<T>(), 11);
  // Four groups, none at its route's settings (RMNP here lr 0.03, decay 0.02; AdamW lr 2e-3, decay 0.01): matrix
  // groups at lr 0.005 (the route's decay) and 0.01 (decay 0.1), an AdamW group with its own lr and decay and one
  // with neither; the other parameters are in no group.
  std::vector<matopt::TorchParamGroup> groups(4);
  groups[0] = {{{"fc1.weight", net->fc1->weight}}, Route::Matrix, 0.005, std::nullopt};
  groups[1] = {{{"conv.weight", net->conv->weight}}, Route::Matrix, 0.01, 0.1};
  groups[2] = {{{"fc1.bias", net->fc1->bias}, {"norm.weight", net->norm->weight}}, Route::AdamW, 1e-3, 0.05};
  groups[3] = {{{"head.bias", net->head->bias}}, Route::AdamW, std::nullopt, std::nullopt};
  matopt::TorchOptions o;
  o.adamw = {{"lr", "2e-3"}, {"weight_decay", "0.01"}};
  matopt::TorchOptimizer opt(groups, "rmnp", {{"lr", "0.03"}, {"weight_decay", "0.02"}}, o);
  const double lr[] = {0.005, 0.01, 1e-3, double(T(2e-3))};
  const double wd[] = {double(T(0.02)), 0.1, 0.05, double(T(0.01))};
  for (std::size_t g = 0; g < 4; ++g) {
    CAPTURE(g);
    CHECK(group_options(opt, g).lr() == lr[g]);
    CHECK(group_options(opt, g).weight_decay() == wd[g]);
  }
  const std::map<std::string, std::size_t> group_of = {
      {"fc1.weight", 0}, {"conv.weight", 1}, {"fc1.bias", 2}, {"norm.weight", 2}, {"head.bias", 3}};
  set_grads(net, 0);  // the same gradients at both steps
  for (int k = 0; k < 2; ++k) {
    const auto before = snapshot(net);
    opt.step();
    std::size_t i = 0;
    for (const auto& item : net->named_parameters()) {
      CAPTURE(k);
      CAPTURE(item.key());
      const torch::Tensor& b = before[i++];
      const auto it = group_of.find(item.key());
      if (it == group_of.end()) {
        CHECK(bitwise_equal(item.value(), b));  // a gradient, but in no group: not stepped
        continue;
      }
      const std::size_t g = it->second;
      const auto expected = constant_grad_step(b, item.value().grad(), groups[g].route, lr[g], wd[g]);
      CHECK(max_diff(item.value(), expected) <= step_tol<T>(b));
    }
  }
}

TEST_CASE_TEMPLATE("TorchOptimizer: after libtorch's StepLR halves the lr, the next step's update halves, on both "
                   "routes",
                   T, float, double) {
  Net net = make_net(dtype_of<T>(), 12);
  matopt::TorchOptimizer opt(net->named_parameters(), "rmnp");  // no weight decay on either route
  torch::optim::StepLR schedule(opt, /*step_size=*/1, /*gamma=*/0.5);
  set_grads(net, 0);  // the same gradients at every step: the updates differ by the lr only
  std::vector<torch::Tensor> last;
  double last_lr[2] = {0, 0};
  for (int k = 0; k < 4; ++k) {
    CAPTURE(k);
    const double lr[2] = {group_options(opt, 0).lr(), group_options(opt, 1).lr()};
    if (k >= 2)  // libtorch's StepLR: its first step() is epoch 0 (lr kept), each later one halves
      for (int g = 0; g < 2; ++g) REQUIRE(lr[g] == last_lr[g] / 2);
    const double no_decay[2] = {0, 0};
    const auto [before, update] = step_checked<T>(net, opt, lr, no_decay);
    schedule.step();
    if (k >= 2)
      for (std::size_t i = 0; i < update.size(); ++i)  // x0.5 of the step before
        CHECK(max_diff(update[i], 0.5 * last[i]) <= step_tol<T>(before[i]));
    last = update;
    last_lr[0] = lr[0];
    last_lr[1] = lr[1];
  }
}

TEST_CASE_TEMPLATE("TorchOptimizer: weight decay and lr set through a param group's options() take effect at the next "
                   "step, on both routes",
                   T, float, double) {
  Net net = make_net(dtype_of<T>(), 13);
  matopt::TorchOptimizer opt(net->named_parameters(), "rmnp");  // decay 0 on both routes
  set_grads(net, 0);  // the same gradients at every step
  std::vector<torch::Tensor> last;
  for (int k = 0; k < 3; ++k) {
    CAPTURE(k);
    if (k == 1) {  // decay on: decoupled, the update gains -lr wd W (Loshchilov & Hutter)
      group_options(opt, 0).weight_decay(0.1);
      group_options(opt, 1).weight_decay(0.05);
    }
    if (k == 2) {  // torch's own setter, on both groups
      opt.param_groups()[0].options().set_lr(0.01);
      opt.param_groups()[1].options().set_lr(1.2e-3);
    }
    const double lr[2] = {group_options(opt, 0).lr(), group_options(opt, 1).lr()};
    const double wd[2] = {group_options(opt, 0).weight_decay(), group_options(opt, 1).weight_decay()};
    const auto [before, update] = step_checked<T>(net, opt, lr, wd);
    if (k == 1) {  // same lr, same direction: the update changed by exactly -lr (wd - 0) W
      std::size_t i = 0;
      for (const auto& item : net->named_parameters()) {
        CAPTURE(item.key());
        const std::size_t g = opt.route(item.key()) == Route::Matrix ? 0 : 1;
        CHECK(max_diff(update[i] - last[i], -lr[g] * wd[g] * before[i].to(torch::kFloat64)) <= step_tol<T>(before[i]));
        ++i;
      }
    }
    last = update;
  }
  CHECK(group_options(opt, 1).lr() == 1.2e-3);
}

TEST_CASE_TEMPLATE("TorchOptimizer: a tied weight (one tensor registered under two names) is stepped once per step", T,
                   float, double) {
  torch::manual_seed(14);
  TiedNet net;
  net->to(dtype_of<T>());
  const auto named = net->named_parameters();
  REQUIRE(named.size() == 4);  // libtorch lists a tied tensor under both of its names
  REQUIRE(named["layer1.weight"].is_same(named["layer0.weight"]));
  REQUIRE(named["lm_head.weight"].is_same(named["wte.weight"]));
  matopt::TorchOptimizer opt(named, "rmnp");
  CHECK(opt.names() == std::vector<std::string>{"layer0.weight", "wte.weight"});
  CHECK(opt.route("layer1.weight") == Route::Matrix);
  CHECK(opt.route("lm_head.weight") == Route::AdamW);  // the embedding's route: its first name's
  CHECK(opt.param_groups()[0].params().size() == 1);
  CHECK(opt.param_groups()[1].params().size() == 1);
  // One gradient per tensor, both uses summed by autograd; kept for two steps.
  const auto tokens = (torch::arange(12, torch::kInt64) * 7 + 3).remainder(10);
  torch::nn::functional::cross_entropy(net->forward(tokens), (tokens * 3 + 1).remainder(10)).backward();
  const double lr[2] = {group_options(opt, 0).lr(), group_options(opt, 1).lr()};
  for (int k = 0; k < 2; ++k) {
    CAPTURE(k);
    const auto w0 = net->layer0->weight.detach().clone(), e0 = net->wte->weight.detach().clone();
    opt.step();
    // Stepped twice, each would move by twice the closed form's step (the second direction is a multiple of G).
    CHECK(max_diff(net->layer0->weight, constant_grad_step(w0, net->layer0->weight.grad(), Route::Matrix, lr[0], 0)) <=
          step_tol<T>(w0));
    CHECK(max_diff(net->wte->weight, constant_grad_step(e0, net->wte->weight.grad(), Route::AdamW, lr[1], 0)) <=
          step_tol<T>(e0));
  }
}

TEST_CASE_TEMPLATE("TorchOptimizer built from a typed optimizer steps with it, its options included, and refuses "
                   "another scalar type",
                   T, float, double) {
  using Other = std::conditional_t<std::is_same_v<T, float>, double, float>;
  Net net = make_net(dtype_of<T>(), 15);
  typename matopt::RMNP<T>::Options ro;
  ro.lr = T(0.01);
  ro.momentum = T(0.9);
  ro.weight_decay = T(0.05);
  matopt::TorchOptions o;
  o.adamw = {{"lr", "2e-3"}, {"beta2", "0.99"}, {"weight_decay", "0.1"}};
  matopt::TorchOptimizer opt(net->named_parameters(), matopt::RMNP<T>(ro), o);
  CHECK(group_options(opt, 0).lr() == double(ro.lr));
  CHECK(group_options(opt, 0).weight_decay() == double(ro.weight_decay));
  CHECK(opt.route("fc1.weight") == Route::Matrix);
  CHECK(opt.route("fc1.bias") == Route::AdamW);

  // The reference, written out with torch ops in double. RMNP (arXiv 2603.20527; momentum.hpp's Sum-Nesterov):
  // U = (1 + b) G + b^2 V, V <- b V + G, W <- W (1 - lr wd) - lr s U_i / ||U_i||. AdamW as torch.optim.AdamW.
  const double b = double(ro.momentum), lr = double(ro.lr), wd = double(ro.weight_decay);
  const double a_lr = double(T(2e-3)), b1 = double(T(0.9)), b2 = double(T(0.99)), a_wd = double(T(0.1));
  std::map<std::string, torch::Tensor> w, v, m, s;
  for (const auto& item : net->named_parameters()) {
    w[item.key()] = item.value().detach().to(torch::kFloat64).clone();  // (to() of a double tensor is itself)
    v[item.key()] = torch::zeros_like(w[item.key()]);
    m[item.key()] = torch::zeros_like(w[item.key()]);
    s[item.key()] = torch::zeros_like(w[item.key()]);
  }
  for (int k = 0; k < 3; ++k) {
    set_grads(net, k);
    opt.step();
    for (const auto& item : net->named_parameters()) {
      const std::string& n = item.key();
      const auto g = item.value().grad().to(torch::kFloat64);
      if (opt.route(n) == Route::Matrix) {
        const auto u = (1 + b) * g + b * b * v[n];
        v[n] = b * v[n] + g;
        w[n] = w[n] * (1 - lr * wd) - lr * muon_scale(w[n]) * rows_normalized(u);
      } else {
        const double t = k + 1;
        m[n] = b1 * m[n] + (1 - b1) * g;
        s[n] = b2 * s[n] + (1 - b2) * g * g;
        w[n] = w[n] * (1 - a_lr * a_wd) -
               a_lr / (1 - std::pow(b1, t)) * m[n] / (s[n].sqrt() / std::sqrt(1 - std::pow(b2, t)) + 1e-8);
      }
    }
  }
  for (const auto& item : net->named_parameters()) {
    CAPTURE(item.key());
    CHECK(max_diff(item.value(), w[item.key()]) <= 2 * step_tol<T>(w[item.key()]));  // three steps' rounding
  }

  // Any composition, not only a preset: row normalization without momentum at unit scale, W <- W - lr G_i/||G_i||
  // (under RMNP's factor the 8x6 fc1.weight would move sqrt(4/3) as far).
  using RowsOnly = matopt::Optimizer<T, matopt::RowNormalize, matopt::NoMomentum, matopt::Static<matopt::shape::Unit>>;
  typename RowsOnly::Options po;
  po.lr = T(0.04);
  Net net2 = make_net(dtype_of<T>(), 16);
  matopt::TorchOptimizer rows_only(net2->named_parameters(), RowsOnly(po));
  set_grads(net2, 0);
  const auto before = snapshot(net2);
  rows_only.step();
  std::size_t i = 0;
  for (const auto& item : net2->named_parameters()) {
    CAPTURE(item.key());
    const torch::Tensor& w0 = before[i++];
    if (rows_only.route(item.key()) != Route::Matrix) continue;
    const auto expected = w0.to(torch::kFloat64) - double(po.lr) * rows_normalized(item.value().grad());
    CHECK(max_diff(item.value(), expected) <= step_tol<T>(w0));
  }

  const std::string refused =
      error_of([&] { matopt::TorchOptimizer bad(net->named_parameters(), matopt::RMNP<Other>{}); });
  CHECK(refused.find(std::string("the matrix optimizer's scalar type is not the parameters' dtype (") +
                     (std::is_same_v<T, float> ? "float32" : "float64") + ")") != std::string::npos);
}

TEST_CASE_TEMPLATE("TorchOptimizer: torch::save and torch::load resume bitwise for NorMuon with AdamW and Muon with "
                   "Lion, with the group options",
                   T, float, double) {
  const auto dtype = dtype_of<T>();
  for (const auto& setup : {std::pair{"normuon", "adamw"}, std::pair{"muon", "lion"}}) {
    const std::string preset = setup.first;
    CAPTURE(preset);
    matopt::TorchOptions o;
    o.vector_optimizer = setup.second;
    Net a = make_net(dtype, 21);
    matopt::TorchOptimizer oa(a->named_parameters(), preset, {}, o);
    for (int k = 0; k < 2; ++k) {
      set_grads(a, k);
      oa.step();
    }
    group_options(oa, 0).lr(0.015).weight_decay(0.03);  // changed through torch's options: the archive keeps them
    group_options(oa, 1).weight_decay(0.02);
    std::stringstream model_bytes, opt_bytes;
    torch::save(a, model_bytes);
    torch::save(oa, opt_bytes);
    const auto saved = snapshot(a);
    for (int k = 2; k < 5; ++k) {
      set_grads(a, k);
      oa.step();
    }

    Net b = make_net(dtype, 98);
    matopt::TorchOptimizer ob(b->named_parameters(), preset, {}, o);
    torch::load(b, model_bytes);
    torch::load(ob, opt_bytes);
    for (std::size_t g = 0; g < 2; ++g) {
      CHECK(group_options(ob, g).lr() == group_options(oa, g).lr());
      CHECK(group_options(ob, g).weight_decay() == group_options(oa, g).weight_decay());
    }
    for (int k = 2; k < 5; ++k) {
      set_grads(b, k);
      ob.step();
    }
    const auto pb = b->named_parameters();
    std::size_t i = 0;
    for (const auto& item : a->named_parameters()) {
      CAPTURE(item.key());
      CHECK(bitwise_equal(item.value(), pb[item.key()]));
      CHECK(!bitwise_equal(item.value(), saved[i++]));  // the resumed steps moved it
    }
  }
}

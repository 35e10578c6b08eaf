// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// TorchOptimizer: matopt as a torch::optim::Optimizer (target matopt::libtorch; not in <matopt/matopt.hpp>).
// matopt as a libtorch optimizer: matopt::TorchOptimizer derives from torch::optim::Optimizer, so a libtorch
// program switches to matopt by changing one line:
//
//   // torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
//   matopt::TorchOptimizer opt(model->named_parameters(), "muon", {{"lr", "0.02"}});
//   ...
//   opt.zero_grad(); loss.backward(); opt.step();
//
// Routing as HybridOptimizer's (docs/math.md): hidden 2-D weights, and conv weights through their (out, in*kh*kw)
// view, go to the matrix optimizer; 1-D parameters, embeddings and output heads to AdamW (name rules below,
// which the user can override). The two routes are torch's param groups 0 ("matrix") and 1 ("adamw"), whose
// options carry lr and weight decay: group.options().set_lr(x) and libtorch's schedulers change them. matopt
// steps each tensor's own storage (zero copy); what it cannot step in place is refused at construction.
//
// Target matopt::libtorch (defined when CMake finds Torch); not included by <matopt/matopt.hpp>.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>

#include "matopt/facade/any_optimizer.hpp"
#include "matopt/hybrid/hybrid_optimizer.hpp"
#include "matopt/version.hpp"

namespace matopt {

/// A torch param group's options: the lr and weight decay matopt applies to the group's parameters (what
/// group.options().set_lr() and libtorch's schedulers change) and the route its parameters take.
class TorchGroupOptions : public torch::optim::OptimizerCloneableOptions<TorchGroupOptions> {
 public:
  /// Options with this lr (default 0.02), weight decay (default 0) and route (default the matrix route).
  explicit TorchGroupOptions(double lr = 0.02, double weight_decay = 0, Route route = Route::Matrix)
      : lr_(lr), weight_decay_(weight_decay), route_(route) {}
  /// lr() and lr(value): the group's learning rate.
  TORCH_ARG(double, lr);
  /// weight_decay() and weight_decay(value): the group's weight decay.
  TORCH_ARG(double, weight_decay);
  /// route() and route(value): the route of the group's parameters.
  TORCH_ARG(Route, route);

 public:
  /// The group's lr (what libtorch's schedulers read).
  double get_lr() const override { return lr(); }
  /// Sets the group's lr (what libtorch's schedulers call).
  void set_lr(const double lr) override { this->lr(lr); }
};

/// An explicit param group: named tensors that all take `route`, with their own lr and weight decay
/// (unset: the route's optimizer's).
struct TorchParamGroup {
  /// The group's parameters, by name.
  std::vector<std::pair<std::string, torch::Tensor>> params;
  /// The route they all take.
  Route route = Route::Matrix;
  /// The group's lr (unset: the route optimizer's).
  std::optional<double> lr;
  /// The group's weight decay (unset: the route optimizer's).
  std::optional<double> weight_decay;
};

/// How TorchOptimizer routes and configures what it is given.
struct TorchOptions {
  /// The optimizer of the non-matrix route (vectors, embeddings, heads: the route called AdamW): "adamw"
  /// (matopt::AdamW) or "lion" (matopt::Lion, lion.hpp; `docs/math.md#lion`).
  std::string vector_optimizer = "adamw";
  /// That route's options, by the facade's keys (e.g. {{"lr", "1e-3"}, {"beta2", "0.999"}}; Lion's are lr,
  /// beta1, beta2, weight_decay); unset keys keep the optimizer's defaults.
  Config adamw;
  /// Roles by exact parameter name; they take precedence over `role` and the name rules.
  std::map<std::string, Role> roles;
  /// A role per parameter (name, tensor); Role::Auto falls through to the name rules.
  std::function<Role(const std::string&, const torch::Tensor&)> role;
  bool embeddings_to_adamw = true;  ///< false: embeddings go to the matrix optimizer
  bool heads_to_adamw = true;       ///< false: output heads go to the matrix optimizer
  NonFinite non_finite = NonFinite::Throw;  ///< HybridOptimizer::Options::non_finite
};

namespace detail {

/// The default name rules: a parameter whose dotted name has a module component containing "emb", or
/// named wte or wpe (GPT-2's), is an embedding; one with a component head, lm_head or classifier is an
/// output head; anything else is Auto (a 2-D-or-more tensor is a hidden matrix, a vector is a vector).
inline Role torch_role_by_name(const std::string& name) {
  std::vector<std::string_view> parts;
  std::string_view rest(name);
  for (std::size_t dot; (dot = rest.find('.')) != std::string_view::npos; rest.remove_prefix(dot + 1))
    parts.push_back(rest.substr(0, dot));
  for (std::string_view p : parts)  // module components only, not the final "weight" / "bias"
    if (p.find("emb") != std::string_view::npos || p == "wte" || p == "wpe") return Role::Embedding;
  for (std::string_view p : parts)
    if (p == "head" || p == "lm_head" || p == "classifier") return Role::Head;
  return Role::Auto;
}

inline std::string torch_describe(const torch::Tensor& t) {
  return std::string(c10::toString(t.scalar_type())) + ", " + t.device().str() + ", shape " + c10::str(t.sizes()) +
         ", strides " + c10::str(t.strides());
}

/// The matrix matopt steps for a tensor, over its own storage (row-major, PyTorch's layout): (size(0),
/// numel / size(0)) for two or more dimensions (a Linear weight as it is; a conv weight (out, in, kh, kw) as
/// (out, in*kh*kw)); a column of numel() entries for a vector or a scalar.
template <class T, class Tensor>
MatrixView<T> torch_view(const Tensor& t) {
  using Plain = std::remove_const_t<T>;
  const Index rows = t.dim() <= 1 ? Index(t.numel()) : Index(t.size(0));
  const Index cols = t.dim() <= 1 ? 1 : (rows == 0 ? Index(0) : Index(t.numel()) / rows);
  T* data = t.numel() == 0 ? nullptr : static_cast<T*>(t.template data_ptr<Plain>());
  return MatrixView<T>{data, rows, cols, Layout::RowMajor};
}

}  // namespace detail

/// matopt as a libtorch optimizer: derives from torch::optim::Optimizer, so a program switches to matopt by changing
/// one line (`matopt::TorchOptimizer opt(model->named_parameters(), "muon", {{"lr", "0.02"}});`). Routing as
/// HybridOptimizer's: hidden 2-D weights and conv weights (as (out, in*kh*kw)) go to the matrix optimizer; vectors,
/// embeddings and output heads to AdamW (or Lion). The routes are torch param groups 0 ("matrix") and 1 ("adamw"),
/// whose options (TorchGroupOptions) carry lr and weight decay. Each tensor's own storage is stepped (zero copy).
class TorchOptimizer : public torch::optim::Optimizer {
 public:
  /// A module's named_parameters().
  using NamedParameters = torch::OrderedDict<std::string, torch::Tensor>;

  /// From a module's named_parameters(): the matrix route is the preset `preset` with `config` (the
  /// facade's names and keys, make_optimizer), routed by `options`. The parameters' dtype (float32 or
  /// float64, one for all) picks the scalar type.
  explicit TorchOptimizer(const NamedParameters& params, std::string_view preset = "muon", const Config& config = {},
                          TorchOptions options = {})
      : TorchOptimizer(plan(auto_groups(params, options)), Matrix{std::string(preset), config}, options) {}

  /// The same with a typed matrix optimizer (a preset or any composition); its scalar type must be the
  /// parameters' dtype.
  template <class Opt, class = std::enable_if_t<!std::is_convertible_v<Opt, std::string_view>>>
  TorchOptimizer(const NamedParameters& params, Opt matrix, TorchOptions options = {})
      : TorchOptimizer(plan(auto_groups(params, options)), Matrix{AnyOptimizer<typename Opt::Scalar>(std::move(matrix))},
                       options) {}

  /// From explicit param groups, each with its route (and optionally its own lr and weight decay).
  TorchOptimizer(std::vector<TorchParamGroup> groups, std::string_view preset, const Config& config = {},
                 TorchOptions options = {})
      : TorchOptimizer(plan(std::move(groups)), Matrix{std::string(preset), config}, options) {}

  /// One step of every parameter that has a gradient (the others are skipped, as torch's optimizers do),
  /// with each param group's current lr and weight decay. Everything is checked first (storage, gradients'
  /// dtype, device, shape and layout, finite values, group options): on an error nothing changes. With a
  /// closure, it is called first (under autograd) and its loss returned.
  torch::Tensor step(LossClosure closure = nullptr) override {
    torch::Tensor loss;
    if (closure) {
      at::AutoGradMode grad_mode(true);
      loss = closure();
    }
    at::NoGradGuard no_grad;
    std::visit([&](auto& h) { step_with(h); }, hybrid_);
    return loss;
  }

  /// Where a parameter goes, and the lr its update uses (group lr * s(m, n), or * the trust ratio).
  Route route(const std::string& name) const {
    return std::visit([&](const auto& h) { return h.route(index(name)); }, hybrid_);
  }
  /// The lr parameter `name`'s update uses (see route()).
  double effective_lr(const std::string& name) {
    std::size_t i = index(name);
    return std::visit(
        [&](auto& h) {
          sync_groups(h);
          return double(h.effective_lr(i));
        },
        hybrid_);
  }
  /// Parameter names in matopt's order (routing and checkpoints).
  const std::vector<std::string>& names() const { return names_; }

  /// The container underneath (float32 parameters: T = float; float64: T = double).
  template <class T>
  HybridOptimizer<T>& hybrid() {
    if (auto* h = std::get_if<HybridOptimizer<T>>(&hybrid_)) return *h;
    detail::fail("matopt::TorchOptimizer::hybrid", "the parameters are not of this scalar type");
  }

  /// torch::save(opt, path) / torch::load(opt, path): every parameter's optimizer state (matopt's
  /// checksummed checkpoint, HybridOptimizer's format, as a byte tensor) and each group's lr and weight
  /// decay. Loading checks everything first and changes nothing on a mismatch; a run resumes bitwise.
  void save(torch::serialize::OutputArchive& archive) const override {
    const std::string bytes = std::visit([](const auto& h) { return h.checkpoint_bytes(false); }, hybrid_);
    auto blob = torch::empty({std::int64_t(bytes.size())}, torch::kUInt8);
    if (!bytes.empty()) std::memcpy(blob.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
    archive.write("matopt.checkpoint", blob);
    auto lr = torch::empty({std::int64_t(param_groups_.size())}, torch::kFloat64);
    auto wd = torch::empty({std::int64_t(param_groups_.size())}, torch::kFloat64);
    for (std::size_t g = 0; g < param_groups_.size(); ++g) {
      lr[std::int64_t(g)] = options(g).lr();
      wd[std::int64_t(g)] = options(g).weight_decay();
    }
    archive.write("matopt.group_lr", lr);
    archive.write("matopt.group_weight_decay", wd);
  }
  /// Restores what save() wrote; throws CheckpointError and changes nothing if the archive does not fit.
  void load(torch::serialize::InputArchive& archive) override {
    constexpr const char* where = "matopt::TorchOptimizer::load";
    torch::Tensor blob, lr, wd;
    if (!archive.try_read("matopt.checkpoint", blob) || !archive.try_read("matopt.group_lr", lr) ||
        !archive.try_read("matopt.group_weight_decay", wd))
      throw CheckpointError(std::string(where) + ": the archive holds no matopt::TorchOptimizer state");
    const auto groups = std::int64_t(param_groups_.size());
    if (blob.scalar_type() != torch::kUInt8 || blob.dim() != 1 || lr.scalar_type() != torch::kFloat64 ||
        wd.scalar_type() != torch::kFloat64 || lr.numel() != groups || wd.numel() != groups)
      throw CheckpointError(std::string(where) + ": the archive's matopt state does not fit this optimizer (" +
                            std::to_string(groups) + " param groups)");
    blob = blob.contiguous();
    const std::string bytes(reinterpret_cast<const char*>(blob.data_ptr<std::uint8_t>()), std::size_t(blob.numel()));
    std::visit([&](auto& h) { h.restore(bytes); }, hybrid_);  // all or nothing
    for (std::int64_t g = 0; g < groups; ++g) {
      options(std::size_t(g)).lr(lr[g].item<double>());
      options(std::size_t(g)).weight_decay(wd[g].item<double>());
    }
  }

 private:
  struct Entry {
    std::string name;
    torch::Tensor tensor;
    Role role;
    std::size_t group;
  };
  struct Plan {
    std::vector<Entry> entries;
    std::vector<TorchParamGroup> groups;  // routes and optional lr / weight decay; params unused
    torch::ScalarType dtype = torch::kFloat32;
    std::vector<std::pair<std::string, std::string>> aliases;  // a tied weight's other name -> its first name
  };
  /// The matrix route: a preset by name, or a typed optimizer (wrapped).
  struct Matrix {
    std::variant<std::pair<std::string, Config>, AnyOptimizer<float>, AnyOptimizer<double>> spec;
    Matrix(std::string name, Config config) : spec(std::pair{std::move(name), std::move(config)}) {}
    explicit Matrix(AnyOptimizer<float> o) : spec(std::move(o)) {}
    explicit Matrix(AnyOptimizer<double> o) : spec(std::move(o)) {}
    template <class T>
    AnyOptimizer<T> make() const {
      if (const auto* named = std::get_if<0>(&spec)) return make_optimizer<T>(named->first, named->second);
      if (const auto* typed = std::get_if<AnyOptimizer<T>>(&spec)) return *typed;
      detail::fail("matopt::TorchOptimizer", "the matrix optimizer's scalar type is not the parameters' dtype (",
                   std::is_same_v<T, float> ? "float32" : "float64", ")");
    }
  };

  TorchOptimizer(Plan p, const Matrix& matrix, const TorchOptions& options)
      : torch::optim::Optimizer(std::vector<torch::optim::OptimizerParamGroup>{},
                                std::make_unique<TorchGroupOptions>()),
        hybrid_(make_hybrid(p, matrix, options)) {
    for (const Entry& e : p.entries) names_.push_back(e.name);
    // torch's groups, with each route's lr and decay where the group sets none.
    std::vector<std::vector<torch::Tensor>> tensors(p.groups.size());
    for (const Entry& e : p.entries) tensors[e.group].push_back(e.tensor);
    std::visit(
        [&](auto& h) {
          for (std::size_t g = 0; g < p.groups.size(); ++g) {
            auto& route_opt = p.groups[g].route == Route::Matrix ? h.matrix_optimizer() : h.adamw();
            const double lr = p.groups[g].lr.value_or(double(route_opt.lr()));
            const double wd = p.groups[g].weight_decay.value_or(double(route_opt.weight_decay()));
            add_param_group(torch::optim::OptimizerParamGroup(
                tensors[g], std::make_unique<TorchGroupOptions>(lr, wd, p.groups[g].route)));
          }
        },
        hybrid_);
    for (const Entry& e : p.entries) data_.push_back(e.tensor.numel() == 0 ? nullptr : e.tensor.data_ptr());
    for (std::size_t i = 0; i < names_.size(); ++i) index_[names_[i]] = i;
    for (const auto& [alias, first] : p.aliases) index_[alias] = index_.at(first);
    for (const auto& g : p.groups) routes_.push_back(g.route);
    tensors_.reserve(p.entries.size());
    for (const Entry& e : p.entries) {
      tensors_.push_back(e.tensor);
      sizes_.push_back(e.tensor.sizes().vec());
    }
    tensor_dtype_ = p.dtype;
  }

  using Hybrid = std::variant<HybridOptimizer<float>, HybridOptimizer<double>>;

  static Hybrid make_hybrid(const Plan& p, const Matrix& matrix, const TorchOptions& options) {
    auto build = [&](auto tag) -> Hybrid {
      using T = decltype(tag);
      typename HybridOptimizer<T>::Options ho;
      ho.embeddings_to_adamw = options.embeddings_to_adamw;
      ho.heads_to_adamw = options.heads_to_adamw;
      ho.non_finite = options.non_finite;
      if (options.vector_optimizer != "adamw" && options.vector_optimizer != "lion")
        matopt::detail::fail("matopt::TorchOptimizer", "vector_optimizer '", options.vector_optimizer,
                             "' is not one of adamw, lion");
      HybridOptimizer<T> h(matrix.template make<T>(), make_optimizer<T>(options.vector_optimizer, options.adamw), ho);
      for (std::size_t g = 0; g < p.groups.size(); ++g)  // torch group g is the container's group g + 1
        h.add_group({"torch group " + std::to_string(g), T(1), std::nullopt});
      for (const Entry& e : p.entries) {
        const auto v = detail::torch_view<T>(e.tensor);
        h.add(e.name, v, e.role, e.group + 1);
      }
      return h;
    };
    if (p.dtype == torch::kFloat64) return build(double{});
    return build(float{});
  }

  /// The routes of named_parameters(): group 0 the matrix route, group 1 AdamW.
  static std::vector<TorchParamGroup> auto_groups(const NamedParameters& params, const TorchOptions& options) {
    std::vector<TorchParamGroup> groups(2);
    groups[0].route = Route::Matrix;
    groups[1].route = Route::AdamW;
    std::map<const void*, std::size_t> group_of;  // tied weights follow their first name's route
    for (const auto& item : params) {
      const std::string& name = item.key();
      const torch::Tensor& t = item.value();
      if (!t.defined()) {  // refused by plan(), with its name
        groups[1].params.emplace_back(name, t);
        continue;
      }
      if (t.numel() != 0) {
        if (auto it = group_of.find(t.data_ptr()); it != group_of.end()) {
          groups[it->second].params.emplace_back(name, t);
          continue;
        }
      }
      Role role = Role::Auto;
      if (auto it = options.roles.find(name); it != options.roles.end()) role = it->second;
      else if (options.role) role = options.role(name, t);
      if (role == Role::Auto) role = detail::torch_role_by_name(name);
      // Auto, as HybridOptimizer::add: a matrix (two or more dimensions) with more than one row and column.
      if (role == Role::Auto)
        role = (t.dim() >= 2 && t.size(0) > 1 && t.numel() / t.size(0) > 1) ? Role::Hidden : Role::Vector;
      const bool matrix = t.dim() >= 2 && (role == Role::Hidden || (role == Role::Embedding && !options.embeddings_to_adamw) ||
                                           (role == Role::Head && !options.heads_to_adamw));
      groups[matrix ? 0 : 1].params.emplace_back(name, t);
      if (t.numel() != 0) group_of[t.data_ptr()] = matrix ? 0 : 1;
    }
    return groups;
  }

  /// Checks every tensor (refusing what matopt cannot step in place). A group's route decides its
  /// parameters' (a matrix group takes tensors of two or more dimensions).
  static Plan plan(std::vector<TorchParamGroup> groups) {
    constexpr const char* where = "matopt::TorchOptimizer";
    Plan p;
    std::map<const void*, std::string> seen;
    bool first = true;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (groups[g].lr && !(*groups[g].lr > 0))
        detail::fail(where, "param group ", g, ": lr must be > 0 (got ", *groups[g].lr, ")");
      if (groups[g].weight_decay && !(*groups[g].weight_decay >= 0))
        detail::fail(where, "param group ", g, ": weight_decay must be >= 0 (got ", *groups[g].weight_decay, ")");
      for (const auto& [name, t] : groups[g].params) {
        if (!t.defined()) detail::fail(where, "parameter '", name, "' is an undefined tensor");
        const std::string what = "parameter '" + name + "' (" + detail::torch_describe(t) + ")";
        if (t.scalar_type() != torch::kFloat32 && t.scalar_type() != torch::kFloat64)
          detail::fail(where, what, ": matopt steps float32 and float64 tensors only");
        if (!t.device().is_cpu())
          detail::fail(where, what, ": matopt's libtorch integration steps CPU tensors (the CUDA backend is not "
                                    "wired to libtorch)");
        if (!t.is_contiguous())
          detail::fail(where, what, ": not contiguous; matopt steps the tensor's own storage, which must be "
                                    "contiguous row-major (make the parameter contiguous before building the optimizer)");
        if (first) p.dtype = t.scalar_type();
        else if (t.scalar_type() != p.dtype)
          detail::fail(where, what, ": every parameter must have one dtype, and the first is ", c10::toString(p.dtype));
        first = false;
        if (groups[g].route == Route::Matrix && t.dim() < 2)
          detail::fail(where, what, ": in a param group routed to the matrix optimizer, which takes tensors of two or "
                                    "more dimensions (route vectors to AdamW)");
        if (t.numel() != 0) {  // the same storage under two names (tied weights) is stepped once, by its first name
          if (auto it = seen.find(t.data_ptr()); it != seen.end()) {
            p.aliases.emplace_back(name, it->second);
            continue;
          }
          seen[t.data_ptr()] = name;
        }
        p.entries.push_back({name, t, groups[g].route == Route::Matrix ? Role::Hidden : Role::Vector, g});
      }
    }
    p.groups = std::move(groups);
    for (auto& g : p.groups) g.params.clear();
    return p;
  }

  TorchGroupOptions& options(std::size_t g) { return static_cast<TorchGroupOptions&>(param_groups_[g].options()); }
  const TorchGroupOptions& options(std::size_t g) const {
    return static_cast<const TorchGroupOptions&>(param_groups_[g].options());
  }

  std::size_t index(const std::string& name) const {
    const auto it = index_.find(name);
    if (it == index_.end()) detail::fail("matopt::TorchOptimizer", "no parameter named '", name, "'");
    return it->second;
  }

  /// torch's group options into the container's groups (checked: lr > 0, weight_decay >= 0).
  template <class T>
  void sync_groups(HybridOptimizer<T>& h) {
    constexpr const char* where = "matopt::TorchOptimizer::step";
    for (std::size_t g = 0; g < param_groups_.size(); ++g) {
      const TorchGroupOptions& o = options(g);
      if (!(o.lr() > 0)) detail::fail(where, "param group ", g, ": lr must be > 0 (got ", o.lr(), ")");
      if (!(o.weight_decay() >= 0))
        detail::fail(where, "param group ", g, ": weight_decay must be >= 0 (got ", o.weight_decay(), ")");
      if (o.route() != routes_[g])
        detail::fail(where, "param group ", g, ": its route option was changed; routes are fixed at construction");
    }
    for (std::size_t g = 0; g < param_groups_.size(); ++g) {
      h.set_group_lr(g + 1, T(options(g).lr()));
      h.group(g + 1).weight_decay = T(options(g).weight_decay());
    }
  }

  template <class T>
  void step_with(HybridOptimizer<T>& h) {
    constexpr const char* where = "matopt::TorchOptimizer::step";
    sync_groups(h);
    indices_.clear();
    std::vector<MatrixView<const T>> grads;
    rebound_.clear();
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const torch::Tensor& p = tensors_[i];
      if ((p.numel() == 0 ? nullptr : p.data_ptr()) != data_[i]) {
        // New storage (torch::load of the module, set_data): stepped there if it is still steppable in place.
        if (p.scalar_type() != tensor_dtype_ || !p.device().is_cpu() || !p.is_contiguous() || p.sizes() != sizes_[i])
          detail::fail(where, "parameter '", names_[i], "' (", detail::torch_describe(p),
                       ") changed since the optimizer was built (it was ", c10::toString(tensor_dtype_), ", shape ",
                       c10::str(sizes_[i]), ", contiguous, on the CPU); matopt steps tensors in place");
        rebound_.push_back(i);
      }
      const torch::Tensor& g = p.grad();
      if (!g.defined()) continue;  // no gradient this step: skipped
      if (g.scalar_type() != p.scalar_type() || !g.device().is_cpu() || !g.is_contiguous() ||
          g.sizes() != p.sizes())
        detail::fail(where, "the gradient of '", names_[i], "' (", detail::torch_describe(g),
                     ") cannot be read in place for the parameter (", detail::torch_describe(p),
                     "): it must have the parameter's dtype and shape, on the CPU, contiguous");
      indices_.push_back(i);
      grads.push_back(detail::torch_view<const T>(g));
    }
    for (std::size_t i : rebound_) {
      h.rebind(i, detail::torch_view<T>(tensors_[i]));
      data_[i] = tensors_[i].numel() == 0 ? nullptr : tensors_[i].data_ptr();
    }
    h.step(indices_, grads);
    // matopt wrote through raw pointers: advance the tensors' version counters as torch's in-place ops do,
    // so that autograd detects a graph that saved a parameter before this step.
    for (std::size_t i : indices_) torch::autograd::impl::bump_version(tensors_[i]);
  }

  Hybrid hybrid_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> tensors_;  // matopt's order (tied duplicates removed)
  std::vector<const void*> data_;       // each tensor's storage as last stepped
  std::vector<std::vector<std::int64_t>> sizes_;
  torch::ScalarType tensor_dtype_ = torch::kFloat32;
  std::vector<std::size_t> rebound_;    // step: parameters whose storage moved
  std::map<std::string, std::size_t> index_;
  std::vector<Route> routes_;            // each torch group's route, fixed at construction
  std::vector<std::size_t> indices_;     // step: the parameters with a gradient
};

}  // namespace matopt

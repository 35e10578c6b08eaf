// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// TorchOptimizer: matopt as a torch::optim::Optimizer (target matopt::libtorch; not in <matopt/matopt.hpp>).
// Target matopt::libtorch is defined when CMake finds Torch.
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <exception>
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

#include "matopt/distributed/communicator.hpp"
#include "matopt/distributed/plan.hpp"
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

  /// Data parallel (`docs/distributed.md#data-parallel-libtorch-c10d`): the processes whose step this is, e.g. a
  /// C10dCommunicator over a c10d process group (any matopt::Communicator works); it must outlive the optimizer.
  /// nullptr or a group of one: this process alone. Every rank builds the optimizer over the same parameters in the
  /// same order (construction checks it, and takes rank 0's values), and calls step(), consolidate_state() and
  /// torch::load together.
  Communicator* communicator = nullptr;
  /// With a communicator: step() first replaces every gradient by its mean over the ranks (false: the caller has
  /// already reduced them, e.g. by its own all-reduce).
  bool average_gradients = true;
  /// The gradient all-reduce's bucket, in bytes: gradients are packed in parameter order into buckets of this size,
  /// one all-reduce each (DistributedDataParallel's default, 25 MiB).
  std::size_t bucket_bytes = std::size_t(25) << 20;
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
/// one line:
/// @code
/// // torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
/// matopt::TorchOptimizer opt(model->named_parameters(), "muon", {{"lr", "0.02"}});
/// ...
/// opt.zero_grad(); loss.backward(); opt.step();
/// @endcode
/// Routing as HybridOptimizer's (docs/math.md): hidden 2-D weights and conv weights (as (out, in*kh*kw)) go to the
/// matrix optimizer; vectors, embeddings and output heads to AdamW (or Lion). The routes are torch param groups 0
/// ("matrix") and 1 ("adamw"), whose options (TorchGroupOptions) carry lr and weight decay. Each tensor's own storage
/// is stepped (zero copy); what cannot be stepped in place is refused at construction.
///
/// Data parallel (TorchOptions::communicator, a group of N > 1 ranks): step() averages the gradients across ranks
/// (bucketed all-reduces, parameters in a fixed order), then each matrix is stepped by one owner rank, chosen by the
/// cost model (ShardPlan::greedy over AnyOptimizer::cost: m n min(m, n) for orthogonalization), which alone keeps
/// its optimizer state (ZeRO-1, arXiv 1910.02054); the updated matrices reach every rank in one all-gather. The
/// vector route (AdamW or Lion) is stepped on every rank, replicated: its state is O(parameters) and its step
/// elementwise, so sharding it would trade a second gather for little memory. Construction checks that every rank
/// holds the same parameters and takes rank 0's values. Any refusal (a bad gradient or option on one rank, group
/// options that differ) is agreed first and thrown on every rank with nothing changed; a gradient present on some
/// ranks only counts as zero on the others.
/// Checkpoints: consolidate_state() on every rank gathers the state; then torch::save on one rank writes the
/// single-process format, which loads on any number of ranks, or into a TorchOptimizer without a communicator.
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
          if (!h.has_state(i))
            detail::fail("matopt::TorchOptimizer::effective_lr", "parameter '", name, "' is stepped by rank ",
                         owner_[i], " (data parallel; this is rank ", comm_->rank(),
                         "): ask that rank, or call consolidate_state() first");
          sync_groups(h);
          return double(h.effective_lr(i));
        },
        hybrid_);
  }
  /// Parameter names in matopt's order (routing and checkpoints).
  const std::vector<std::string>& names() const { return names_; }

  /// Data parallel: the rank that steps parameter `name` (its owner), or -1 when every rank steps it (the vector
  /// route, or no communicator).
  int owner(const std::string& name) const { return owner_.empty() ? -1 : owner_[index(name)]; }
  /// The communicator of TorchOptions (nullptr without one).
  Communicator* communicator() const { return comm_; }

  /// Data parallel, collective (every rank calls it): gathers every matrix's optimizer state from its owner into
  /// every rank, so that torch::save on any one rank writes the whole state (the single-process format, as
  /// torch's ZeroRedundancyOptimizer.consolidate_state_dict). The next step() frees the gathered copies again.
  /// Without a communicator it does nothing.
  void consolidate_state() {
    if (!distributed()) return;
    std::visit([&](auto& h) { consolidate(h); }, hybrid_);
  }

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
    if (distributed() && !consolidated_)
      detail::fail("matopt::TorchOptimizer::save", "data parallel over ", comm_->size(), " ranks (this is rank ",
                   comm_->rank(), "): each matrix's state lives on its owner; call consolidate_state() on every rank "
                   "first, then save on one rank");
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
    if (!distributed()) return load_local(archive);
    // Data parallel, collective: every rank must load the same archive (then each keeps its own matrices' states).
    std::string error;
    std::uint64_t hash = 0;
    try {
      hash = archive_hash(archive);
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::vector<double> record{error.empty() ? 0.0 : 1.0};
    push_hash(record, hash);
    const std::vector<double> all = gather_records(record);
    throw_if_refused("matopt::TorchOptimizer::load", all, 3, error);
    for (int r = 1; r < comm_->size(); ++r)
      if (all[std::size_t(3 * r + 1)] != all[1] || all[std::size_t(3 * r + 2)] != all[2])
        detail::fail("matopt::TorchOptimizer::load", "rank ", r, " loaded another archive than rank 0: every rank "
                     "must load the same file (torch::load on every rank); nothing changed on any rank");
    load_local(archive);
  }

 private:
  /// The archive's matopt state, hashed (load: every rank must hold the same).
  static std::uint64_t archive_hash(torch::serialize::InputArchive& archive) {
    std::uint64_t h = fnv(nullptr, 0);
    for (const char* key : {"matopt.checkpoint", "matopt.group_lr", "matopt.group_weight_decay"}) {
      torch::Tensor t;
      if (!archive.try_read(key, t))
        throw CheckpointError("matopt::TorchOptimizer::load: the archive holds no matopt::TorchOptimizer state");
      t = t.contiguous();
      h = fnv(t.data_ptr(), std::size_t(t.numel()) * t.element_size(), h);
    }
    return h;
  }

  void load_local(torch::serialize::InputArchive& archive) {
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
    consolidated_ = distributed();  // every rank now holds every state; the next step frees the others' again
  }

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
    comm_ = options.communicator;
    average_ = options.average_gradients;
    bucket_bytes_ = options.bucket_bytes;
    if (bucket_bytes_ < sizeof(double))
      detail::fail("matopt::TorchOptimizer", "bucket_bytes must be at least 8 (got ", bucket_bytes_, ")");
    if (distributed()) std::visit([&](auto& h) { plan_owners(h); }, hybrid_);
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

  /// Checks every parameter and gradient (throws on the first problem; nothing changed): the parameters with a
  /// gradient into indices_ and grads, the ones whose storage moved into rebound_.
  template <class T>
  void collect(std::vector<MatrixView<const T>>& grads) {
    constexpr const char* where = "matopt::TorchOptimizer::step";
    indices_.clear();
    grads.clear();
    rebound_.clear();
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const torch::Tensor& p = tensors_[i];
      if ((p.numel() == 0 ? nullptr : p.data_ptr()) != data_[i]) {
        // New storage (torch::load of the module, set_data): stepped there if it is still steppable in place.
        if (p.scalar_type() != tensor_dtype_ || !p.device().is_cpu() || !p.is_contiguous() || p.sizes() != sizes_[i])
          detail::fail(where, "parameter '", names_[i], "' (", detail::torch_describe(p),
                       ") changed since the optimizer was built (it was ", c10::toString(tensor_dtype_), ", shape ",
                       c10::str(c10::IntArrayRef(sizes_[i])), ", contiguous, on the CPU); matopt steps tensors in place");
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
  }

  template <class T>
  void rebind(HybridOptimizer<T>& h) {
    for (std::size_t i : rebound_) {
      h.rebind(i, detail::torch_view<T>(tensors_[i]));
      data_[i] = tensors_[i].numel() == 0 ? nullptr : tensors_[i].data_ptr();
    }
  }

  /// matopt wrote through raw pointers: advance the tensors' version counters as torch's in-place ops do, so that
  /// autograd detects a graph that saved a parameter before this step.
  void bump_versions() {
    for (std::size_t i : indices_) torch::autograd::impl::bump_version(tensors_[i]);
  }

  template <class T>
  void step_with(HybridOptimizer<T>& h) {
    if (distributed()) return step_distributed(h);
    sync_groups(h);
    std::vector<MatrixView<const T>> grads;
    collect(grads);
    rebind(h);
    h.step(indices_, grads);
    bump_versions();
  }

  // ---- Data parallel ----------------------------------------------------------------------------------------------

  bool distributed() const { return comm_ != nullptr && comm_->size() > 1; }

  /// FNV-1a (the checkpoints' checksum) of n bytes, continuing `h` when given.
  static std::uint64_t fnv(const void* data, std::size_t n) {
    return detail::fnv1a64(static_cast<const char*>(data), n);
  }
  static std::uint64_t fnv(const void* data, std::size_t n, std::uint64_t h) {
    return detail::fnv1a64(static_cast<const char*>(data), n, h);
  }
  /// A 64-bit value as two doubles (32-bit halves: exact).
  static void push_hash(std::vector<double>& v, std::uint64_t h) {
    v.push_back(double(h >> 32));
    v.push_back(double(h & 0xffffffffull));
  }

  /// Collective: every rank's `record` (the same length on every rank), rank after rank.
  std::vector<double> gather_records(const std::vector<double>& record) {
    const auto n = std::size_t(comm_->size());
    std::vector<double> all(n * record.size());
    comm_->all_gather(record.data(), all.data(), std::vector<std::size_t>(n, record.size()));
    return all;
  }

  /// Collective, after gather_records: record[0] != 0 marks a rank whose local checks failed with `error`; then every
  /// rank throws the lowest such rank's message (it broadcasts it), with nothing changed on any rank.
  void throw_if_refused(const char* where, const std::vector<double>& all, std::size_t length, const std::string& error) {
    const int n = comm_->size(), me = comm_->rank();
    for (int r = 0; r < n; ++r)
      if (all[std::size_t(r) * length] != 0) {
        double size = r == me ? double(error.size()) : 0;
        comm_->broadcast(&size, 1, r);
        std::string text(std::size_t(size), '\0');
        if (r == me) text = error;
        comm_->broadcast(reinterpret_cast<std::byte*>(text.data()), text.size(), r);
        detail::fail(where, "refused on rank ", r, " of ", n, ", nothing changed on any rank: ", text);
      }
  }

  /// Construction, collective: every rank checks that all hold the same parameters (names, shapes, routes, dtype, in
  /// the same order), takes rank 0's values (as DistributedDataParallel does), plans the matrices' owners (every rank
  /// computes the same plan) and frees the state of the matrices it does not own.
  template <class T>
  void plan_owners(HybridOptimizer<T>& h) {
    constexpr const char* where = "matopt::TorchOptimizer";
    const int n = comm_->size(), me = comm_->rank();
    const std::size_t count = names_.size();
    const std::vector<double> counts = gather_records({double(count)});
    for (int r = 0; r < n; ++r)
      if (counts[std::size_t(r)] != double(count))
        detail::fail(where, "rank ", me, " holds ", count, " parameters but rank ", r, " holds ",
                     counts[std::size_t(r)], ": every rank must build the optimizer over the same parameters");
    std::vector<double> mine;
    for (std::size_t i = 0; i < count; ++i) {
      std::uint64_t k = fnv(names_[i].data(), names_[i].size());
      k = fnv(sizes_[i].data(), sizes_[i].size() * sizeof(std::int64_t), k);
      const auto route = std::uint8_t(h.route(i));
      k = fnv(&route, 1, k);
      const auto bytes = std::uint8_t(sizeof(T));
      push_hash(mine, fnv(&bytes, 1, k));
    }
    const std::vector<double> all = gather_records(mine);
    for (std::size_t i = 0; i < count; ++i)
      for (int r = 0; r < n; ++r)
        if (all[std::size_t(r) * 2 * count + 2 * i] != mine[2 * i] ||
            all[std::size_t(r) * 2 * count + 2 * i + 1] != mine[2 * i + 1])
          detail::fail(where, "parameter ", i, " is '", names_[i], "' of shape ", c10::str(c10::IntArrayRef(sizes_[i])), ", ",
                       h.route(i) == Route::Matrix ? "matrix" : "AdamW", " route, on rank ", me,
                       ", but another name, shape, route or dtype on rank ", r,
                       ": every rank must build the optimizer over the same parameters, in the same order");
    for (std::size_t i = 0; i < count; ++i) {  // rank 0's values everywhere
      if (tensors_[i].numel() == 0) continue;
      comm_->broadcast(static_cast<T*>(tensors_[i].data_ptr()), std::size_t(tensors_[i].numel()), 0);
      torch::autograd::impl::bump_version(tensors_[i]);
    }
    std::vector<std::size_t> matrices;
    std::vector<double> costs;
    for (std::size_t i = 0; i < count; ++i)
      if (h.route(i) == Route::Matrix) {
        matrices.push_back(i);
        const auto v = detail::torch_view<T>(tensors_[i]);
        costs.push_back(h.matrix_optimizer().cost(v.rows, v.cols));
      }
    const ShardPlan plan = ShardPlan::greedy(costs, n);
    owner_.assign(count, -1);
    for (std::size_t k = 0; k < matrices.size(); ++k) owner_[matrices[k]] = plan.owner[k];
    release_others(h);
  }

  template <class T>
  void release_others(HybridOptimizer<T>& h) {
    for (std::size_t i = 0; i < owner_.size(); ++i)
      if (owner_[i] >= 0 && owner_[i] != comm_->rank()) h.release_state(i);
    consolidated_ = false;
  }

  /// step(), collective, before anything changes: every rank learns whether any rank's checks failed (then all
  /// throw its message), whether the param groups' lr and weight decay agree, which parameters have a gradient on
  /// some ranks only (the others count it as zero, as DistributedDataParallel's find_unused_parameters does), and,
  /// without averaging, whether the gradients' finiteness agrees. Returns whether every gradient is finite
  /// (meaningful without averaging only).
  template <class T>
  bool agree(const std::string& error, std::vector<MatrixView<const T>>& grads) {
    constexpr const char* where = "matopt::TorchOptimizer::step";
    const int n = comm_->size(), me = comm_->rank();
    const std::size_t groups = param_groups_.size(), count = tensors_.size();
    // [error, non-finite, (lr, weight decay) per group, has-gradient per parameter]
    const std::size_t length = 2 + 2 * groups + count;
    std::vector<double> record(length, 0.0);
    record[0] = error.empty() ? 0 : 1;
    if (error.empty()) {
      if (!average_)
        for (const auto& g : grads)
          if (!detail::with_map(g, [](const auto& m) { return detail::all_finite(m); })) record[1] = 1;
      for (std::size_t g = 0; g < groups; ++g) {
        record[2 + 2 * g] = options(g).lr();
        record[3 + 2 * g] = options(g).weight_decay();
      }
      for (std::size_t i : indices_) record[2 + 2 * groups + i] = 1;
    }
    const std::vector<double> all = gather_records(record);
    throw_if_refused(where, all, length, error);
    auto at = [&](int r, std::size_t k) { return all[std::size_t(r) * length + k]; };
    for (std::size_t g = 0; g < groups; ++g)
      for (int r = 1; r < n; ++r)
        if (at(r, 2 + 2 * g) != at(0, 2 + 2 * g) || at(r, 3 + 2 * g) != at(0, 3 + 2 * g))
          detail::fail(where, "param group ", g, " has lr ", at(0, 2 + 2 * g), ", weight decay ", at(0, 3 + 2 * g),
                       " on rank 0 but lr ", at(r, 2 + 2 * g), ", weight decay ", at(r, 3 + 2 * g), " on rank ", r,
                       ": every rank must step with the same options (a scheduler on every rank); nothing changed");
    bool some_missing = false;
    for (std::size_t i = 0; i < count; ++i) {
      double with = 0;
      for (int r = 0; r < n; ++r) with += at(r, 2 + 2 * groups + i);
      if (with != 0 && with != n && at(me, 2 + 2 * groups + i) == 0) {
        tensors_[i].mutable_grad() = torch::zeros_like(tensors_[i]);  // this rank's share of the batch missed it
        some_missing = true;
      }
    }
    if (some_missing) collect(grads);  // again, with the zero gradients in their places
    double finite_ranks = 0;
    for (int r = 0; r < n; ++r) finite_ranks += at(r, 1) == 0 ? 1 : 0;
    if (!average_ && finite_ranks != 0 && finite_ranks != n)
      for (int r = 0; r < n; ++r)
        if (at(r, 1) != 0)
          detail::fail(where, "a gradient is non-finite on rank ", r, " but finite on others: with average_gradients"
                       " = false every rank must hold the same (already reduced) gradients; nothing changed");
    return finite_ranks == n;
  }

  /// The gradients <- their mean over the ranks, in buckets of bucket_bytes_ (parameters in matopt's order), written
  /// back into the gradient tensors (as DistributedDataParallel leaves them).
  template <class T>
  void average(const std::vector<MatrixView<const T>>& grads) {
    std::size_t total = 0;
    for (const auto& g : grads) total += std::size_t(g.rows * g.cols);
    const std::size_t bucket = std::max<std::size_t>(1, std::min(total, bucket_bytes_ / sizeof(T)));
    const T ranks = T(comm_->size());
    std::vector<T>& buf = buffer<T>(0);
    buf.resize(bucket);
    struct Piece {
      T* data;
      std::size_t count;
    };
    std::vector<Piece> pieces;
    std::size_t used = 0;
    auto flush = [&] {
      if (used == 0) return;
      comm_->all_reduce(buf.data(), used);
      std::size_t at = 0;
      for (const Piece& pc : pieces) {
        for (std::size_t k = 0; k < pc.count; ++k) pc.data[k] = buf[at + k] / ranks;
        at += pc.count;
      }
      pieces.clear();
      used = 0;
    };
    for (const auto& g : grads) {
      T* data = const_cast<T*>(g.data);  // the gradient tensors' own storage
      std::size_t left = std::size_t(g.rows * g.cols);
      while (left != 0) {
        const std::size_t take = std::min(left, bucket - used);
        std::copy(data, data + take, buf.begin() + std::ptrdiff_t(used));
        pieces.push_back({data, take});
        used += take;
        data += take;
        left -= take;
        if (used == bucket) flush();
      }
    }
    flush();
  }

  /// Work buffers per scalar type: 0 the gradient buckets, then the owned weights sent; 1 the weights received.
  template <class T>
  std::vector<T>& buffer(int which) {
    if constexpr (std::is_same_v<T, float>) return which == 0 ? buffer_f_ : received_f_;
    else return which == 0 ? buffer_d_ : received_d_;
  }

  template <class T>
  void step_distributed(HybridOptimizer<T>& h) {
    constexpr const char* where = "matopt::TorchOptimizer::step";
    std::vector<MatrixView<const T>> grads;
    std::string error;
    try {
      sync_groups(h);
      collect(grads);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const bool all_finite_unaveraged = agree(error, grads);  // throws on every rank if any rank refused
    rebind(h);
    if (average_) average(grads);
    if (consolidated_) release_others(h);
    // The gradients are now the same on every rank, and so is the non-finite decision: under Throw and Skip a
    // non-finite gradient anywhere throws (naming it) or skips the step on every rank, before any change.
    if (h.options().non_finite != NonFinite::Zero) {
      bool finite = average_ ? true : all_finite_unaveraged;
      if (average_)
        for (const auto& g : grads)
          finite = finite && detail::with_map(g, [](const auto& m) { return detail::all_finite(m); });
      if (!finite) {
        h.step(indices_, grads);  // throws (Throw) or counts the skip (Skip): checked before any state is read
        return;
      }
    }
    // This rank's share: the matrices it owns and the whole vector route.
    const int me = comm_->rank(), n = comm_->size();
    local_.clear();
    std::vector<MatrixView<const T>> local_grads;
    std::vector<std::size_t> counts(std::size_t(n), 1);  // each rank's block: its status, then its matrices
    for (std::size_t k = 0; k < indices_.size(); ++k) {
      const std::size_t i = indices_[k];
      if (owner_[i] < 0 || owner_[i] == me) {
        local_.push_back(i);
        local_grads.push_back(grads[k]);
      }
      if (owner_[i] >= 0) counts[std::size_t(owner_[i])] += std::size_t(tensors_[i].numel());
    }
    std::string failed;
    try {
      h.step(local_, local_grads);
    } catch (const std::exception& e) {
      failed = e.what();
    }
    // The updated matrices, owners' in parameter order, to every rank; each block starts with its rank's status.
    std::vector<T>& send = buffer<T>(0);
    send.assign(1, failed.empty() ? T(0) : T(1));
    if (failed.empty())
      for (std::size_t i : indices_)
        if (owner_[i] == me) {
          const T* p = static_cast<const T*>(tensors_[i].data_ptr());
          send.insert(send.end(), p, p + tensors_[i].numel());
        }
    send.resize(counts[std::size_t(me)]);
    std::size_t total = 0;
    for (std::size_t c : counts) total += c;
    std::vector<T>& recv = buffer<T>(1);
    recv.resize(total);
    comm_->all_gather(send.data(), recv.data(), counts);
    std::vector<std::size_t> offset(std::size_t(n), 0);
    for (int r = 1; r < n; ++r) offset[std::size_t(r)] = offset[std::size_t(r - 1)] + counts[std::size_t(r - 1)];
    for (int r = 0; r < n; ++r)
      if (recv[offset[std::size_t(r)]] != T(0))
        detail::fail(where, "rank ", r, " of ", n, " failed in its share of the step",
                     r == me ? ": " + failed : std::string(" (its message is on that rank)"),
                     "; the other ranks stepped theirs, so the replicas may now differ: restore a checkpoint");
    for (int r = 0; r < n; ++r) ++offset[std::size_t(r)];  // past the status
    for (std::size_t i : indices_) {
      if (owner_[i] < 0) continue;
      std::size_t& at = offset[std::size_t(owner_[i])];
      const auto size = std::size_t(tensors_[i].numel());
      if (owner_[i] != me) std::copy(recv.data() + at, recv.data() + at + size, static_cast<T*>(tensors_[i].data_ptr()));
      at += size;
    }
    bump_versions();
  }

  /// consolidate_state(): each rank's owned states, in parameter order, to every rank.
  template <class T>
  void consolidate(HybridOptimizer<T>& h) {
    constexpr const char* where = "matopt::TorchOptimizer::consolidate_state";
    const int me = comm_->rank(), n = comm_->size();
    detail::Writer w;
    for (std::size_t i = 0; i < owner_.size(); ++i)
      if (owner_[i] == me) h.write_state(i, w);
    const std::string& mine = w.data();
    const std::vector<double> sizes = gather_records({double(mine.size())});
    std::vector<std::size_t> counts(static_cast<std::size_t>(n));
    std::size_t total = 0;
    for (int r = 0; r < n; ++r) total += counts[std::size_t(r)] = std::size_t(sizes[std::size_t(r)]);
    std::vector<std::byte> all(total);
    comm_->all_gather(reinterpret_cast<const std::byte*>(mine.data()), all.data(), counts);
    std::size_t at = 0;
    for (int r = 0; r < n; ++r) {
      detail::Reader rd(reinterpret_cast<const char*>(all.data()) + at, counts[std::size_t(r)]);
      at += counts[std::size_t(r)];
      if (r == me) continue;
      for (std::size_t i = 0; i < owner_.size(); ++i)
        if (owner_[i] == r) h.read_state(i, rd);
      if (rd.left() != 0) detail::fail(where, "rank ", r, "'s states left ", rd.left(), " bytes unread");
    }
    consolidated_ = true;
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
  // Data parallel
  Communicator* comm_ = nullptr;
  bool average_ = true;
  std::size_t bucket_bytes_ = 0;
  std::vector<int> owner_;               // per parameter: its owner rank, -1 for the replicated vector route
  bool consolidated_ = false;            // every rank holds every state (consolidate_state, load)
  std::vector<std::size_t> local_;       // step: this rank's share of indices_
  std::vector<float> buffer_f_, received_f_;  // buffer<T>(): gradient buckets and owned weights; gathered weights
  std::vector<double> buffer_d_, received_d_;
};

}  // namespace matopt

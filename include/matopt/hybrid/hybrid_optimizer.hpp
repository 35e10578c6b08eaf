// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// HybridOptimizer: a model's optimizer, routing hidden matrices to a matrix optimizer and the rest to AdamW.
// A model's optimizer: routes each parameter to the matrix optimizer or to AdamW (docs/math.md#presets: Muon-family
// optimizers are for hidden matrices only; biases, norms, embeddings and output heads go to AdamW), with
// per-group lr scale and weight decay, and each parameter's effective lr on query.
//
//   matopt::HybridOptimizer<float> opt(matopt::AnyOptimizer<float>(matopt::Muon<float>{}));
//   auto w1 = opt.add("fc1.weight", matopt::view(W1));                 // hidden matrix -> Muon
//   auto b1 = opt.add("fc1.bias", matopt::view(b1v));                  // vector -> AdamW
//   auto hd = opt.add("head.weight", matopt::view(W3), matopt::Role::Head);  // head -> AdamW
//   opt.step({matopt::view(G1), matopt::view(gb1), matopt::view(G3)});

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "matopt/core/detail/errors.hpp"
#include "matopt/core/step_policy.hpp"
#include "matopt/core/view.hpp"
#include "matopt/facade/any_optimizer.hpp"
#include "matopt/serialization/checkpoint.hpp"

namespace matopt {

/// What a parameter is in its model. Auto: a matrix with more than one row and column is Hidden,
/// anything else a Vector. Conv weights are added through conv_weight_view and are Hidden.
/// Hidden: the matrix optimizer. Vector, Embedding, Head: AdamW by default (Options::embeddings_to_adamw,
/// Options::heads_to_adamw).
enum class Role { Auto, Hidden, Vector, Embedding, Head };
/// Which optimizer steps a parameter.
/// `Matrix`: the matrix optimizer; `AdamW`: the second optimizer (AdamW by default, or e.g. Lion).
enum class Route { Matrix, AdamW };

namespace detail {
/// The hybrid container's default AdamW (facade/detail/factory.hpp, or compiled once in matopt::runtime).
template <class T>
AnyOptimizer<T> default_adamw();
}  // namespace detail

/// A model's optimizer: routes each parameter (added by name, with its Role) to the matrix optimizer or to AdamW
/// (Muon-family optimizers are for hidden matrices only; biases, norms, embeddings and output heads go to AdamW), with
/// per-group lr scale, lr and weight decay, each parameter's effective lr on query, the non-finite-gradient policy
/// over the whole step, and checkpoints of the whole model (save_checkpoint(), load_checkpoint()).
/// @tparam T float or double.
template <class T>
class HybridOptimizer {
 public:
  /// Routing and the non-finite-gradient policy.
  struct Options {
    bool embeddings_to_adamw = true;  ///< false: embeddings go to the matrix optimizer
    bool heads_to_adamw = true;       ///< false: output heads go to the matrix optimizer
    /// A gradient with an inf or NaN: Throw (nothing changes), Skip the whole step (every parameter and
    /// state untouched; skipped_steps() counts it, as a mixed-precision loss scaler would), or Zero its
    /// non-finite entries in that parameter's step.
    NonFinite non_finite = NonFinite::Throw;
  };
  /// A parameter group: its lr is the route's lr (or the group's own, set_group_lr) times lr_scale;
  /// weight_decay, if set, replaces the route's. Group 0 ("default", scale 1, the route's lr and decay)
  /// always exists.
  struct Group {
    /// The group's name.
    std::string name;
    /// Multiplies the lr (default 1).
    T lr_scale = T(1);
    /// Replaces the route's weight decay when set.
    std::optional<T> weight_decay;
  };

  /// Routes hidden matrices to `matrix` and the other parameters to `adamw` (AdamW<T> with its defaults unless given,
  /// or make_optimizer<T>("lion")). Group 0 ("default") exists.
  explicit HybridOptimizer(AnyOptimizer<T> matrix, AnyOptimizer<T> adamw = detail::default_adamw<T>(),
                           Options options = {})
      : matrix_(std::move(matrix)), adamw_(std::move(adamw)), options_(options) {
    groups_.push_back({"default", T(1), std::nullopt});
    group_lr_.emplace_back();
  }

  /// Adds a group and returns its index.
  std::size_t add_group(Group g) {
    validate_group(g, "matopt::HybridOptimizer::add_group");
    groups_.push_back(std::move(g));
    group_lr_.emplace_back();
    return groups_.size() - 1;
  }
  /// Group g (throws std::out_of_range if it does not exist); its fields may be changed between steps.
  Group& group(std::size_t g) { return groups_.at(g); }

  /// A group's own lr in place of its route's (e.g. a torch param group's lr; std::nullopt: the route's).
  void set_group_lr(std::size_t g, std::optional<T> lr) {
    if (g >= groups_.size())
      detail::fail("matopt::HybridOptimizer::set_group_lr", "group ", g, " does not exist (", groups_.size(),
                   " groups)");
    if (lr) detail::require_positive("matopt::HybridOptimizer::set_group_lr", "lr", *lr);
    group_lr_[g] = lr;
  }
  /// Group g's own lr (std::nullopt: its route's).
  std::optional<T> group_lr(std::size_t g) const { return group_lr_.at(g); }

  /// Registers a parameter (the data stays the caller's, and must outlive this optimizer's use of it);
  /// returns its index, the order step(grads) expects.
  std::size_t add(std::string name, MatrixView<T> param, Role role = Role::Auto, std::size_t group = 0);

  /// Points parameter i at new storage of the same shape and layout (its values moved, e.g. a framework
  /// reallocated the tensor); the state is kept. Telemetry names are looked up by storage: call
  /// set_telemetry again after rebinding.
  void rebind(std::size_t i, MatrixView<T> param);

  /// Steps parameter i with gradient g (same shape and layout as the parameter).
  void step(std::size_t i, MatrixView<const T> g);

  /// Steps every parameter, grads[i] for parameter i. All gradients are checked (count, shapes, finite
  /// values) before any parameter changes.
  void step(const std::vector<MatrixView<const T>>& grads);

  /// Steps some parameters: parameter indices[k] with grads[k], in the order given (the others, e.g. those
  /// without a gradient this step, are untouched). Everything is checked (indices distinct and in range,
  /// shapes, finite values) before any parameter changes.
  void step(const std::vector<std::size_t>& indices, const std::vector<MatrixView<const T>>& grads);

  /// Steps skipped for a non-finite gradient (Options::non_finite = Skip).
  std::int64_t skipped_steps() const { return skipped_steps_; }
  /// The routing options and the non-finite policy.
  Options& options() { return options_; }
  /// The routing options and the non-finite policy (read-only).
  const Options& options() const { return options_; }

  /// Reports every `every`-th step of each matrix-routed parameter, with its name (step_policy.hpp's
  /// Telemetry; AdamW-routed parameters do not report). every = 0 turns it off. Call it after adding the
  /// parameters: names are looked up among those registered at this call.
  void set_telemetry(int every, std::function<void(const std::string&, const StepReport<T>&)> callback);

  /// Number of parameters added.
  std::size_t size() const { return params_.size(); }
  /// Parameter i's name.
  const std::string& name(std::size_t i) const { return param(i, "name").name; }
  /// Which optimizer steps parameter i.
  Route route(std::size_t i) const { return param(i, "route").route; }
  /// Parameter i's role (Auto resolved to Hidden or Vector).
  Role role(std::size_t i) const { return param(i, "role").role; }

  /// The lr parameter i's update uses: its route's effective lr (lr * s(m, n) for Static scaling, lr * r * s
  /// for a trust ratio, lr for AdamW) times its group's lr_scale; with a group lr, that lr in place of the
  /// route's (to rounding: the route's effective lr is rescaled by group lr / route lr).
  T effective_lr(std::size_t i) const {
    const Param& p = param(i, "effective_lr");
    const AnyOptimizer<T>& opt = optimizer(p.route);
    const T lr = opt.effective_lr(p.state) * groups_[p.group].lr_scale;
    const std::optional<T>& own = group_lr_[p.group];
    return own ? lr * (*own / opt.lr()) : lr;
  }

  /// The optimizer of the matrix route (to change its lr or options).
  AnyOptimizer<T>& matrix_optimizer() { return matrix_; }
  /// The optimizer of the AdamW route.
  AnyOptimizer<T>& adamw() { return adamw_; }

  /// Checkpoints (serialization/checkpoint.hpp's format): every parameter's name, route and optimizer state,
  /// the skipped-step count and, with `parameters`, the parameters' values, so that a run resumes
  /// bitwise. Loading checks names, routes, optimizers and shapes against this container's parameters and
  /// changes nothing (state nor parameter) unless the whole file is valid. Atomic on write.
  /// See save_checkpoint / load_checkpoint below, which call checkpoint_bytes() and restore().

  /// Parameter i's optimizer state (read its fields with State::field, e.g. "precondition.ns_steps").
  const typename AnyOptimizer<T>::State& state(std::size_t i) const { return param(i, "state").state; }

  /// Whether parameter i holds its optimizer state (false after release_state).
  bool has_state(std::size_t i) const { return param(i, "has_state").state.valid(); }
  /// Frees parameter i's optimizer state (data parallel: on the ranks that do not own it, TorchOptimizer). Stepping
  /// it, or a checkpoint of this container, then throws until read_state or restore gives it a state again.
  void release_state(std::size_t i) { param(i, "release_state").state = {}; }
  /// Writes parameter i's optimizer state (its checkpoint fields) to `w` (to move it to another rank).
  void write_state(std::size_t i, detail::Writer& w) const;
  /// Reads parameter i's optimizer state from `r` (what write_state wrote) into a new state; on an error the
  /// parameter keeps what it had.
  void read_state(std::size_t i, detail::Reader& r);

  /// Bytes of all parameters' optimizer state plus both optimizers' workspaces.
  std::size_t state_bytes() const {
    std::size_t b = matrix_.workspace_bytes() + adamw_.workspace_bytes();
    for (const auto& p : params_) b += p.state.bytes();
    return b;
  }

 private:
  /// Skip is whole-step: a non-finite gradient of any parameter skips every parameter's step, counted once (Throw
  /// was raised by check_grad, before anything changed).
  bool skips(bool finite) {
    const bool skip = !finite && options_.non_finite == NonFinite::Skip;
    skipped_steps_ += skip;
    return skip;
  }

  struct Param {
    std::string name;
    MatrixView<T> view;
    Role role;
    Route route;
    std::size_t group;
    typename AnyOptimizer<T>::State state;
  };

  Route route_of(Role role) const {
    switch (role) {
      case Role::Hidden: return Route::Matrix;
      case Role::Embedding: return options_.embeddings_to_adamw ? Route::AdamW : Route::Matrix;
      case Role::Head: return options_.heads_to_adamw ? Route::AdamW : Route::Matrix;
      default: return Route::AdamW;
    }
  }
  AnyOptimizer<T>& optimizer(Route r) { return r == Route::Matrix ? matrix_ : adamw_; }
  const AnyOptimizer<T>& optimizer(Route r) const { return r == Route::Matrix ? matrix_ : adamw_; }

  Param& param(std::size_t i, const char* what) {
    return const_cast<Param&>(static_cast<const HybridOptimizer&>(*this).param(i, what));
  }
  const Param& param(std::size_t i, const char* what) const {
    if (i >= params_.size())
      detail::fail("matopt::HybridOptimizer", what, ": parameter index ", i, " out of range (", params_.size(),
                   " parameters)");
    return params_[i];
  }

  static constexpr const char* checkpoint_identity = "matopt::HybridOptimizer";

  std::vector<std::pair<const T*, std::string>> parameter_names() const {
    std::vector<std::pair<const T*, std::string>> names;
    for (const auto& p : params_) names.emplace_back(p.view.data, p.name);
    return names;
  }

 public:
  /// The checkpoint file's bytes (used by save_checkpoint).
  std::string checkpoint_bytes(bool parameters) const;

  /// Restores from a checkpoint file's bytes, all or nothing (used by load_checkpoint).
  void restore(const std::string& file);

 private:

  static void validate_group(const Group& g, const char* where = "matopt::HybridOptimizer::step") {
    detail::require_positive(where, "lr_scale", g.lr_scale);
    if (g.weight_decay) detail::require_nonnegative(where, "weight_decay", *g.weight_decay);
  }

  /// Shape and layout (throws); returns whether g is finite (throws if not, under NonFinite::Throw).
  bool check_grad(const Param& p, MatrixView<const T> g) const;

  /// The parameters of one step, per route: each with its gradient, state and settings (its group's lr and
  /// weight decay, this container's non-finite policy, and the finiteness check_grad found), stepped by one
  /// batched call per route (AnyOptimizer::step with ParamSteps: a matrix optimizer's batched step runs small
  /// matrices in parallel). The vectors keep their capacity between steps.
  struct Batch {
    std::vector<MatrixView<T>> params;
    std::vector<MatrixView<const T>> grads;
    std::vector<typename AnyOptimizer<T>::State*> states;
    std::vector<ParamStep<T>> settings;
    std::vector<const std::string*> names;
    void clear() {
      names.clear();
      params.clear();
      grads.clear();
      states.clear();
      settings.clear();
    }
  };
  void batch_clear() {
    for (Batch& b : batches_) b.clear();
  }
  void batch_add(Param& p, MatrixView<const T> g, bool finite);
  void batch_run();

  AnyOptimizer<T> matrix_;
  AnyOptimizer<T> adamw_;
  Options options_;
  std::vector<Group> groups_;
  std::vector<std::optional<T>> group_lr_;  ///< set_group_lr, per group
  std::vector<Param> params_;
  std::int64_t skipped_steps_ = 0;
  Batch batches_[2];                ///< one step's parameters: matrix route, AdamW route
  std::vector<unsigned char> seen_;  ///< step(indices, grads): indices given
};

// Out of the class body, so that extern template (matopt::runtime) also keeps these out of its users' files.
template <class T>
std::size_t HybridOptimizer<T>::add(std::string name, MatrixView<T> param, Role role, std::size_t group) {
  constexpr const char* where = "matopt::HybridOptimizer::add";
  if (group >= groups_.size())
    detail::fail(where, "parameter '", name, "': group ", group, " does not exist (", groups_.size(),
                 " groups)");
  if (role == Role::Auto) role = (param.rows > 1 && param.cols > 1) ? Role::Hidden : Role::Vector;
  const Route route = route_of(role);
  Param p{std::move(name), param, role, route, group, {}};
  p.state = optimizer(route).make_state(param);
  params_.push_back(std::move(p));
  return params_.size() - 1;
}

template <class T>
void HybridOptimizer<T>::rebind(std::size_t i, MatrixView<T> param) {
  Param& p = this->param(i, "rebind");
  detail::check_view(param);
  if (param.rows != p.view.rows || param.cols != p.view.cols ||
      !detail::same_layout(param.layout, p.view.layout, param.rows, param.cols))
    detail::fail("matopt::HybridOptimizer::rebind", "parameter '", p.name, "' is ",
                 detail::shape_string(p.view.rows, p.view.cols), " ", detail::layout_name(p.view.layout),
                 " but the new storage is ", detail::shape_string(param.rows, param.cols), " ",
                 detail::layout_name(param.layout));
  p.view = param;
}

template <class T>
void HybridOptimizer<T>::step(std::size_t i, MatrixView<const T> g) {
  Param& p = param(i, "step");
  validate_group(groups_[p.group]);  // groups are mutable through group()
  const bool finite = check_grad(p, g);
  if (skips(finite)) return;
  batch_clear();
  batch_add(p, g, finite);
  batch_run();
}

template <class T>
void HybridOptimizer<T>::step(const std::vector<MatrixView<const T>>& grads) {
  if (grads.size() != params_.size())
    detail::fail("matopt::HybridOptimizer::step", "got ", grads.size(), " gradients for ", params_.size(),
                 " parameters");
  for (const Group& g : groups_) validate_group(g);  // groups are mutable through group()
  batch_clear();
  bool finite = true;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const bool f = check_grad(params_[i], grads[i]);
    batch_add(params_[i], grads[i], f);
    finite = f && finite;
  }
  if (skips(finite)) return;
  batch_run();
}

template <class T>
void HybridOptimizer<T>::step(const std::vector<std::size_t>& indices, const std::vector<MatrixView<const T>>& grads) {
  constexpr const char* where = "matopt::HybridOptimizer::step";
  if (grads.size() != indices.size())
    detail::fail(where, "got ", grads.size(), " gradients for ", indices.size(), " parameter indices");
  for (const Group& g : groups_) validate_group(g);
  seen_.assign(params_.size(), 0);
  batch_clear();
  bool finite = true;
  for (std::size_t k = 0; k < indices.size(); ++k) {
    Param& p = param(indices[k], "step");
    if (seen_[indices[k]]) detail::fail(where, "parameter '", p.name, "' (index ", indices[k], ") given twice");
    seen_[indices[k]] = 1;
    const bool f = check_grad(p, grads[k]);
    batch_add(p, grads[k], f);
    finite = f && finite;
  }
  if (skips(finite)) return;
  batch_run();
}

template <class T>
void HybridOptimizer<T>::set_telemetry(int every,
                                       std::function<void(const std::string&, const StepReport<T>&)> callback) {
  Telemetry<T> t;
  t.every = every;
  if (every > 0 && callback)
    t.callback = [names = parameter_names(), cb = std::move(callback)](const StepReport<T>& r) {
      for (const auto& [data, name] : names)
        if (data == r.param) return cb(name, r);
      cb(std::string(), r);
    };
  matrix_.set_telemetry(std::move(t));
}

template <class T>
void HybridOptimizer<T>::write_state(std::size_t i, detail::Writer& w) const {
  const Param& p = param(i, "write_state");
  if (!p.state.valid())
    detail::fail("matopt::HybridOptimizer::write_state", "parameter '", p.name, "' holds no state (released)");
  p.state.write(w);
}

template <class T>
void HybridOptimizer<T>::read_state(std::size_t i, detail::Reader& r) {
  Param& p = param(i, "read_state");
  auto fresh = optimizer(p.route).make_state(p.view);
  fresh.read(r);
  p.state = std::move(fresh);
}

template <class T>
std::string HybridOptimizer<T>::checkpoint_bytes(bool parameters) const {
  detail::Writer w;
  w.string(checkpoint_identity);
  w.pod(std::uint64_t(params_.size()));
  w.pod(std::uint8_t(parameters ? 1 : 0));
  w.pod(std::int64_t(skipped_steps_));
  for (const auto& p : params_) {
    if (!p.state.valid())
      detail::fail("matopt::HybridOptimizer::checkpoint", "parameter '", p.name,
                   "' holds no state (released on a rank that does not own it: gather the states first)");
    w.string(p.name);
    w.pod(std::uint8_t(p.route));
    w.string(optimizer(p.route).identity());
    w.pod(std::int64_t(p.view.rows));
    w.pod(std::int64_t(p.view.cols));
    w.state(p.state);
    if (parameters) w.bytes(p.view.data, std::size_t(p.view.rows * p.view.cols) * sizeof(T));
  }
  return detail::seal(w.data(), sizeof(T));
}

template <class T>
void HybridOptimizer<T>::restore(const std::string& file) {
  using detail::Reader;
  Reader r = detail::unseal(file, sizeof(T));
  if (r.string("the identity") != checkpoint_identity) Reader::fail("not a HybridOptimizer checkpoint");
  const auto n = r.pod<std::uint64_t>("the parameter count");
  if (n != params_.size()) Reader::fail("the file holds ", n, " parameters but this optimizer has ", params_.size());
  const auto with_values = r.pod<std::uint8_t>("the parameters flag");
  if (with_values > 1) Reader::fail("bad parameters flag ", int(with_values));
  const auto skipped = r.pod<std::int64_t>("the skipped-step count");
  if (skipped < 0) Reader::fail("the skipped-step count is ", skipped, ": a count cannot be negative");
  std::vector<typename AnyOptimizer<T>::State> states;
  std::vector<T> values;
  states.reserve(params_.size());
  for (const auto& p : params_) {
    const std::string name = r.string("a parameter name");
    if (name != p.name)
      Reader::fail("parameter ", states.size(), " is '", name, "' in the file but '", p.name, "' here");
    const auto route = r.pod<std::uint8_t>("a route");
    if (route != std::uint8_t(p.route)) Reader::fail("parameter '", p.name, "' was routed differently when saved");
    const std::string id = r.string("an optimizer identity");
    if (id != optimizer(p.route).identity())
      Reader::fail("parameter '", p.name, "' was stepped by '", id, "' but is now stepped by '",
                   optimizer(p.route).identity(), "'");
    const auto rows = r.pod<std::int64_t>("a shape"), cols = r.pod<std::int64_t>("a shape");
    if (rows != p.view.rows || cols != p.view.cols)
      Reader::fail("parameter '", p.name, "' is ", rows, "x", cols, " in the file but ", p.view.rows, "x",
                   p.view.cols, " here");
    states.push_back(p.state.valid() ? p.state : optimizer(p.route).make_state(p.view));
    r.state(states.back());
    if (with_values) {
      const auto count = std::size_t(rows * cols);
      if (count * sizeof(T) > r.left()) Reader::fail("truncated in the values of parameter '", p.name, "'");
      const std::size_t at = values.size();
      values.resize(at + count);
      r.bytes(values.data() + at, count * sizeof(T), "parameter values");
      for (std::size_t k = at; k < at + count; ++k)
        if (!std::isfinite(values[k]))
          Reader::fail("parameter '", p.name, "' has a non-finite value (", double(values[k]), ") at index ", k - at);
    }
  }
  if (r.left() != 0) Reader::fail(r.left(), " unread bytes after the last parameter");
  // Everything was read: commit.
  std::size_t at = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    params_[i].state = std::move(states[i]);
    if (with_values) {
      const auto count = std::size_t(params_[i].view.rows * params_[i].view.cols);
      if (count != 0) std::memcpy(params_[i].view.data, values.data() + at, count * sizeof(T));
      at += count;
    }
  }
  skipped_steps_ = skipped;
}

template <class T>
bool HybridOptimizer<T>::check_grad(const Param& p, MatrixView<const T> g) const {
  constexpr const char* where = "matopt::HybridOptimizer::step";
  if (g.rows != p.view.rows || g.cols != p.view.cols)
    detail::fail(where, "gradient of '", p.name, "' is ", detail::shape_string(g.rows, g.cols),
                 " but the parameter is ", detail::shape_string(p.view.rows, p.view.cols));
  if (!detail::same_layout(g.layout, p.view.layout, g.rows, g.cols))
    detail::fail(where, "gradient of '", p.name, "' is ", detail::layout_name(g.layout), " but the parameter is ",
                 detail::layout_name(p.view.layout));
  const bool finite = detail::with_map(g, [&](const auto& gm) { return detail::all_finite(gm); });
  if (!finite && options_.non_finite == NonFinite::Throw)
    detail::fail(where, "gradient of '", p.name, "' (", detail::shape_string(g.rows, g.cols),
                 ") contains a non-finite value; nothing was changed (options.non_finite = throw)");
  return finite;
}

template <class T>
void HybridOptimizer<T>::batch_add(Param& p, MatrixView<const T> g, bool finite) {
  const AnyOptimizer<T>& opt = optimizer(p.route);
  const Group& grp = groups_[p.group];
  const std::optional<T>& own = group_lr_[p.group];
  Batch& b = batches_[p.route == Route::Matrix ? 0 : 1];
  b.names.push_back(&p.name);
  b.params.push_back(p.view);
  b.grads.push_back(g);
  b.states.push_back(&p.state);
  const T route_lr = own ? *own : opt.lr(), lr = route_lr * grp.lr_scale;
  const T lambda = grp.weight_decay ? *grp.weight_decay : opt.weight_decay();
  // The product is this container's: checked before either route steps (a route checks its settings when its own
  // step begins, after the other route may have stepped).
  if (!(std::isfinite(static_cast<double>(lr)) && lr > T(0)))
    detail::fail("matopt::HybridOptimizer::step", "parameter '", p.name, "' of group '", grp.name, "': lr (", route_lr,
                 ") times the group's lr_scale (", grp.lr_scale, ") must be finite and > 0 (got ", lr,
                 "); nothing was changed");
  b.settings.push_back({lr, lambda, options_.non_finite, finite});
}

template <class T>
void HybridOptimizer<T>::batch_run() {
  for (const Batch& b : batches_)  // after the non-finite decision: a skipped step may name released states
    for (std::size_t k = 0; k < b.states.size(); ++k)
      if (!b.states[k]->valid())
        detail::fail("matopt::HybridOptimizer::step", "parameter '", *b.names[k],
                     "' holds no state (released: another rank steps it); nothing was changed");
  for (int r = 0; r < 2; ++r) {
    Batch& b = batches_[r];
    if (!b.params.empty())
      optimizer(r == 0 ? Route::Matrix : Route::AdamW).step(b.params, b.grads, b.states, b.settings);
  }
}


#if defined(MATOPT_RUNTIME_COMPILED)
// Linked with matopt::runtime (src/runtime.cpp): compiled there, once, for float and double.
extern template class HybridOptimizer<float>;
extern template class HybridOptimizer<double>;
extern template AnyOptimizer<float> detail::default_adamw<float>();
extern template AnyOptimizer<double> detail::default_adamw<double>();
#endif

/// Checkpoints of a HybridOptimizer (serialization/checkpoint.hpp's format): every parameter's name, route,
/// optimizer state, the skipped-step count and, with `parameters`, the parameters' values. Atomic on write;
/// loading changes nothing unless the whole file is valid and matches this container's parameters.
template <class T>
void save_checkpoint(const std::string& path, const HybridOptimizer<T>& h, bool parameters = false) {
  detail::write_file_atomically(path, h.checkpoint_bytes(parameters));
}
/// Writes the checkpoint to a stream (see the file overload).
template <class T>
void save_checkpoint(std::ostream& os, const HybridOptimizer<T>& h, bool parameters = false) {
  const std::string bytes = h.checkpoint_bytes(parameters);
  os.write(bytes.data(), std::streamsize(bytes.size()));
  if (!os) throw std::runtime_error("matopt checkpoint: the stream failed while writing");
}
/// Restores a checkpoint from the file `path` (all or nothing).
template <class T>
void load_checkpoint(const std::string& path, HybridOptimizer<T>& h) {
  h.restore(detail::read_file(path));
}
/// Restores a checkpoint from a stream (all or nothing).
template <class T>
void load_checkpoint(std::istream& is, HybridOptimizer<T>& h) {
  h.restore(detail::read_stream(is));
}

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// AnyOptimizer and make_optimizer(): any preset built from a name and key/value options, stepping raw views.
// A type-erased optimizer for frameworks configured at run time: build any preset from a name and
// key/value options, step raw (pointer, shape, layout) views. The typed presets stay the zero-overhead
// path; this wraps one of them behind one virtual call per step.
//
//   auto opt = matopt::make_optimizer<float>("rmnp", {{"lr", "0.01"}, {"momentum", "0.9"}});
//   auto state = opt.make_state(view_w);
//   opt.step(view_w, view_g, state);

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "matopt/core/detail/errors.hpp"
#include "matopt/core/step_policy.hpp"
#include "matopt/core/view.hpp"
#include "matopt/distributed/plan.hpp"
#include "matopt/serialization/archive.hpp"

namespace matopt {

/// Key/value options of make_optimizer; values are text ("0.02", "true", "polar_express").
using Config = std::map<std::string, std::string, std::less<>>;

namespace detail {
template <class Opt, class T, class = void>
inline constexpr bool has_telemetry_v = false;
template <class Opt, class T>
inline constexpr bool
    has_telemetry_v<Opt, T, std::void_t<decltype(std::declval<Opt&>().set_telemetry(std::declval<Telemetry<T>>()))>> =
        true;
/// Whether Opt is a matrix optimizer (Optimizer<T, P, M, S> names its preconditioner; AdamW and Lion do not).
template <class Opt, class = void>
inline constexpr bool has_preconditioner_type_v = false;
template <class Opt>
inline constexpr bool has_preconditioner_type_v<Opt, std::void_t<typename Opt::PreconditionerType>> = true;
}  // namespace detail

/// A type-erased optimizer for frameworks configured at run time: wraps any typed optimizer (a preset, a
/// composition, AdamW, Lion) behind one virtual call per step, and steps raw MatrixViews. make_optimizer() builds
/// one from a preset name and key/value options. Copies are deep.
/// @tparam T float or double.
template <class T>
class AnyOptimizer {
  struct StateBase {
    virtual ~StateBase() = default;
    virtual std::unique_ptr<StateBase> clone() const = 0;
    virtual Index rows() const = 0;
    virtual Index cols() const = 0;
    virtual std::size_t bytes() const = 0;
    virtual std::int64_t steps() const = 0;
    virtual std::int64_t skipped() const = 0;
    virtual std::int64_t zeroed() const = 0;
    virtual void write(detail::Writer& w) const = 0;
    virtual void read(detail::Reader& r) = 0;
    virtual bool scalar(std::string_view path, double& out, std::string& known) const = 0;
  };
  template <class Opt>
  struct StateModel final : StateBase {
    typename Opt::State state;
    explicit StateModel(typename Opt::State s) : state(std::move(s)) {}
    std::unique_ptr<StateBase> clone() const override { return std::make_unique<StateModel>(*this); }
    Index rows() const override { return state.rows; }
    Index cols() const override { return state.cols; }
    std::size_t bytes() const override { return state.bytes(); }
    std::int64_t steps() const override { return state.steps; }
    std::int64_t skipped() const override { return state.skipped; }
    std::int64_t zeroed() const override { return state.zeroed; }
    void write(detail::Writer& w) const override { w.state(state); }
    void read(detail::Reader& r) override { r.state(state); }
    bool scalar(std::string_view path, double& out, std::string& known) const override {
      return detail::find_scalar(state, path, out, known);
    }
  };

 public:
  /// The state of one parameter; made by make_state of the optimizer that steps it.
  class State {
   public:
    /// An empty state (valid() is false).
    State() = default;
    /// A deep copy.
    State(const State& o) : impl_(o.impl_ ? o.impl_->clone() : nullptr) {}
    /// Moves the state.
    State(State&&) noexcept = default;
    /// A deep copy.
    State& operator=(const State& o) {
      if (this != &o) impl_ = o.impl_ ? o.impl_->clone() : nullptr;
      return *this;
    }
    /// Moves the state.
    State& operator=(State&&) noexcept = default;
    /// Whether the state holds anything (made by make_state).
    bool valid() const { return impl_ != nullptr; }
    /// Rows of its parameter (0 when empty).
    Index rows() const { return impl_ ? impl_->rows() : 0; }
    /// Columns of its parameter (0 when empty).
    Index cols() const { return impl_ ? impl_->cols() : 0; }
    /// Bytes held (0 when empty).
    std::size_t bytes() const { return impl_ ? impl_->bytes() : 0; }
    std::int64_t steps() const { return impl_ ? impl_->steps() : 0; }      ///< steps taken
    std::int64_t skipped() const { return impl_ ? impl_->skipped() : 0; }  ///< skipped (NonFinite::Skip)
    std::int64_t zeroed() const { return impl_ ? impl_->zeroed() : 0; }    ///< taken with G zeroed (Zero)

    /// A scalar field of the wrapped state by its checkpoint path, e.g. "precondition.ns_steps" (AutoSteps'
    /// plan), "scaling.last_ratio" (a trust ratio), "precondition.exact" (Adaptive's choice). Throws
    /// std::invalid_argument naming the known paths when there is no such field.
    double field(std::string_view path) const {
      constexpr const char* where = "matopt::AnyOptimizer::State::field";
      if (!impl_) detail::fail(where, "the state is empty");
      double v = 0;
      std::string known;
      if (!impl_->scalar(path, v, known)) detail::fail(where, "no scalar field '", path, "' (fields: ", known, ")");
      return v;
    }

    /// Checkpoints (serialization/checkpoint.hpp): the wrapped state's fields.
    void write(detail::Writer& w) const {
      if (!impl_) detail::fail("matopt::AnyOptimizer::State", "cannot save an empty state");
      impl_->write(w);
    }
    /// Restores the wrapped state's fields from a checkpoint.
    void read(detail::Reader& r) {
      if (!impl_) detail::fail("matopt::AnyOptimizer::State", "cannot load into an empty state");
      impl_->read(r);
    }

   private:
    friend class AnyOptimizer;
    std::unique_ptr<StateBase> impl_;
  };

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual std::unique_ptr<Concept> clone() const = 0;
    virtual State make_state(MatrixView<const T> w) = 0;
    virtual void step(MatrixView<T> w, MatrixView<const T> g, State& s) = 0;
    virtual void step(const std::vector<MatrixView<T>>& w, const std::vector<MatrixView<const T>>& g,
                      const std::vector<State*>& s, const std::vector<ParamStep<T>>& k) = 0;
    virtual void set(std::string_view key, std::string_view value) = 0;
    virtual T lr() const = 0;
    virtual void set_lr(T) = 0;
    virtual T weight_decay() const = 0;
    virtual void set_weight_decay(T) = 0;
    virtual NonFinite non_finite() const = 0;
    virtual void set_non_finite(NonFinite) = 0;
    virtual void set_telemetry(Telemetry<T>) = 0;
    virtual T effective_lr(const State& s) const = 0;
    virtual std::string name() const = 0;
    virtual std::string identity() const = 0;
    virtual std::vector<OptionInfo> option_info() const = 0;
    virtual std::size_t workspace_bytes() const = 0;
    virtual double cost(Index m, Index n) const = 0;
  };

  template <class Opt>
  struct Model final : Concept {
    Opt opt;
    explicit Model(Opt o) : opt(std::move(o)) {}
    std::unique_ptr<Concept> clone() const override { return std::make_unique<Model>(*this); }

    State make_state(MatrixView<const T> w) override {
      State s;
      detail::with_map(w, [&](const auto& map) {
        s.impl_ = std::make_unique<StateModel<Opt>>(opt.make_state(map));
      });
      return s;
    }
    typename Opt::State& typed(State& s) const {
      auto* p = dynamic_cast<StateModel<Opt>*>(s.impl_.get());
      if (p == nullptr)
        detail::fail(opt.name(), s.impl_ ? "state was made by a different optimizer" : "state is empty");
      return p->state;
    }
    const typename Opt::State& typed(const State& s) const { return typed(const_cast<State&>(s)); }

    void step(MatrixView<T> w, MatrixView<const T> g, State& s) override {
      auto& st = typed(s);
      if (!detail::same_layout(w.layout, g.layout, w.rows, w.cols))
        detail::fail(opt.name(), "G is ", detail::layout_name(g.layout), " but W is ",
                     detail::layout_name(w.layout), " (", detail::shape_string(w.rows, w.cols), ")");
      detail::with_map(w, [&](auto& wm) {
        detail::with_map(MatrixView<const T>{g.data, g.rows, g.cols, w.layout},
                         [&](const auto& gm) { opt.step(wm, gm, st); });
      });
    }
    void step(const std::vector<MatrixView<T>>& w, const std::vector<MatrixView<const T>>& g,
              const std::vector<State*>& s, const std::vector<ParamStep<T>>& k) override {
      constexpr const char* where = "matopt::AnyOptimizer::step";
      if (g.size() != w.size() || s.size() != w.size() || k.size() != w.size())
        detail::fail(where, "batched step got ", w.size(), " parameters, ", g.size(), " gradients, ", s.size(),
                     " states and ", k.size(), " settings");
      typed_.clear();  // keeps its capacity: no allocation after the first step
      for (State* p : s) {
        if (p == nullptr) detail::fail(where, "a state is null");
        typed_.push_back(&typed(*p));
      }
      opt.step(w, g, typed_, k);
    }
    void set(std::string_view key, std::string_view value) override {
      auto o = opt.options();
      if (!Opt::set_option(o, key, value))
        detail::fail(opt.name(), "unknown option '", key, "' (known: ", Opt::option_keys(), ")");
      Opt::validate(o, opt.name());
      opt.options() = o;
    }
    T lr() const override { return opt.options().lr; }
    void set_lr(T v) override {
      detail::require_positive(opt.name(), "lr", v);
      opt.options().lr = v;
    }
    T weight_decay() const override { return opt.options().weight_decay; }
    void set_weight_decay(T v) override {
      detail::require_nonnegative(opt.name(), "weight_decay", v);
      opt.options().weight_decay = v;
    }
    NonFinite non_finite() const override { return opt.options().non_finite; }
    void set_non_finite(NonFinite p) override { opt.options().non_finite = p; }
    void set_telemetry(Telemetry<T> t) override {
      if constexpr (detail::has_telemetry_v<Opt, T>) opt.set_telemetry(std::move(t));
      else if (t.every > 0) detail::fail(opt.name(), "does not report telemetry");
    }
    T effective_lr(const State& s) const override { return opt.effective_lr(typed(s)); }
    std::string name() const override { return opt.name(); }
    std::string identity() const override { return Opt::identity(); }
    std::vector<OptionInfo> option_info() const override { return matopt::option_info<Opt>(opt.options()); }
    std::size_t workspace_bytes() const override { return opt.workspace_bytes(); }
    double cost(Index m, Index n) const override {
      if constexpr (detail::has_preconditioner_type_v<Opt>) return preconditioner_cost<typename Opt::PreconditionerType>(m, n);
      else return double(m) * double(n);  // AdamW, Lion: elementwise
    }
    std::vector<typename Opt::State*> typed_;  ///< the batched step's typed states
  };

 public:
  /// Wraps a typed optimizer (a preset, a composition, or AdamW).
  template <class Opt, class = std::enable_if_t<!std::is_same_v<std::decay_t<Opt>, AnyOptimizer>>>
  explicit AnyOptimizer(Opt opt) : impl_(std::make_unique<Model<Opt>>(std::move(opt))) {
    static_assert(std::is_same_v<typename Opt::Scalar, T>, "matopt::AnyOptimizer<T>: scalar types differ");
  }
  /// A deep copy of the wrapped optimizer.
  AnyOptimizer(const AnyOptimizer& o) : impl_(o.impl_->clone()) {}
  /// Moves the wrapped optimizer.
  AnyOptimizer(AnyOptimizer&&) noexcept = default;
  /// A deep copy of the wrapped optimizer.
  AnyOptimizer& operator=(const AnyOptimizer& o) {
    if (this != &o) impl_ = o.impl_->clone();
    return *this;
  }
  /// Moves the wrapped optimizer.
  AnyOptimizer& operator=(AnyOptimizer&&) noexcept = default;

  /// Allocates the state of a parameter W (see Optimizer::make_state).
  State make_state(MatrixView<const T> w) { return impl_->make_state(w); }
  /// One step of W with gradient G (see Optimizer::step); throws std::invalid_argument, leaving W and s unchanged.
  void step(MatrixView<T> w, MatrixView<const T> g, State& s) { impl_->step(w, g, s); }
  /// Steps many parameters in one call, each with its own settings (ParamStep: lr, weight decay, non-finite
  /// policy, and whether its gradient is known finite); the options are not changed. Every parameter is checked
  /// before any is written. A matrix optimizer runs small matrices in parallel, one per thread
  /// (Optimizer::step(params, grads, states, settings)); AdamW and Lion step each parameter in turn.
  void step(const std::vector<MatrixView<T>>& w, const std::vector<MatrixView<const T>>& g,
            const std::vector<State*>& s, const std::vector<ParamStep<T>>& settings) {
    impl_->step(w, g, s, settings);
  }

  /// Sets one option from text; an unknown key or a bad value throws and changes nothing.
  void set(std::string_view key, std::string_view value) { impl_->set(key, value); }
  /// The learning rate.
  T lr() const { return impl_->lr(); }
  /// Sets the learning rate (> 0; throws std::invalid_argument otherwise).
  void set_lr(T lr) { impl_->set_lr(lr); }
  /// The weight decay.
  T weight_decay() const { return impl_->weight_decay(); }
  /// Sets the weight decay (>= 0; throws std::invalid_argument otherwise).
  void set_weight_decay(T wd) { impl_->set_weight_decay(wd); }
  /// The non-finite-gradient policy (options.non_finite of the wrapped optimizer).
  NonFinite non_finite() const { return impl_->non_finite(); }
  /// Sets the non-finite-gradient policy.
  void set_non_finite(NonFinite p) { impl_->set_non_finite(p); }
  /// Telemetry of a matrix optimizer (AdamW does not report; a non-zero `every` throws for it).
  void set_telemetry(Telemetry<T> t) { impl_->set_telemetry(std::move(t)); }
  /// The wrapped optimizer's effective lr for this state (Optimizer::effective_lr).
  T effective_lr(const State& s) const { return impl_->effective_lr(s); }
  /// The wrapped optimizer's name, such as "matopt::Muon".
  std::string name() const { return impl_->name(); }
  /// The wrapped optimizer's identity (checkpoints): states it made load only into the same kind.
  std::string identity() const { return impl_->identity(); }
  /// The planner's cost of one step of an m x n parameter (preconditioner_cost of the wrapped optimizer's
  /// preconditioner; m n for AdamW and Lion): what the distributed optimizers balance across ranks.
  double cost(Index m, Index n) const { return impl_->cost(m, n); }
  /// The keys set() accepts (the wrapped optimizer's option_keys()).
  std::string option_keys() const { return detail::join_keys(impl_->option_info()); }
  /// Every option set() accepts, with what it accepts, its current value and a line on what it does (the
  /// optimizer's descriptors, core/options.hpp): for a command line's help, or a record of a run's settings.
  std::vector<OptionInfo> option_info() const { return impl_->option_info(); }
  /// The wrapped optimizer's workspace bytes.
  std::size_t workspace_bytes() const { return impl_->workspace_bytes(); }

 private:
  std::unique_ptr<Concept> impl_;
};

/// The preset names make_optimizer knows, from the preset table (presets.hpp) in its order: "muon, moonlight_muon,
/// rmnp, ...". An inline variable, defined in facade/detail/factory.hpp or, with matopt::runtime, below.
extern const std::string optimizer_names;
#if defined(MATOPT_RUNTIME_COMPILED)
namespace detail {
/// The preset table's names (detail::preset_names), compiled in matopt::runtime (src/runtime.cpp).
std::string compiled_preset_names();
}  // namespace detail
inline const std::string optimizer_names = detail::compiled_preset_names();
#endif

/// Builds a preset by name (optimizer_names) with key/value options (keys: each preset's option_keys()).
/// Throws std::invalid_argument for an unknown name, key or a bad value.
template <class T>
AnyOptimizer<T> make_optimizer(std::string_view name, const Config& config = {});

#if defined(MATOPT_RUNTIME_COMPILED)
// Linked with matopt::runtime: the facade for float and double is compiled there, once (src/runtime.cpp), and its
// users' files include none of the presets (facade/detail/factory.hpp; include matopt/presets.hpp to name one).
extern template class AnyOptimizer<float>;
extern template class AnyOptimizer<double>;
extern template AnyOptimizer<float> make_optimizer<float>(std::string_view, const Config&);
extern template AnyOptimizer<double> make_optimizer<double>(std::string_view, const Config&);
#endif

}  // namespace matopt

#if !defined(MATOPT_RUNTIME_COMPILED)
#include "matopt/facade/detail/factory.hpp"
#endif

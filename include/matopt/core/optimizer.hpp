// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// matopt::Optimizer, a matrix optimizer composed of a momentum, a preconditioner and a scaling policy.
// matopt::Optimizer: one matrix optimizer step as Momentum -> Preconditioner -> Scaling -> update
// (docs/design.md#the-step-pipeline). Each stage is a policy; the presets in matopt/presets.hpp name the
// published combinations.
//
// A step, for W, G of shape m x n:
//   U      = u_g G + u_v V                 (momentum policy; V is the buffer)
//   D      = Preconditioner(U)
//   W      = Scaling(W, D, G)              (docs/math.md#weight-decay; e.g. W (1 - lr lambda) - lr s(m,n) D)
//   V      = v_v V + v_g G                 (each stage's formulas, with their papers: docs/math.md)
// Nothing is written before every check has passed; W and the state are left unchanged on a throw.
// A gradient with an inf or NaN is handled by Options::non_finite (throw, skip or zero; step_policy.hpp).

/// @page policies Policy concepts
/// Optimizer<T, Preconditioner, MomentumPolicy, Scaling, Defaults> steps W with gradient G as U = u_g G + u_v V
/// (momentum), D = Preconditioner(U), W <- Scaling(W, D, G), V <- v_v V + v_g G. Each stage is a policy: a struct
/// of static members and nested types, never instantiated. The members every policy of a kind declares are
/// described here once; each policy's page says only what is particular to it. A user policy declares the same.
///
/// @section policy_common Every policy with options
/// - `Options`: its hyperparameters, an aggregate with defaults (held in Optimizer::Options).
/// - `name()`: its name in messages; `identity()`, where declared, also names the policies it wraps (checkpoints
///   record it).
/// - `describe(o, d)` (a template over `O` = Options or const Options and the walker `D`): every option declared
///   once, as `d(key, o.field, check, doc)` (core/options.hpp: checks::Positive, AtLeast{1}, one_of(names), ...),
///   rules across options as `d.rule(f)` (f(where) throws std::invalid_argument), and a wrapped policy's options
///   as `Inner::describe(o.inner, d)`. Optimizer's validate (at construction and before every step, before
///   anything is written), set_option (the facade's key/value text), option_keys and the docs' key table all walk
///   it; a key of both the preconditioner and the scaling is refused.
///
/// @section policy_momentum Momentum policies (Momentum, NoMomentum)
/// - `has_buffer`: whether the policy keeps a buffer V of W's size (Optimizer::State::momentum).
/// - `nesterov_default`: the default of Optimizer::Options::nesterov.
/// - `coefficients(beta, nesterov)`: the MomentumCoefficients u_g, u_v, v_v, v_g of a step with momentum beta.
///
/// @section policy_preconditioner Preconditioners (Identity, Sign, Orthogonalize, RowNormalize, ColNormalize, ...)
/// A preconditioner has a host form, an engine form, or both (Identity, Sign, RowNormalize, ColNormalize: their host
/// form's lazy expressions spare a pass over U). Optimizer runs the host form where there is one, else the engine
/// form on the host engine; DeviceOptimizer runs the engine form.
/// - Host form: `Workspace<T>` (scratch shared by every parameter one optimizer steps, so that a step allocates
///   nothing; `bytes()` is its size), `reserve(ws, o, m, n)` (grows, never shrinks, `ws` to fit an m x n parameter;
///   make_state calls it) and `apply<T>(u, o, ws, sink)`: computes D from the expression U (m x n) and calls
///   `sink(D)`; D may be an expression or a view of the workspace, valid during the call. A preconditioner with
///   per-parameter state takes it after `ws`; one that declares `reads_gradient` also takes G after U.
/// - Engine form (core/detail/engine_form.hpp; Orthogonalize, AutoSteps, OnEngine, Adaptive, NuclearScaled,
///   SecondMoment and DionPowerIteration have this form only): `reserve_on(ws, o, m, n)` and `apply_on(e, ws, o,
///   [state,] m, n, layout, form_u)`, written once for every engine: form_u(target) writes U into a view of the
///   workspace and D is returned as one.
/// - `State<T>` (optional): per-parameter state (Optimizer::State::precondition), with `fields(f)` (every field,
///   for checkpoints) and `bytes()`; `init_state(state, o, m, n)` sizes it.
/// - Optional: `splits_rows` (W's RowBlocks are stepped one by one), `check_state(state, o, m, n, where)` (whether
///   the state fits the options, checked before a step). With a momentum buffer under Static scaling, RowNormalize
///   and ColNormalize step in one pass, the engine's `fused_normalize_rows` (precondition/detail/fused_normalize.hpp),
///   and on the host so do Identity and Sign (`fused_update_entries`): Driver::fused.
///
/// @section policy_method Orthogonalization methods of Orthogonalize (NewtonSchulz, GramNewtonSchulz, ExactPolar)
/// - NewtonSchulz: `Options` (the schedule, variant and precision) and `uses_gram(o, r, s)`; the iteration is
///   precondition/detail/ns_algorithm.hpp on the engine's products.
/// - ExactPolar: `Workspace<T>`, `reserve(ws, o, r, s)` and `run<T, Order>(r, s, o, ws)`, the polar factor of the
///   r x s input (r <= s) in its x, by an SVD on the host.
///
/// @section policy_moment Second moments of SecondMoment (namespace moments)
/// - `sign_input`: whether the inner preconditioner receives sign(U) instead of U.
/// - `state_size(m, n)`, `workspace_size(m, n)`: entries of S and of the per-line factors for an m x n direction.
/// - `engine_state`: whether S is read and written by engine operations (device memory on a device engine) rather
///   than by the moment's own host code; `reads_input_norm`: whether apply calls u_norm().
/// - `apply<T>(e, d, o, s, f, g_norm, u_norm, sink)`: updates S (at `s`) from D = Inner(U) and calls sink(D'), written
///   once with the operations of the engine e (`rows`, `cols`, `norm`, `line_squared_norms`, `scale_lines`,
///   `moment_normalized`, `scaled`: the host's, or a device engine's); f: host scratch of workspace_size(m, n)
///   entries; g_norm() and u_norm() return ||G||_F and ||U||_F.
///
/// @section policy_scaling Scaling policies (Static, TrustRatio, SpectralCap)
/// - `State<T>`: per-parameter state (Optimizer::State::scaling; empty for Static), with `fields(f)` for
///   checkpoints; `init_state(state, m, n)`, where declared, sizes it.
/// - `update(e, w, d, g, state, o, lr, lambda)`: applies D to W with learning rate lr and weight decay lambda, written
///   once with the operations of the engine e (the host's, or a device engine's; `docs/extending.md#a-new-scaling`).
/// - `effective_lr(o, state, lr, m, n)`: the per-parameter learning rate the update uses (Optimizer::effective_lr).
/// - Optional: `has_fused_step` and `coefficients(o, lr, lambda, m, n)`, the update as W <- keep W - step D.
///
/// @section policy_shape Shape rules s(m, n) (namespace shape)
/// - `name`: the rule's name; `operator()(m, n)`: s for an m x n parameter (m = rows = fan-out, n = fan-in).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "matopt/core/detail/driver.hpp"
#include "matopt/core/detail/engine.hpp"
#include "matopt/core/detail/engine_form.hpp"
#include "matopt/core/detail/engine_step.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/parallel.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/core/detail/workspace.hpp"
#include "matopt/core/options.hpp"
#include "matopt/core/step_policy.hpp"
#include "matopt/core/view.hpp"
#include "matopt/precondition/detail/engine_workspace.hpp"
#include "matopt/precondition/row_blocks.hpp"

namespace matopt {

namespace detail {
/// Whether S::update takes the engine first, as every optimizer calls it: update(e, w, d, g, state, options, lr,
/// lambda) with the host engine's operations on Eigen matrices (and PolicyEngine's on views in the engine step).
template <class S, class T, class = void>
inline constexpr bool has_engine_update_v = false;
template <class S, class T>
inline constexpr bool has_engine_update_v<
    S, T,
    std::void_t<decltype(S::update(std::declval<HostEngine&>(), std::declval<DenseMap<T>&>(),
                                   std::declval<const DenseMap<T>&>(), std::declval<const DenseMap<T>&>(),
                                   std::declval<typename S::template State<T>&>(),
                                   std::declval<const typename S::Options&>(), T(), T()))>> = true;

/// The fields of an Optimizer's per-parameter state, in checkpoint order (serialization/archive.hpp): f(name,
/// field). `momentum` is the buffer as a host vector: the state's own, or DeviceOptimizer's host copy of its
/// device buffer, so both write and read the same file.
/// `precondition` is the preconditioner's state: the state's own, or DeviceOptimizer's copy holding a device-resident
/// part in host memory.
template <class S, class V, class P, class F>
void optimizer_state_fields(S& s, V& momentum, P& precondition, F&& f) {
  s.counter_fields(f);
  f("momentum", momentum);
  f("precondition", precondition);
  f("scaling", s.scaling);
}

/// f(w, g) with W's view and G's data as StepMaps of W's storage order (one branch on it, so that f is compiled
/// for matching orders only; with_map's map is the StepMap), after the checks of both views.
template <class T, class F>
void with_step_maps(MatrixView<T> w, MatrixView<const T> g, F&& f) {
  check_view(g);
  with_map(w, [&](auto& wm) {
    auto gmap = step_map<const T, layout_of_v<decltype(wm)>>(g.data, g.rows, g.cols);
    f(wm, gmap);
  });
}
}  // namespace detail

/// The lr and weight-decay defaults of an Optimizer, with its name for messages. A preset names its own;
/// a user composition gets `defaults::Standard` (lr 0.02, weight decay 0).
namespace defaults {
/// The defaults of a user composition: lr 0.02, weight decay 0, messages naming "matopt::Optimizer". A Defaults
/// type of Optimizer declares these three members.
struct Standard {
  /// Name of the optimizer in messages and checkpoints.
  static constexpr const char* name = "matopt::Optimizer";
  /// Default of Options::lr.
  static constexpr double lr = 0.02;
  /// Default of Options::weight_decay.
  static constexpr double weight_decay = 0.0;
};
}  // namespace defaults

/// A matrix optimizer: Momentum -> Preconditioner -> Scaling -> update (the policies: @ref policies; the published
/// combinations: presets.hpp). A step of W with gradient G (m x n): U = u_g G + u_v V, D = Preconditioner(U),
/// W <- Scaling(W, D, G) (e.g. W (1 - lr lambda) - lr s(m, n) D), V <- v_v V + v_g G. One optimizer steps any
/// number of parameters, each with its own State (make_state); it holds the options and a workspace shared by them.
/// @tparam T float or double.
/// @tparam Preconditioner computes D from U (Orthogonalize, RowNormalize, ...).
/// @tparam MomentumPolicy Momentum<Ema or Sum, Nesterov or Plain>, or NoMomentum.
/// @tparam Scaling applies D to W (Static, TrustRatio, SpectralCap).
/// @tparam Defaults lr, weight decay and name (defaults::Standard, or a preset's).
template <class T, class Preconditioner, class MomentumPolicy, class Scaling,
          class Defaults = defaults::Standard>
class Optimizer {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "matopt::Optimizer<T, ...>: T must be float or double");
  static_assert(detail::check_preconditioner<Preconditioner, T>(),
                "matopt::Optimizer<T, Preconditioner, ...>: the preconditioner lacks a member (see the message above)");
  static_assert(detail::check_state_hooks<Scaling, T, false>(),
                "matopt::Optimizer<T, ..., Scaling>: the scaling's state hooks (see the message above)");
  static_assert(detail::has_engine_update_v<Scaling, T>,
                "matopt::Optimizer<T, ..., Scaling>: a scaling's update is `template <class T, class Engine, class W, "
                "class D, class G> static void update(Engine& e, W& w, const D& d, const G& g, State<T>&, const "
                "Options&, T lr, T lambda)`, written with the engine's operations (e.norm, e.update, ...; "
                "docs/extending.md#a-new-scaling) so that it runs on every engine");

 public:
  /// The scalar type T.
  using Scalar = T;
  /// The preconditioner policy.
  using PreconditionerType = Preconditioner;
  /// The momentum policy.
  using MomentumType = MomentumPolicy;
  /// The scaling policy.
  using ScalingType = Scaling;

  /// Hyperparameters (an aggregate; defaults: `docs/math.md#presets`). `weight_decay` is decoupled under Static scaling
  /// and coupled under TrustRatio (`docs/math.md#trust-ratio-orscale-lars`).
  struct Options {
    /// Learning rate, > 0 (default: Defaults::lr).
    T lr = T(Defaults::lr);
    /// Momentum coefficient beta, in [0, 1) (default 0.95; no effect under NoMomentum).
    T momentum = T(0.95);
    /// Nesterov momentum (default: the momentum policy's nesterov_default).
    bool nesterov = MomentumPolicy::nesterov_default;
    /// Weight decay lambda, >= 0 (default: Defaults::weight_decay).
    T weight_decay = T(Defaults::weight_decay);
    /// The preconditioner's options.
    typename Preconditioner::Options precondition{};
    /// The scaling policy's options.
    typename Scaling::Options scaling{};
    NonFinite non_finite = NonFinite::Throw;  ///< what a gradient with an inf or NaN does
  };

  /// Per-parameter state: the momentum buffer (in W's storage order) and the policies' own state.
  struct State : StateCounters {
    /// The momentum buffer V, in W's storage order (empty without a buffer).
    Eigen::Matrix<T, Eigen::Dynamic, 1> momentum;
    /// The preconditioner's per-parameter state (an empty struct when it keeps none).
    detail::policy_state_t<Preconditioner, T> precondition{};
    /// The scaling policy's per-parameter state.
    typename Scaling::template State<T> scaling{};

    /// Bytes held by this state (the momentum buffer and the policies' state).
    std::size_t bytes() const {
      return static_cast<std::size_t>(momentum.size()) * sizeof(T) + detail::state_bytes(precondition) +
             detail::state_bytes(scaling);
    }
    /// Every field, for checkpoints (serialization/checkpoint.hpp): f(name, field).
    template <class F>
    void fields(F&& f) {
      detail::optimizer_state_fields(*this, momentum, precondition, f);
    }
  };

  /// An optimizer with the default options.
  Optimizer() : Optimizer(Options{}) {}
  /// An optimizer with these options; throws std::invalid_argument naming the first bad one.
  explicit Optimizer(const Options& options) : options_(options) { validate(options_, Defaults::name); }

  /// Mutable between steps: learning-rate and weight-decay schedules are the caller's. Checked at each step.
  Options& options() { return options_; }
  /// The options (read-only).
  const Options& options() const { return options_; }

  /// Defaults::name, such as "matopt::Muon" (the prefix of its error messages).
  static constexpr const char* name() { return Defaults::name; }
  /// The name and policies, as checkpoints record them.
  static std::string identity() {
    return std::string(Defaults::name) + "<" + detail::policy_identity<Preconditioner>() + ", " +
           MomentumPolicy::name() + ", " + detail::policy_identity<Scaling>() + ">";
  }

  /// The options (core/options.hpp): lr, momentum and nesterov (with a momentum buffer), weight_decay, non_finite,
  /// then the preconditioner's and the scaling's.
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("lr", o.lr, checks::Positive{}, "the learning rate");
    if constexpr (MomentumPolicy::has_buffer) {
      d("momentum", o.momentum, checks::UnitInterval{}, "beta of the momentum");
      d("nesterov", o.nesterov, checks::Any{}, "the Nesterov form of the momentum");
    }
    detail::describe_decay_and_gate(o, d);
    Preconditioner::describe(o.precondition, d);
    Scaling::describe(o.scaling, d);
  }
  /// Throws std::invalid_argument naming the first bad hyperparameter.
  static void validate(const Options& o, std::string_view where) { detail::validate_options<Optimizer>(o, where); }

  /// Allocates the state for parameter W (momentum + scaling state) and grows this optimizer's shared
  /// workspace to fit W's shape.
  template <class WMat>
  State make_state(const Eigen::MatrixBase<WMat>& w) {
    return make_state(w.rows(), w.cols(), detail::layout_of_v<WMat>);
  }

  /// One step, in place. Throws std::invalid_argument (leaving W and state unchanged) on bad
  /// hyperparameters, a shape or layout mismatch, or (under NonFinite::Throw) a non-finite gradient.
  /// W and G contiguous in one storage order (Matrix, Map of one) step through one compiled path per order
  /// (step_map); a Block or Ref steps in place, and what is no view of memory (an IndexedView W, a G computed on the
  /// fly) as a copy in the optimizer's buffers (W written back).
  template <class WMat, class GMat>
  void step(WMat&& w, const Eigen::MatrixBase<GMat>& g, State& state) {
    static_assert(detail::is_eigen_matrix_v<WMat>,
                  "matopt::Optimizer::step: W must be an Eigen matrix (Matrix, Map, Ref, Block)");
    using W = detail::remove_cvref_t<WMat>;
    constexpr Layout layout = detail::layout_of_v<W>;
    if constexpr (detail::steps_as_map_v<T, W, GMat>)
      step_map<layout>(detail::step_map<T, layout>(w), detail::step_map<const T, layout>(g.derived()), state);
    else
      on_views(w, g.derived(),
               [&](detail::Strided<T> wv, detail::Strided<const T> gv, const T* param, detail::Callback write_back) {
                 step_views<layout, false>(wv, gv, state, param, write_back);
               });
  }

  /// Steps many parameters at once: params[i] with grads[i] and states[i]. Everything is checked before
  /// anything changes. Matrices of at most detail::kTile rows and columns run in parallel, one per thread
  /// (with a workspace per thread, and under the BLAS engine with OpenBLAS held to one thread meanwhile:
  /// detail::SerialEngineScope); larger ones one after another, each using all threads. Results are
  /// bitwise identical for any number of threads, and to stepping each parameter alone (under the BLAS
  /// engine the small ones equal a step with OpenBLAS on one thread, and a threaded one within rounding).
  /// Parameters whose gradient is zeroed, or whose step reports telemetry, run after the parallel part, one
  /// by one.
  void step(const std::vector<MatrixView<T>>& params, const std::vector<MatrixView<const T>>& grads,
            std::vector<State>& states) {
    step_batch(params, grads, [&](std::size_t i) -> State& { return states.at(i); }, states.size(), nullptr);
  }
  /// The batched step with each parameter's own settings (ParamStep: its lr, weight decay, non-finite policy and,
  /// when already known, whether its gradient is finite), for containers that step parameters of several groups
  /// in one call (HybridOptimizer): the options' lr, weight_decay and non_finite are not read, and not changed.
  /// states[i] points at parameter i's state. Same results as stepping each parameter alone with options
  /// holding its settings.
  void step(const std::vector<MatrixView<T>>& params, const std::vector<MatrixView<const T>>& grads,
            const std::vector<State*>& states, const std::vector<ParamStep<T>>& settings) {
    if (settings.size() != params.size())
      detail::fail(Defaults::name, "batched step got ", params.size(), " parameters and ", settings.size(),
                   " settings");
    detail::require_distinct_states(Defaults::name, states, sorted_states_);
    step_batch(params, grads, [&](std::size_t i) -> State& { return *states[i]; }, states.size(), &settings);
  }

  /// Reports every `t.every`-th step of each parameter to `t.callback` (step_policy.hpp). Off by default.
  void set_telemetry(Telemetry<T> t) { driver_.telemetry = std::move(t); }
  /// The telemetry settings (set_telemetry).
  const Telemetry<T>& telemetry() const { return driver_.telemetry; }

  /// The per-parameter learning rate the update actually uses: lr * s(m, n) for Static scaling, lr * r * s
  /// (last step's trust ratio) for TrustRatio.
  T effective_lr(const State& s) const { return effective_lr(s, options_.lr); }

  /// Bytes of the workspace shared by every parameter this optimizer steps (sized by the largest), plus
  /// the per-thread workspaces of the batched step (sized by the largest small parameter).
  std::size_t workspace_bytes() const {
    std::size_t b = bytes_of(workspace_) + driver_.bytes() + copy_w_.bytes() + copy_g_.bytes();
    for (const auto& ws : thread_workspaces_) b += bytes_of(ws);
    return b;
  }

  /// Sets one option from text, for run-time configuration (the facade). Keys: lr, momentum, nesterov,
  /// weight_decay, and the policies' own (option_keys()). Returns false for an unknown key.
  static bool set_option(Options& o, std::string_view key, std::string_view value) {
    if ((key == "momentum" || key == "nesterov") && !MomentumPolicy::has_buffer)
      detail::fail(Defaults::name, "option '", key, "' does not apply: it steps without momentum (",
                   MomentumPolicy::name(), ")");
    // A key is one stage's: one that both stages accept would be a silent choice, so it is an error.
    if (detail::knows_option<Preconditioner>(key) && detail::knows_option<Scaling>(key))
      detail::fail(Defaults::name, "option '", key, "' is a key of both its preconditioner (", Preconditioner::name(),
                   ") and its scaling (", Scaling::name(), "): a composition must give each key one meaning");
    return detail::set_option<Optimizer>(o, key, value);
  }
  /// The keys set_option() accepts: lr, momentum and nesterov (with a momentum policy), weight_decay, non_finite,
  /// then the policies' own.
  static std::string option_keys() { return detail::option_keys<Optimizer>(); }

 private:
  /// Whether the preconditioner steps through its engine form on the host (detail::host_engine_form_v: the
  /// composites), with detail::HostEngine on a HostWorkspace; the others run their host form on Eigen expressions.
  static constexpr bool engine_form = detail::host_engine_form_v<Preconditioner, T>;
  static_assert(!engine_form || detail::has_engine_form_v<Preconditioner, detail::HostWorkspace<T>>,
                "matopt::Optimizer<T, Preconditioner, ...>: a preconditioner declares a host form (`template <class "
                "T> struct Workspace` with `std::size_t bytes() const`, `template <class T> static void "
                "reserve(Workspace<T>&, const Options&, Index m, Index n)` and `apply`: docs/extending.md) or an "
                "engine form (`template <class WS> static void reserve_on(WS&, const Options&, Index m, Index n)` and "
                "`apply_on`: core/detail/engine_form.hpp)");
  using Workspace = detail::host_workspace_t<Preconditioner, T>;
  /// An engine form's step on the host engine (core/detail/engine_step.hpp).
  using Step = detail::EngineStep<T, Preconditioner, MomentumPolicy, Scaling, detail::HostEngine, Workspace, Options>;
  /// The gate, report and counters around a step (core/detail/driver.hpp).
  using Driver = detail::Driver<T, Preconditioner, MomentumPolicy, Scaling, Options, detail::HostStore, StepReport<T>>;
  static_assert(!detail::splits_rows_v<Preconditioner> || engine_form,
                "matopt::Optimizer: a preconditioner that declares splits_rows has an engine form and no host form "
                "(no Workspace<T>): row blocks are stepped through the engine form (core/detail/engine_step.hpp)");

  /// Sizes ws for an m x n parameter (and, for an engine form, for each of its row blocks; `whole = false`: for
  /// those only).
  void reserve_precondition(Workspace& ws, Index m, Index n, bool whole = true) {
    if constexpr (engine_form) {
      detail::HostEngine e;
      Step::reserve(e, ws, options_, m, n, whole);
    } else {
      Preconditioner::reserve(ws, options_.precondition, m, n);
    }
  }
  static std::size_t bytes_of(const Workspace& ws) {
    if constexpr (engine_form) return ws.bytes() + ws.host_bytes();
    else return ws.bytes();
  }

  // Defined below the class, not inline: linked with matopt::runtime, presets.hpp declares them extern for the
  // runtime's presets, and a file that steps a preset then compiles none of its step (src/runtime_presets.hpp).
  State make_state(Index rows, Index cols, Layout layout);
  template <Layout L>
  void step_map(detail::StepMap<T, L> w, detail::StepMap<const T, L> g, State& state);
  template <class StateAt>
  void step_batch(const std::vector<MatrixView<T>>& params, const std::vector<MatrixView<const T>>& grads,
                  StateAt&& state_at, std::size_t state_count, const std::vector<ParamStep<T>>* settings);

  /// The settings of a step that uses this optimizer's own options.
  ParamStep<T> own_settings() const { return {options_.lr, options_.weight_decay, options_.non_finite, std::nullopt}; }
  /// effective_lr() at the given lr.
  T effective_lr(const State& s, T lr) const { return Driver::effective_lr(options_, s, lr); }

  /// Whether the batched step runs this parameter in its parallel part, one thread each: an engine that can be
  /// held to the calling thread (a threaded BLAS called from several threads at once oversubscribes the cores:
  /// 64 x 256^2 Muon ran at 0.47x the FLOP rate of one 2048^2 that way), products at most a kTile^3 problem (the
  /// steps serial_products holds to one thread anyway: 64 x 768, the GPT example's 128 x 512) and at most
  /// 4 kTile^2 elements (a long thin normalization keeps its threaded row passes).
  static bool small(Index m, Index n) {
    const double tile = double(detail::kTile);
    return detail::kEngineSerializable && double(m) * double(n) <= 4 * tile * tile &&
           (std::max(m, n) <= detail::kTile || serial_products(m, n));
  }

  /// Under the BLAS engine, whether a step holds OpenBLAS to one thread: when its largest product (r^2 s for
  /// Newton-Schulz, r = min(m, n), s = max(m, n)) is at most a kTile^3 problem. OpenBLAS's threads do not pay
  /// at that size, and they compete with matopt's own OpenMP threads, which spin after each region under
  /// libgomp's default wait policy (float products of m n k <= 1e6 run in the Eigen tiles, each in a region):
  /// such steps ran several times slower, and erratically, with OpenBLAS's threads than with one
  /// (`docs/performance.md#row-blocks-and-small-products`).
  static bool serial_products(Index m, Index n) {
    const double r = double(std::min(m, n)), s = double(std::max(m, n)), tile = double(detail::kTile);
    return detail::kEngineThreads && detail::kEngineSerializable && r * r * s <= tile * tile * tile;
  }

  /// Sizes the shared workspace for an m x n parameter, and for small ones a workspace per extra thread (for
  /// row blocks stepped in parallel: a workspace per extra thread sized for the blocks).
  void reserve_workspaces(Index m, Index n, int threads) {
    reserve_precondition(workspace_, m, n);
    driver_.reserve(options_, m * n);
    if (small(m, n)) {
      if (thread_workspaces_.size() + 1 < std::size_t(threads)) thread_workspaces_.resize(std::size_t(threads - 1));
      for (auto& ws : thread_workspaces_) reserve_precondition(ws, m, n);
    }
    reserve_block_workspaces(m, n, threads);
  }

  /// Whether each_block steps the row blocks of an m-row W each on one thread, under a SerialEngineScope, in
  /// parallel when OpenMP offers threads (core/detail/parallel.hpp): two blocks or more and an engine that can be held
  /// to the calling thread. Per-head blocks are small products, which a threaded BLAS runs poorly; the result
  /// depends on no thread count.
  bool parallel_blocks(Index m) const {
    if constexpr (detail::splits_rows_v<Preconditioner> && std::is_empty_v<typename Scaling::template State<T>>) {
      const RowBlocks& b = options_.precondition;
      return detail::kEngineSerializable && b.blocked() && b.fits(m) && b.count() > 1;
    }
    return false;
  }
  /// A workspace per extra thread for the blocks' shapes (parallel_blocks), so that no step allocates.
  void reserve_block_workspaces(Index m, Index n, int threads) {
    if (threads < 2 || !parallel_blocks(m)) return;
    if (thread_workspaces_.size() + 1 < std::size_t(threads)) thread_workspaces_.resize(std::size_t(threads - 1));
    for (auto& ws : thread_workspaces_) reserve_precondition(ws, m, n, false);
  }

  /// The checks of a step of W with G (views laid out as L; Driver::check_step), before anything is written; returns
  /// what the step does with G under the non-finite policy.
  template <Layout L>
  detail::GradAction check(detail::Strided<const T> w, detail::Strided<const T> g, const State& state,
                           const ParamStep<T>& k) const {
    detail::HostEngine e;
    return Driver::check_step(e, options_, state, w, g, L, L, k.lr, k.weight_decay, k.non_finite, k.finite,
                              Defaults::name);
  }

  /// One step of W with G (views laid out as L, contiguous where `Contiguous`; param: W's data in a report).
  template <Layout L, bool Contiguous>
  void step_views(detail::Strided<T> w, detail::Strided<const T> g, State& state, const T* param,
                  detail::Callback write_back = {}) {
    validate(options_, Defaults::name);
    const ParamStep<T> k = own_settings();
    const detail::GradAction action = check<L>(w, g, state, k);
    reserve_precondition(workspace_, w.rows, w.cols);  // no-op unless another optimizer made state
    reserve_block_workspaces(w.rows, w.cols, detail::available_threads());  // likewise
    run<L, Contiguous>(w, g, action, state, workspace_, k, param, write_back);
  }

  /// A checked step (core/detail/driver.hpp: skipped, taken on G with its non-finite entries zeroed, or taken, and
  /// reported when due), on workspace ws; write_back() after the step (on_views).
  template <Layout L, bool Contiguous>
  void run(detail::Strided<T> w, detail::Strided<const T> g, detail::GradAction action, State& state, Workspace& ws,
           const ParamStep<T>& k, const T* param, detail::Callback write_back = {}) {
    std::optional<detail::SerialEngineScope> serial;
    if (serial_products(w.rows, w.cols)) serial.emplace();
    detail::HostEngine e;
    driver_.run(e, options_, L, w, g, state.momentum.data(), action, state, k.lr, param,
                [&](detail::Strided<const T> gs) {
                  apply<L, Contiguous>(w, gs, state, ws, k);
                  write_back();
                });
  }

  /// The step itself, on checked views laid out as L, with workspace ws: the fused one-pass step where it applies,
  /// else the engine form's step or the host form's.
  template <Layout L, bool Contiguous>
  void apply(detail::Strided<T> w, detail::Strided<const T> g, State& state, Workspace& ws, const ParamStep<T>& k) {
    const Index m = w.rows, n = w.cols;
    if (m * n == 0) return;
    T* const v = state.momentum.data();
    [[maybe_unused]] detail::HostEngine e;  // the fused and engine steps' (not a host form's)
    if constexpr (Driver::fused) {  // one pass over memory (fused_normalize.hpp) on views laid out as L (on_views)
      Driver::fused_step(e, ws, options_, w, g, detail::strided(v, m, n, L), k.lr, k.weight_decay, m, n);
    } else if constexpr (engine_form) {
      Driver::engine_step(e, ws, options_, state, L, w, g, detail::strided(v, m, n, L), k.lr, k.weight_decay,
                          [&](Index count, auto&& block) { each_block(m, ws, count, block); });
    } else if constexpr (Contiguous) {  // the host form, on Eigen maps: aligned ones where the memory is (a Matrix's)
      if (aligned(w.data) && aligned(g.data) && aligned(v))
        host_form<L, Eigen::AlignedMax, Eigen::Stride<0, 0>>(w, g, state, ws, k);
      else
        host_form<L, Eigen::Unaligned, Eigen::Stride<0, 0>>(w, g, state, ws, k);
    } else {
      host_form<L, Eigen::Unaligned, Eigen::OuterStride<>>(w, g, state, ws, k);
    }
  }
  /// The host form's step on Eigen maps of the views (their alignment A, their stride type): the preconditioner's
  /// lazy expressions spare a pass over U. Eigen vectorizes the loops over aligned maps markedly better (1.4x at
  /// 256^2 with TrustRatio; bench/results/2026-12-05-driver-ab.txt).
  template <Layout L, int A, class Stride>
  void host_form(detail::Strided<T> w, detail::Strided<const T> g, State& state, Workspace& ws, const ParamStep<T>& k) {
    const Index m = w.rows, n = w.cols;
    const auto c = MomentumPolicy::coefficients(options_.momentum, options_.nesterov);
    Eigen::Map<detail::DynamicMatrix<T, L>, A, Stride> wm(w.data, m, n, stride<Stride, L>(w));
    const Eigen::Map<const detail::DynamicMatrix<T, L>, A, Stride> gm(g.data, m, n, stride<Stride, L>(g));
    Eigen::Map<detail::DynamicMatrix<T, L>, A> vm(state.momentum.data(), MomentumPolicy::has_buffer ? m : 0,
                                                  MomentumPolicy::has_buffer ? n : 0);
    auto update = [&](const auto& d) {
      detail::HostEngine engine;
      Scaling::update(engine, wm, d, gm, state.scaling, options_.scaling, k.lr, k.weight_decay);
    };
    auto precondition = [&](const auto& u) {
      if constexpr (detail::reads_gradient_v<Preconditioner>)
        Preconditioner::template apply<T>(u, gm, options_.precondition, ws, state.precondition, update);
      else if constexpr (detail::has_policy_state_v<Preconditioner, T>)
        Preconditioner::template apply<T>(u, options_.precondition, ws, state.precondition, update);
      else
        Preconditioner::template apply<T>(u, options_.precondition, ws, update);
    };
    if constexpr (MomentumPolicy::has_buffer) {
      precondition(c.u_g * gm + c.u_v * vm);
      vm = c.v_v * vm + c.v_g * gm;
    } else {
      precondition(gm);
    }
  }
  /// Whether p is aligned as Eigen's own allocations are (EIGEN_MAX_ALIGN_BYTES).
  static bool aligned(const T* p) {
    if constexpr (EIGEN_MAX_ALIGN_BYTES == 0) return true;  // AlignedMax is Unaligned then
    else return reinterpret_cast<std::uintptr_t>(p) % std::uintptr_t(EIGEN_MAX_ALIGN_BYTES) == 0;
  }
  /// The Eigen stride of a view laid out as L (its outer stride, at least the inner size).
  template <class Stride, Layout L, class X>
  static Stride stride(const detail::Strided<X>& x) {
    if constexpr (std::is_same_v<Stride, Eigen::Stride<0, 0>>) return Stride();
    else if constexpr (L == Layout::RowMajor) return Stride(std::max(x.rs, x.cols));
    else return Stride(std::max(x.cs, x.rows));
  }

  /// f(W, G, param, write_back) on views of host memory laid out as W: W and G themselves where they are such views
  /// (direct access, unit inner stride, lines apart by at least their length, G in W's storage order), else copies in
  /// buffers of this optimizer, grown the first time a larger one comes; write_back() (after the step, before a
  /// report) then copies W's back. param: W's data where it has one (a report's StepReport::param), else null.
  template <class WMat, class GMat, class F>
  void on_views(WMat& w, const GMat& g, F&& f) {
    constexpr Layout layout = detail::layout_of_v<detail::remove_cvref_t<WMat>>;
    using Map = Eigen::Map<detail::DynamicMatrix<T, layout>>;
    const auto with_g = [&](detail::Strided<T> wv, const T* param, detail::Callback write_back) {
      if (viewable(g) && detail::same_layout(detail::layout_of_v<GMat>, layout, g.rows(), g.cols())) {
        const detail::Strided<const T> gv = view_of(g);
        // A single row or column is in either storage order, but its entries must lie next to each other along W's.
        if (layout == Layout::RowMajor ? gv.cols <= 1 || gv.cs == 1 : gv.rows <= 1 || gv.rs == 1)
          return f(wv, gv, param, write_back);
      }
      copy_g_.reserve(g.size());  // an expression computed on the fly, or G in the other storage order
      Map(copy_g_.data(), g.rows(), g.cols()) = g;
      f(wv, detail::Strided<const T>(detail::strided(copy_g_.data(), g.rows(), g.cols(), layout)), param, write_back);
    };
    if (viewable(w)) return with_g(view_of(w), data_of(w), {});
    copy_w_.reserve(w.size());  // an IndexedView, a Reverse, an inner stride
    Map copy(copy_w_.data(), w.rows(), w.cols());
    copy = w;
    auto write_back = [&] { w = copy; };
    with_g(view_of(copy), data_of(w), detail::Callback(write_back));
  }
  /// x's data where it has direct access, else null.
  template <class X>
  static const T* data_of(X& x) {
    if constexpr (bool(X::Flags & Eigen::DirectAccessBit) && std::is_same_v<typename X::Scalar, T>) return x.data();
    else return nullptr;
  }
  template <class X>
  static bool viewable(const X& x) {
    if constexpr (bool(X::Flags & Eigen::DirectAccessBit) && std::is_same_v<typename X::Scalar, T>)
      return x.innerStride() == 1 && (x.outerStride() >= x.innerSize() || x.outerSize() <= 1);
    else
      return false;
  }
  /// x (viewable) as a Strided view.
  template <class X>
  static auto view_of(X& x) {
    if constexpr (bool(X::Flags & Eigen::DirectAccessBit) && std::is_same_v<typename X::Scalar, T>) {
      using V = detail::Strided<std::remove_pointer_t<decltype(x.data())>>;
      if constexpr (bool(X::Flags & Eigen::RowMajorBit))
        return V{x.data(), x.rows(), x.cols(), x.outerStride(), 1};
      else
        return V{x.data(), x.rows(), x.cols(), 1, x.outerStride()};
    } else {
      return detail::Strided<T>{};  // not reached (viewable)
    }
  }
  /// block(i, workspace) for i in [0, count), the row blocks of an m-row W: each on one thread with its own
  /// workspace (the products held to that thread), in parallel when threads are offered (parallel_blocks).
  template <class Block>
  void each_block(Index m, Workspace& ws, Index count, Block& block) {
    if (parallel_blocks(m)) {
      [[maybe_unused]] const detail::SerialEngineScope serial;
      // Outside a parallel region with threads to offer (else serially, on ws: inside the batched step's region
      // ws is already this thread's).
      if (detail::available_threads() > 1 &&
          thread_workspaces_.size() + 1 >= std::size_t(detail::available_threads())) {
        detail::parallel_for(count, [&](Index i) {
          const int t = detail::thread_index();
          block(i, t == 0 ? ws : thread_workspaces_[std::size_t(t - 1)]);
        });
        return;
      }
      for (Index i = 0; i < count; ++i) block(i, ws);
      return;
    }
    for (Index i = 0; i < count; ++i) block(i, ws);
  }

  Options options_;
  Workspace workspace_;
  std::vector<Workspace> thread_workspaces_;  ///< batched step: workspaces of threads 1, 2, ...
  Driver driver_;                              ///< the gate, reports and counters around each step
  detail::Buffer<T> copy_w_, copy_g_;          ///< W and G where they are no views laid out as W (on_views)
  struct Pending {
    detail::GradAction action = detail::GradAction::Apply;
    bool parallel = false;
  };
  std::vector<Pending> pending_;               ///< batched step: each parameter's action
  std::vector<const State*> sorted_states_;    ///< batched step: its states, sorted (require_distinct_states)
  std::size_t states_made_ = 0;
};

template <class T, class P, class M, class S, class D>
typename Optimizer<T, P, M, S, D>::State Optimizer<T, P, M, S, D>::make_state(Index rows, Index cols, Layout layout) {
  State s;
  s.rows = rows;
  s.cols = cols;
  s.layout = layout;
  if constexpr (M::has_buffer) s.momentum.setZero(rows * cols);
  detail::init_policy_state<P>(s.precondition, options_.precondition, rows, cols);
  detail::init_policy_state<S>(s.scaling, rows, cols);
  reserve_workspaces(rows, cols, detail::available_threads());
  pending_.reserve(++states_made_);  // the batched step's per-parameter actions and sorted states
  sorted_states_.reserve(states_made_);
  return s;
}

template <class T, class P, class M, class S, class D>
template <Layout L>
void Optimizer<T, P, M, S, D>::step_map(detail::StepMap<T, L> w, detail::StepMap<const T, L> g, State& state) {
  step_views<L, true>(view_of(w), view_of(g), state, w.data());
}

template <class T, class P, class M, class S, class D>
template <class StateAt>
void Optimizer<T, P, M, S, D>::step_batch(const std::vector<MatrixView<T>>& params,
                                          const std::vector<MatrixView<const T>>& grads, StateAt&& state_at,
                                          std::size_t state_count, const std::vector<ParamStep<T>>* settings) {
  constexpr const char* where = D::name;
  if (grads.size() != params.size() || state_count != params.size())
    detail::fail(where, "batched step got ", params.size(), " parameters, ", grads.size(), " gradients and ",
                 state_count, " states");
  validate(options_, where);
  const ParamStep<T> own = own_settings();
  auto settings_of = [&](std::size_t i) -> const ParamStep<T>& { return settings ? (*settings)[i] : own; };
  pending_.assign(params.size(), Pending{});
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (grads[i].layout != params[i].layout && !detail::same_layout(grads[i].layout, params[i].layout,
                                                                     params[i].rows, params[i].cols))
      detail::fail(where, "parameter ", i, ": G is ", detail::layout_name(grads[i].layout), " but W is ",
                   detail::layout_name(params[i].layout));
    if (settings) {
      detail::require_positive(where, "lr", settings_of(i).lr);
      detail::require_nonnegative(where, "weight_decay", settings_of(i).weight_decay);
    }
    detail::with_step_maps(params[i], grads[i], [&](auto& w, const auto& g) {
      constexpr Layout layout = detail::layout_of_v<detail::remove_cvref_t<decltype(w)>>;
      pending_[i].action = check<layout>(view_of(w), view_of(g), state_at(i), settings_of(i));
    });
  }
  const int threads = detail::available_threads();
  for (std::size_t i = 0; i < params.size(); ++i) reserve_workspaces(params[i].rows, params[i].cols, threads);
  auto one = [&](std::size_t i, Workspace& ws) {
    detail::with_step_maps(params[i], grads[i], [&](auto& w, const auto& g) {
      constexpr Layout layout = detail::layout_of_v<detail::remove_cvref_t<decltype(w)>>;
      run<layout, true>(view_of(w), view_of(g), pending_[i].action, state_at(i), ws, settings_of(i), w.data());
    });
  };
  // Parallel: small parameters with a plain step. The rest (large, zeroed or reporting) one by one.
  // Decided before anything steps (a step advances the state's count, which telemetry reads).
  for (std::size_t i = 0; i < params.size(); ++i)
    pending_[i].parallel = small(params[i].rows, params[i].cols) && pending_[i].action != detail::GradAction::Zero &&
                           !driver_.telemetry.due(state_at(i).steps + 1);
  {
    [[maybe_unused]] const detail::SerialEngineScope serial;
    detail::parallel_for(Index(params.size()), [&](Index i) {
      if (!pending_[std::size_t(i)].parallel) return;
      const int t = detail::thread_index();
      one(std::size_t(i), t == 0 ? workspace_ : thread_workspaces_[std::size_t(t - 1)]);
    });
  }
  for (std::size_t i = 0; i < params.size(); ++i)
    if (!pending_[i].parallel) one(i, workspace_);
}

}  // namespace matopt

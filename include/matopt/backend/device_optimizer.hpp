// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// DeviceOptimizer: any host optimizer (a preset or a composition) stepping matrices in device memory.
// DeviceOptimizer<HostOptimizer, Engine>: a matopt::Optimizer (a preset or a user composition) stepping
// matrices in device memory. The step is Optimizer's (core/optimizer.hpp), stage for stage:
//   U = u_g G + u_v V;  D = Preconditioner(U);  W = Scaling(W, D, G);  V = v_v V + v_g G
// with the policies' own scalar rules (MomentumPolicy::coefficients, the NS schedule and
// precondition/detail/ns_algorithm.hpp), the scalings' own update and the matrix work done by `Engine`: ThrustEngine
// (backend/thrust.hpp) or the CUDA engine (backend/cuda/engine.cuh). Options, defaults and validation are
// the host optimizer's; bad input throws std::invalid_argument before anything is written, as on the host.
//
// Each preconditioner runs its own engine form (reserve_on / apply_on, in its own file: core/detail/engine_form.hpp):
// Orthogonalize (Newton–Schulz on the engine; ExactPolar's SVD on a host copy of U), AutoSteps, RowNormalize,
// ColNormalize, Identity, Sign, OnEngine<Policy>, Adaptive, NuclearScaled, SecondMoment (NorMuon, AdaMuon, NAMO,
// one's own moment) and DionPowerIteration; one without an engine form is a compile-time error that says what to
// declare. Every scaling (Static, TrustRatio, SpectralCap, a user's) runs its own update(e, ...) with PolicyEngine's
// operations, and so does every second moment. Row blocks (heads, split_sizes, split_groups): each block is formed,
// preconditioned and updated as a parameter of its own shape (as Optimizer::apply_blocks); a block of split_groups
// runs is formed run by run into the workspace. SpectralCap's u and v live in the host State: each step uploads v
// (n elements) and downloads u, v (m + n) after the power iteration.
// Device memory: the momentum buffer per state; one workspace per optimizer, grown by make_state, so step
// allocates nothing on the device (Thrust's reductions may use a temporary buffer; the CUDA engine's do not).
// The policies' states (SpectralCap's, Adaptive's, TrustRatio's) are their host State types, in host memory.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/fill.h>

#include "matopt/backend/device_matrix.hpp"
#include "matopt/core/detail/engine_form.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/norms.hpp"
#include "matopt/core/detail/strided.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/core/optimizer.hpp"
#include "matopt/core/step_policy.hpp"
#include "matopt/diagnostics/diagonal_dominance.hpp"
#include "matopt/precondition/adaptive.hpp"
#include "matopt/precondition/auto_steps.hpp"
#include "matopt/precondition/col_normalize.hpp"
#include "matopt/precondition/detail/fused_normalize.hpp"
#include "matopt/precondition/detail/engine_workspace.hpp"
#include "matopt/precondition/detail/ns_algorithm.hpp"
#include "matopt/precondition/dion.hpp"
#include "matopt/precondition/elementwise.hpp"
#include "matopt/precondition/exact_polar.hpp"
#include "matopt/precondition/newton_schulz.hpp"
#include "matopt/precondition/nuclear_scaled.hpp"
#include "matopt/precondition/on_engine.hpp"
#include "matopt/precondition/orthogonalize.hpp"
#include "matopt/precondition/row_blocks.hpp"
#include "matopt/precondition/row_normalize.hpp"
#include "matopt/precondition/second_moment.hpp"
#include "matopt/scaling/spectral_cap.hpp"
#include "matopt/scaling/static.hpp"
#include "matopt/scaling/trust_ratio.hpp"

namespace matopt {
namespace detail {

template <class T>
Strided<T> strided(DeviceMatrixView<T> v) {
  return strided(v.data, v.rows, v.cols, v.layout);
}
template <class T>
T* raw(thrust::device_vector<T>& v) {
  return thrust::raw_pointer_cast(v.data());
}
/// Grows a device buffer (never shrinks): only make_state calls this.
template <class T>
void grow(thrust::device_vector<T>& v, Index size) {
  if (Index(v.size()) < size) v.resize(std::size_t(size));
}

/// Device memory as an engine workspace's store (precondition/detail/engine_workspace.hpp).
struct DeviceStore {
  static constexpr bool host_memory = false;
  template <class T>
  using vector = thrust::device_vector<T>;
  template <class T>
  static T* ptr(thrust::device_vector<T>& v) {
    return raw(v);
  }
  template <class T>
  static void grow(thrust::device_vector<T>& v, Index size) {
    detail::grow(v, size);
  }
  template <class T>
  static std::size_t size(const thrust::device_vector<T>& v) {
    return v.size();
  }
};
/// The device workspace of one optimizer (sized by the largest parameter it has made state for); its bytes() are
/// the device buffers'.
template <class T>
using DeviceWorkspace = EngineWorkspace<T, DeviceStore>;

/// Refuses ns_dtype = bfloat16 wherever a device optimizer's options hold one (the preconditioner's, or one it
/// wraps), before the host optimizer's checks, whose bfloat16 rule is the host engine's (oneDNN).
struct DeviceDtypeCheck {
  const char* where;
  template <class F, class C>
  void operator()(std::string_view, const F& field, const C&, const char*) const {
    if constexpr (std::is_same_v<F, NsDtype>) check_ns_dtype(field, where);
  }
  template <class R>
  void rule(R&&) const {}
};

/// The Newton-Schulz method of a preconditioner that is one (Orthogonalize<NewtonSchulz<...>>, or SecondMoment
/// of it); void otherwise.
template <class P>
struct ns_method {
  using type = void;
};
template <class Schedule, NsVariant V>
struct ns_method<Orthogonalize<NewtonSchulz<Schedule, V>>> {
  using type = NewtonSchulz<Schedule, V>;
};
template <class Inner, class Moment>
struct ns_method<SecondMoment<Inner, Moment>> : ns_method<Inner> {};
template <class P>
using ns_method_t = typename ns_method<P>::type;

}  // namespace detail

/// One parameter's report from a device step: StepReport's fields, with U in device memory.
template <class T>
struct DeviceStepReport {
  const T* param = nullptr;  ///< W's device data: identifies the parameter
  /// W's shape.
  /// @{
  Index rows = 0, cols = 0;
  /// @}
  std::int64_t step = 0;  ///< the parameter's step count, this step included
  /// U = u_g G + u_v V in W's layout, in device memory: what diagonal_dominance(engine, view) and
  /// singular_value_quantiles(engine, view) (device_diagnostics.hpp) examine. Valid during the callback only.
  DeviceMatrixView<const T> direction{};
  double update_rms = 0;    ///< ||W_after - W_before||_F / sqrt(mn)
  double effective_lr = 0;  ///< as effective_lr(state) after this step
};

/// A matopt::Optimizer (a preset or a user composition) stepping matrices in device memory: the host optimizer's
/// step, stage for stage, with its options, defaults, validation and scalar rules, and the matrix work done by
/// `Engine` (ThrustEngine, or cuda::Engine: cuda::Optimizer). Bad input throws std::invalid_argument before anything
/// is written, as on the host. Supported policies: momentum Ema, Sum, NoMomentum; Orthogonalize (NewtonSchulz,
/// ExactPolar on the host), RowNormalize, ColNormalize, Identity, Sign, Adaptive, NuclearScaled and SecondMoment of
/// those, DionPowerIteration, row blocks (others fail to compile); every scaling, through its own update with the
/// device engine's operations. Checkpoints are interchangeable with the host optimizer's.
/// @tparam HostOptimizer an Optimizer (e.g. Muon<float>).
/// @tparam Engine ThrustEngine or cuda::Engine.
template <class HostOptimizer, class Engine>
class DeviceOptimizer {
 public:
  /// The host optimizer type.
  using Host = HostOptimizer;
  /// The scalar type.
  using Scalar = typename Host::Scalar;
  /// The scalar type.
  using T = Scalar;
  /// The host optimizer's options.
  using Options = typename Host::Options;
  /// The preconditioner policy.
  using PreconditionerType = typename Host::PreconditionerType;
  /// The momentum policy.
  using MomentumType = typename Host::MomentumType;
  /// The scaling policy.
  using ScalingType = typename Host::ScalingType;
  /// The engine type.
  using EngineType = Engine;

  /// Per-parameter state: the momentum buffer (device memory, in W's storage order) and the policies' states
  /// (the host optimizer's State types, in host memory).
  struct State : StateCounters {
    /// The momentum buffer V in device memory, in W's storage order (empty without a buffer).
    thrust::device_vector<T> momentum;
    /// The preconditioner's state where it lives in device memory, its fields one after another (AdaMuon's S in
    /// W's storage order; Dion's M in W's storage order, then Q); else empty. Those host fields are empty.
    thrust::device_vector<T> moment;
    /// The sizes of those fields, set by make_state.
    std::vector<Index> moment_sizes;
    /// The preconditioner's state (the host type, in host memory).
    detail::policy_state_t<PreconditionerType, T> precondition{};
    /// The scaling policy's state (the host type, in host memory).
    typename ScalingType::template State<T> scaling{};
    /// Device bytes (the momentum buffer and a device-resident preconditioner state).
    std::size_t bytes() const { return (momentum.size() + moment.size()) * sizeof(T); }

    /// Checkpoints (serialization/checkpoint.hpp): the host State's fields, in its order and format, with the
    /// momentum copied through host memory. So a file saved from the device loads into the host optimizer for
    /// a W of the same shape and layout, and the other way round.
    template <class Writer>
    void write(Writer& w) const {
      Eigen::Matrix<T, Eigen::Dynamic, 1> m(Index(momentum.size()));
      detail::device_synchronize();  // after the steps queued on the engine's stream
      detail::copy_n(momentum.begin(), momentum.size(), m.data());
      auto pre = host_precondition();
      detail::optimizer_state_fields(const_cast<State&>(*this), m, pre,
                                     [&](const char* name, auto& v) { w.field(name, v); });
    }
    /// Restores in place (the checkpoint loader reads into a copy, so a failure leaves the live state alone).
    template <class Reader>
    void read(Reader& r) {
      Eigen::Matrix<T, Eigen::Dynamic, 1> m(Index(momentum.size()));
      auto pre = precondition;
      each_device_field(pre, [](auto&, Index) {});  // sized for the reader's checks
      detail::optimizer_state_fields(*this, m, pre, [&](const char* name, auto& v) { r.field(name, v); });
      detail::device_synchronize();  // no step queued on the engine's stream still reads the old momentum
      detail::copy_n(m.data(), m.size(), momentum.begin());
      each_device_field(pre, [&](auto& host, Index at) {
        detail::copy_n(host.data(), host.size(), moment.begin() + at);
        host.resize(0);
      });
      precondition = std::move(pre);
    }
    /// The preconditioner's state as the host optimizer's State holds it: a copy of `precondition` with the
    /// device-resident fields copied in (after the steps queued on the engine's stream).
    detail::policy_state_t<PreconditionerType, T> host_precondition() const {
      auto pre = precondition;
      detail::device_synchronize();
      each_device_field(pre, [&](auto& host, Index at) {
        detail::copy_n(moment.begin() + at, host.size(), host.data());
      });
      return pre;
    }
    /// f(host field, offset in moment) for each device-resident field of pre, the field sized as in moment.
    template <class F>
    void each_device_field(detail::policy_state_t<PreconditionerType, T>& pre, F&& f) const {
      if constexpr (device_state) {
        Index at = 0;
        std::size_t k = 0;
        PreconditionerType::template engine_fields<T>(pre, [&](auto& host) {
          const Index size = k < moment_sizes.size() ? moment_sizes[k] : 0;  // none in a State not from make_state
          ++k;
          host.resize(size);
          f(host, at);
          at += size;
        });
      }
    }
  };

  /// An optimizer with the default options and a default-constructed engine.
  DeviceOptimizer() : DeviceOptimizer(Options{}) {}
  /// An optimizer with these options and engine; throws std::invalid_argument naming the first bad option.
  explicit DeviceOptimizer(const Options& options, Engine engine = Engine{})
      : options_(options), engine_(std::move(engine)) {
    validate(name());
  }

  /// The host optimizer's name, such as "matopt::Muon".
  static constexpr const char* name() { return Host::name(); }
  /// The host optimizer's identity: checkpoints move between the host and device optimizers.
  static std::string identity() { return Host::identity(); }
  /// The options; mutable between steps, checked at each step.
  Options& options() { return options_; }
  /// The options (read-only).
  const Options& options() const { return options_; }
  /// The engine, through which a CUDA engine's stream is reached.
  Engine& engine() { return engine_; }

  /// The state for parameter w; grows the shared device workspace to fit w's shape.
  State make_state(DeviceMatrixView<const T> w) {
    detail::check_device_view<T>(Host::name(), w, "W");
    check_device_rules(Host::name());
    // Growing the workspace frees buffers that steps queued on the engine's stream may still use, and the zero
    // fill below runs on Thrust's stream: both after the work queued so far (device_matrix.hpp).
    detail::device_synchronize();
    State s;
    s.rows = w.rows;
    s.cols = w.cols;
    s.layout = w.layout;
    if constexpr (MomentumType::has_buffer) s.momentum.assign(std::size_t(w.size()), T(0));
    detail::init_policy_state<PreconditionerType>(s.precondition, options_.precondition, w.rows, w.cols);
    if constexpr (device_state) {  // the fields' initial values moved to device memory
      Index size = 0;
      PreconditionerType::template engine_fields<T>(s.precondition, [&](auto& host) {
        s.moment_sizes.push_back(host.size());
        size += host.size();
      });
      s.moment.resize(std::size_t(size));
      s.each_device_field(s.precondition, [&](auto& host, Index at) {
        detail::copy_n(host.data(), host.size(), s.moment.begin() + at);
        host.resize(0);
      });
    }
    detail::init_policy_state<ScalingType>(s.scaling, w.rows, w.cols);
    reserve(w.rows, w.cols);
    return s;
  }
  /// The state for a DeviceMatrix W.
  State make_state(const DeviceMatrix<T>& w) { return make_state(w.view()); }

  /// One step in place, on device memory. Throws std::invalid_argument (W and state unchanged) on bad
  /// hyperparameters, a shape or layout mismatch, or (NonFinite::Throw) a non-finite gradient.
  void step(DeviceMatrixView<T> w, DeviceMatrixView<const T> g, State& state) {
    constexpr const char* where = Host::name();
    validate(where);
    detail::check_device_step<T>(where, w, g, state);
    detail::check_row_blocks<PreconditionerType, ScalingType, T>(options_.precondition, w.rows, w.cols, where);
    check_policy_state(state, w.rows, w.cols, where);
    detail::check_step_coefficients<ScalingType>(options_.scaling, options_.lr, options_.weight_decay,
                                                 options_.precondition, w.rows, w.cols);
    reserve(w.rows, w.cols);  // no-op unless the options changed since make_state
    detail::Strided<const T> gs = detail::strided(g.data, g.rows, g.cols, w.layout);
    switch (detail::gradient_action(engine_.all_finite(gs), options_.non_finite, where, g.rows, g.cols)) {
      case detail::GradAction::Apply: break;
      case detail::GradAction::Skip: ++state.skipped; return;
      case detail::GradAction::Zero: {
        detail::grow(ws_.clean, w.size());
        const detail::Strided<T> clean = detail::strided(detail::raw(ws_.clean), w.rows, w.cols, w.layout);
        engine_.clean(clean, gs);
        gs = clean;
        ++state.zeroed;
      }
    }
    if (telemetry_.due(state.steps + 1)) {
      report(w, gs, state);
    } else {
      apply(detail::strided(w), gs, state);
      ++state.steps;
    }
  }
  /// One step of DeviceMatrix W with gradient G.
  void step(DeviceMatrix<T>& w, const DeviceMatrix<T>& g, State& state) { step(w.view(), g.view(), state); }

  /// lr * s(m, n) (Static) or lr * r * s with the last trust ratio (TrustRatio), as on the host (row blocks: the
  /// first block's shape).
  T effective_lr(const State& s) const {
    const Index rows = detail::reported_rows<PreconditionerType>(options_.precondition, s.rows);
    return ScalingType::effective_lr(options_.scaling, s.scaling, options_.lr, rows, s.cols);
  }
  /// Device bytes of the shared workspace (and of the telemetry copies, once a report has needed them).
  std::size_t workspace_bytes() const { return ws_.bytes() + (report_w_.size() + report_u_.size()) * sizeof(T); }

  /// Reports every K-th step of each parameter, as Optimizer::set_telemetry, with U in device memory. A
  /// reporting step copies W and forms U in two m n device buffers (allocated the first time a report needs a
  /// larger shape) and takes one more pass for update_rms; reporting does not change the numbers.
  void set_telemetry(Telemetry<T, DeviceStepReport<T>> t) { telemetry_ = std::move(t); }
  /// The telemetry settings.
  const Telemetry<T, DeviceStepReport<T>>& telemetry() const { return telemetry_; }

 private:
  using Workspace = detail::DeviceWorkspace<T>;
  static_assert(detail::has_engine_form_v<PreconditionerType, Workspace>,
                "matopt::DeviceOptimizer: the preconditioner has no engine form: it declares `template <class WS> "
                "static void reserve_on(WS&, const Options&, Index m, Index n)` and `apply_on(e, ws, options, [state,] "
                "m, n, layout, form_u)` (core/detail/engine_form.hpp), or is written as OnEngine<Policy>");
  static constexpr bool device_state = detail::engine_state_v<PreconditionerType>;
  /// Preconditioners that read the raw gradient (SecondMoment: NAMO's ||G||_F) and keep a moment.
  static constexpr bool second_moment = detail::reads_gradient_v<PreconditionerType>;
  /// The scaling's engine operations.
  using Scaling = detail::PolicyEngine<T, Engine, Workspace, ScalingType>;
  /// Per-head / split row blocks (row_blocks.hpp), taken with a scaling that keeps no state (check_row_blocks).
  static constexpr bool splits_rows =
      detail::splits_rows_v<PreconditionerType> && std::is_empty_v<typename ScalingType::template State<T>>;
  /// Blocks of one shape orthogonalized together: an engine with batched Newton-Schulz and a Newton-Schulz
  /// preconditioner (Orthogonalize, or SecondMoment of it).
  static constexpr bool batched_blocks = splits_rows && Engine::has_batched_ns &&
                                         !std::is_void_v<detail::ns_method_t<PreconditionerType>>;

  /// Row/ColNormalize with Static scaling: one pass per normalized vector (fused_normalize.hpp's step).
  static constexpr bool fused =
      MomentumType::has_buffer && detail::has_fused_step_v<ScalingType> &&
      detail::is_normalize_lines_v<PreconditionerType>;

  /// The device's own rule on the options (DeviceDtypeCheck), before anything is allocated or written.
  void check_device_rules(const char* where) const {
    detail::DeviceDtypeCheck dtype{where};
    Host::describe(options_, dtype);
  }
  /// The host optimizer's checks of the options, after the device's own rule.
  void validate(const char* where) const {
    check_device_rules(where);
    Host::validate(options_, where);
  }

  /// The preconditioner's state must fit these options (SecondMoment: S sized for the row blocks of make_state).
  void check_policy_state(const State& state, Index m, Index n, const char* where) const {
    using S = detail::policy_state_t<PreconditionerType, T>;
    if constexpr (device_state)
      PreconditionerType::template check_engine_state<T>(state.precondition, Index(state.moment.size()),
                                                         options_.precondition, m, n, where);
    else if constexpr (detail::has_check_state_v<PreconditionerType, S, typename PreconditionerType::Options>)
      PreconditionerType::check_state(state.precondition, options_.precondition, m, n, where);
  }

  void reserve(Index m, Index n) {
    PreconditionerType::reserve_on(ws_, options_.precondition, m, n);
    if constexpr (splits_rows) {
      const RowBlocks& b = options_.precondition;
      if (b.blocked() && b.fits(m)) {
        b.for_each(m, [&](const RowSet& r) {
          PreconditionerType::reserve_on(ws_, options_.precondition, r.size(), n);
          // The engine's row scratch is not monotone in the rows (cuda::Engine::reserve): each block's shape too.
          engine_.reserve(r.size(), n);
        });
        ws_.host_norms.reserve(b.split_groups);  // >= 1
        if constexpr (!detail::has_fused_step_v<ScalingType>)
          if (b.split_groups > 1) {  // update_block gathers a block's runs
            detail::grow(ws_.block_w, m * n);
            detail::grow(ws_.block_g, m * n);
          }
      }
      if constexpr (batched_blocks)
        if (equal_blocks(m)) engine_.template reserve_batched<T>(b.count(), b.block(m, 0).size(), n);
    }
    if constexpr (detail::tracks_singular_vectors_v<ScalingType>) detail::grow(ws_.vectors, m + n);
    engine_.reserve(m, n);  // the engine's own scratch (the CUDA engine's bf16 operands, reduction results)
    if (options_.non_finite == NonFinite::Zero) detail::grow(ws_.clean, m * n);
  }

  /// apply() with a report (Optimizer::report's order): copies W and forms U first, then steps, then calls the
  /// telemetry callback.
  void report(DeviceMatrixView<T> wv, detail::Strided<const T> g, State& state) {
    const Index m = wv.rows, n = wv.cols;
    const detail::Strided<T> w = detail::strided(wv);
    detail::grow(report_w_, m * n);
    detail::grow(report_u_, m * n);
    const detail::Strided<T> before = detail::strided(detail::raw(report_w_), m, n, wv.layout);
    const detail::Strided<T> u = detail::strided(detail::raw(report_u_), m, n, wv.layout);
    if (m * n != 0) {
      engine_.copy(detail::Strided<const T>(w), before);
      if constexpr (MomentumType::has_buffer) {
        const auto c = MomentumType::coefficients(options_.momentum, options_.nesterov);
        engine_.combine(u, c.u_g, g, c.u_v,
                        detail::Strided<const T>(detail::strided(detail::raw(state.momentum), m, n, wv.layout)));
      } else {
        engine_.copy(g, u);
      }
    }
    apply(w, g, state);
    ++state.steps;
    DeviceStepReport<T> r;
    r.param = wv.data;
    r.rows = m;
    r.cols = n;
    r.step = state.steps;
    r.direction = DeviceMatrixView<const T>{u.data, m, n, wv.layout};
    if (m * n != 0) {
      engine_.combine(before, T(1), detail::Strided<const T>(w), T(-1), detail::Strided<const T>(before));
      r.update_rms = double(engine_.norm(detail::Strided<const T>(before))) / std::sqrt(double(m) * double(n));
    }
    r.effective_lr = double(effective_lr(state));
    telemetry_.callback(r);
  }

  void apply(detail::Strided<T> w, detail::Strided<const T> g, State& state) {
    const Index m = w.rows, n = w.cols;
    if (m * n == 0) return;
    const auto c = MomentumType::coefficients(options_.momentum, options_.nesterov);
    const T lr = options_.lr, lambda = options_.weight_decay;
    [[maybe_unused]] const detail::Strided<T> v =
        detail::strided(MomentumType::has_buffer ? detail::raw(state.momentum) : nullptr, m, n, state.layout);
    if constexpr (fused) {
      const auto k = ScalingType::coefficients(options_.scaling, lr, lambda, m, n);
      if (!k.cautious) {  // the fused kernels have no masked decay: cautious takes the unfused step below
        const detail::FusedStep<T> f{c, T(options_.precondition.eps), k.keep, k.step};
        if constexpr (!PreconditionerType::columns)
          engine_.fused_normalize_rows(w, g, v, f);
        else
          engine_.fused_normalize_rows(w.t(), detail::Strided<const T>(g.t()), v.t(), f);
        return;
      }
    }
    if constexpr (splits_rows) {
      if (options_.precondition.blocked()) {
        apply_blocks(w, g, v, state);
        return;
      }
    }
    auto form_u = [&](detail::Strided<T> target) {  // U = u_g G + u_v V
      if constexpr (MomentumType::has_buffer)
        engine_.combine(target, c.u_g, g, c.u_v, detail::Strided<const T>(v));
      else
        engine_.copy(g, target);
    };
    const detail::Strided<T> d = precondition(state, 0, m, n, form_u, [&] { return engine_.norm(g); });
    Scaling scaling{engine_, ws_, state.layout};
    ScalingType::update(scaling, w, d, g, state.scaling, options_.scaling, lr, lambda);
    if constexpr (MomentumType::has_buffer)
      engine_.combine(v, c.v_v, detail::Strided<const T>(v), c.v_g, g);  // V <- v_v V + v_g G
  }

  /// D for an m x n parameter or row block whose U form_u writes; `offset`: the block's first entry of S.
  template <class FormU, class GNorm>
  detail::Strided<T> precondition(State& state, Index offset, Index m, Index n, FormU&& form_u, GNorm&& g_norm) {
    using P = PreconditionerType;
    if constexpr (second_moment) {
      return P::apply_on(engine_, ws_, options_.precondition, slot(state, offset), g_norm, m, n, state.layout, form_u);
    } else if constexpr (device_state) {
      std::array<T*, 4> fields{};  // the device-resident fields, one after another in State::moment
      Index at = 0;
      MATOPT_ASSERT(state.moment_sizes.size() <= fields.size());
      for (std::size_t k = 0; k < state.moment_sizes.size(); at += state.moment_sizes[k++])
        fields[k] = detail::raw(state.moment) + at;
      return P::apply_on(engine_, ws_, options_.precondition, state.precondition, fields.data(), m, n, state.layout,
                         form_u);
    } else if constexpr (detail::has_policy_state_v<P, T>) {
      return P::apply_on(engine_, ws_, options_.precondition, state.precondition, m, n, state.layout, form_u);
    } else {
      return P::apply_on(engine_, ws_, options_.precondition, m, n, state.layout, form_u);
    }
  }

  /// apply() for row blocks (Optimizer::apply_blocks): each block (`groups` runs of rows) is formed run by run,
  /// preconditioned on its share of S and updated with the Static coefficients of its own shape; the momentum
  /// is updated once, after. Blocks of one shape on an engine with batched Newton-Schulz (the CUDA engine) are
  /// orthogonalized together (apply_blocks_batched).
  template <class Unused = void>
  void apply_blocks(detail::Strided<T> w, detail::Strided<const T> g, detail::Strided<T> v, State& state) {
    const Index n = w.cols;
    const auto c = MomentumType::coefficients(options_.momentum, options_.nesterov);
    const RowBlocks& blocks = options_.precondition;
    if constexpr (batched_blocks) {
      if (equal_blocks(w.rows)) {
        apply_blocks_batched(w, g, v, state);
        if constexpr (MomentumType::has_buffer)
          engine_.combine(v, c.v_v, detail::Strided<const T>(v), c.v_g, g);  // V <- v_v V + v_g G
        return;
      }
    }
    Index offset = 0;
    for (Index i = 0; i < blocks.count(); ++i) {
      const RowSet b = blocks.block(w.rows, i);
      const detail::Strided<T> d = precondition(state, offset, b.size(), n, block_u(b, g, v), block_g_norm(b, g));
      if constexpr (second_moment) offset += PreconditionerType::block_state_size(b.size(), n);
      update_block(b, w, g, d, state);
    }
    if constexpr (MomentumType::has_buffer)
      engine_.combine(v, c.v_v, detail::Strided<const T>(v), c.v_g, g);  // V <- v_v V + v_g G
  }

  /// Run k of block b (rows [first + k stride, + rows)) of x.
  template <class M>
  static M run_of(const RowSet& b, M x, Index k) {
    return detail::rows_of(x, b.first + k * b.stride, b.rows);
  }
  /// form_u of block b: U's runs written one after another into the block's target.
  auto block_u(const RowSet& b, detail::Strided<const T> g, detail::Strided<T> v) {
    return [this, b, g, v](detail::Strided<T> target) {
      const auto c = MomentumType::coefficients(options_.momentum, options_.nesterov);
      for (Index k = 0; k < b.groups; ++k) {
        const detail::Strided<T> t = detail::rows_of(target, k * b.rows, b.rows);
        if constexpr (MomentumType::has_buffer)
          engine_.combine(t, c.u_g, run_of(b, g, k), c.u_v, detail::Strided<const T>(run_of(b, v, k)));
        else
          engine_.copy(run_of(b, g, k), t);
      }
    };
  }
  /// ||G_b||_F, when a moment asks (NAMO): the norm of the runs' norms (core/detail/norms.hpp's robust_norm).
  auto block_g_norm(const RowSet& b, detail::Strided<const T> g) {
    return [this, b, g] {
      auto norms = ws_.host_norms.vector(b.groups);  // reserved for split_groups runs
      for (Index k = 0; k < b.groups; ++k) norms[k] = engine_.norm(run_of(b, g, k));
      return detail::robust_norm(norms);
    };
  }
  /// W_b <- the scaling's update of block b as a parameter of the block's shape, with D_b (its runs from D's rows, in
  /// order) and G_b. A block of one run is a view of W and G. The runs of a split_groups block take the coefficients
  /// of the block's shape run by run when the update is W <- keep W - step D (has_fused_step: Static), and are
  /// otherwise gathered into the workspace, updated there and written back.
  template <class Unused = void>
  void update_block(const RowSet& b, detail::Strided<T> w, detail::Strided<const T> g, detail::Strided<T> d,
                    State& state) {
    Scaling scaling{engine_, ws_, state.layout};
    const T lr = options_.lr, lambda = options_.weight_decay;
    if (b.groups == 1) {
      detail::Strided<T> wb = detail::rows_of(w, b.first, b.rows);
      ScalingType::update(scaling, wb, d, detail::rows_of(g, b.first, b.rows), state.scaling, options_.scaling, lr,
                          lambda);
    } else if constexpr (detail::has_fused_step_v<ScalingType>) {
      const auto k = ScalingType::coefficients(options_.scaling, lr, lambda, b.size(), w.cols);
      for (Index r = 0; r < b.groups; ++r) {
        const detail::Strided<const T> dr = detail::rows_of(d, r * b.rows, b.rows);
        if (k.cautious)
          scaling.cautious_update(run_of(b, w, r), k.keep, k.step, dr);
        else
          scaling.update(run_of(b, w, r), k.keep, k.step, dr);
      }
    } else {
      detail::Strided<T> wb = detail::strided(detail::raw(ws_.block_w), b.size(), w.cols, state.layout);
      const detail::Strided<T> gb = detail::strided(detail::raw(ws_.block_g), b.size(), w.cols, state.layout);
      for (Index r = 0; r < b.groups; ++r) {
        engine_.copy(detail::Strided<const T>(run_of(b, w, r)), detail::rows_of(wb, r * b.rows, b.rows));
        engine_.copy(run_of(b, g, r), detail::rows_of(gb, r * b.rows, b.rows));
      }
      ScalingType::update(scaling, wb, d, detail::Strided<const T>(gb), state.scaling, options_.scaling, lr, lambda);
      for (Index r = 0; r < b.groups; ++r)
        engine_.copy(detail::Strided<const T>(detail::rows_of(wb, r * b.rows, b.rows)), run_of(b, w, r));
    }
  }

  /// Blocks of one shape (heads, or equal split sizes), two or more.
  bool equal_blocks(Index m) const {
    if constexpr (splits_rows) return static_cast<const RowBlocks&>(options_.precondition).equal_blocks(m);
    return false;
  }

  /// The blocks' Newton-Schulz as one batched run (Engine::ns_batched: each product one strided-batched call for
  /// every block), then each block's moment (SecondMoment) and update, as apply_blocks.
  template <class Unused = void>
  void apply_blocks_batched(detail::Strided<T> w, detail::Strided<const T> g, detail::Strided<T> v, State& state) {
    using Method = detail::ns_method_t<PreconditionerType>;
    const RowBlocks& blocks = options_.precondition;
    const Index count = blocks.count(), mb = blocks.block(w.rows, 0).size(), n = w.cols;
    const bool tall = mb > n;
    const Index r = tall ? n : mb, s = tall ? mb : n;
    const typename Method::Options& ns = options_.precondition;
    const detail::Strided<T> xs = engine_.template ns_batched<T>(
        count, r, s, ns, Method::uses_gram(ns, r, s), [&](Index i, detail::Strided<T> x) {
          const detail::Strided<T> u = tall ? x.t() : x;
          block_u(blocks.block(w.rows, i), g, v)(u);
          if constexpr (second_moment)
            if constexpr (PreconditionerType::sign_input) engine_.sign(u);
        });
    Index offset = 0;
    for (Index i = 0; i < count; ++i) {
      const RowSet b = blocks.block(w.rows, i);
      const detail::Strided<T> x = detail::col_major(xs.data + i * r * s, r, s), d = tall ? x.t() : x;
      if constexpr (second_moment) {
        PreconditionerType::finish_on(engine_, ws_, options_.precondition, d, slot(state, offset), block_g_norm(b, g),
                             state.layout, block_u(b, g, v));
        offset += PreconditionerType::block_state_size(mb, n);
      }
      update_block(b, w, g, d, state);
    }
  }

  /// The SecondMoment's S of a parameter (or block: from entry `offset`), in device memory or the host State.
  T* slot(State& state, Index offset) {
    if constexpr (!second_moment) return nullptr;  // (explicit instantiations compile every member)
    else if constexpr (device_state) return detail::raw(state.moment) + offset;
    else return state.precondition.second_moment.data() + offset;
  }

  Options options_;
  Engine engine_;
  detail::DeviceWorkspace<T> ws_;
  Telemetry<T, DeviceStepReport<T>> telemetry_;
  thrust::device_vector<T> report_w_, report_u_;  ///< telemetry: W before the step, and U
};

}  // namespace matopt

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
// preconditioned and updated as a parameter of its own shape, in the engine step that Optimizer runs too
// (core/detail/engine_step.hpp); a block of split_groups runs is formed run by run into the workspace.
// SpectralCap's u and v live in the host State: each step uploads v (n elements) and downloads u, v (m + n) after the
// power iteration.
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
#include "matopt/core/detail/driver.hpp"
#include "matopt/core/detail/engine_form.hpp"
#include "matopt/core/detail/engine_step.hpp"
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

}  // namespace detail

/// One parameter's report from a device step: StepReport's fields, with W's data and U in device memory (U: what
/// diagonal_dominance(engine, view) and singular_value_quantiles(engine, view) of device_diagnostics.hpp examine).
template <class T>
using DeviceStepReport = StepReport<T, DeviceMatrixView<const T>>;

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
    detail::check_device_view<T>(where, w, "W");
    detail::check_device_view<T>(where, g, "G");
    const detail::Strided<T> wv = detail::strided(w);
    const detail::Strided<const T> gs = detail::strided(g.data, g.rows, g.cols, w.layout);  // G laid out as W, checked
    const detail::GradAction action = Driver::check_step(engine_, options_, state, wv, gs, w.layout, g.layout,
                                                         options_.lr, options_.weight_decay, options_.non_finite, {},
                                                         where);
    reserve(w.rows, w.cols);  // no-op unless the options changed since make_state
    driver_.run(engine_, options_, w.layout, wv, gs, momentum(state), action, state, options_.lr, w.data,
                [&](detail::Strided<const T> gz) { apply(wv, gz, state); });
  }
  /// One step of DeviceMatrix W with gradient G.
  void step(DeviceMatrix<T>& w, const DeviceMatrix<T>& g, State& state) { step(w.view(), g.view(), state); }

  /// lr * s(m, n) (Static) or lr * r * s with the last trust ratio (TrustRatio), as on the host (row blocks: the
  /// first block's shape).
  T effective_lr(const State& s) const { return Driver::effective_lr(options_, s, options_.lr); }
  /// Device bytes of the shared workspace (and of the telemetry copies, once a report has needed them).
  std::size_t workspace_bytes() const { return ws_.bytes() + driver_.bytes(); }

  /// Reports every K-th step of each parameter, as Optimizer::set_telemetry, with U in device memory. A
  /// reporting step copies W and forms U in two m n device buffers (allocated the first time a report needs a
  /// larger shape) and takes one more pass for update_rms; reporting does not change the numbers.
  void set_telemetry(Telemetry<T, DeviceStepReport<T>> t) { driver_.telemetry = std::move(t); }
  /// The telemetry settings.
  const Telemetry<T, DeviceStepReport<T>>& telemetry() const { return driver_.telemetry; }

 private:
  using Workspace = detail::DeviceWorkspace<T>;
  static_assert(detail::has_engine_form_v<PreconditionerType, Workspace>,
                "matopt::DeviceOptimizer: the preconditioner has no engine form: it declares `template <class WS> "
                "static void reserve_on(WS&, const Options&, Index m, Index n)` and `apply_on(e, ws, options, [state,] "
                "m, n, layout, form_u)` (core/detail/engine_form.hpp), or is written as OnEngine<Policy>");
  static constexpr bool device_state = detail::engine_state_v<PreconditionerType>;
  /// The gate, report and counters around a step, written once (core/detail/driver.hpp).
  using Driver = detail::Driver<T, PreconditionerType, MomentumType, ScalingType, Options, detail::DeviceStore,
                                DeviceStepReport<T>>;

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

  void reserve(Index m, Index n) {
    Driver::reserve_step(engine_, ws_, options_, m, n);
    driver_.reserve(options_, m * n);
  }

  /// The momentum buffer V (null without one).
  static T* momentum(State& state) { return MomentumType::has_buffer ? detail::raw(state.momentum) : nullptr; }

  /// The step on checked views: the fused one-pass normalization where it applies, else the engine step.
  void apply(detail::Strided<T> w, detail::Strided<const T> g, State& state) {
    if (w.size() == 0) return;
    const detail::Strided<T> v = detail::strided(momentum(state), w.rows, w.cols, state.layout);
    if constexpr (Driver::fused)
      Driver::fused_step(engine_, ws_, options_, w, g, v, options_.lr, options_.weight_decay, w.rows, w.cols);
    else
      Driver::engine_step(engine_, ws_, options_, state, state.layout, w, g, v, options_.lr, options_.weight_decay,
                          [&](Index count, auto&& block) {
                            for (Index i = 0; i < count; ++i) block(i, ws_);
                          });
  }

  Options options_;
  Engine engine_;
  detail::DeviceWorkspace<T> ws_;
  Driver driver_;  ///< the gate, reports and counters around each step
};

}  // namespace matopt

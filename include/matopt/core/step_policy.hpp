// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The non-finite-gradient policy (NonFinite) and the telemetry hook (Telemetry, StepReport) shared by every optimizer.
// What a step does around the math: the non-finite-gradient policy (docs/api.md#non-finite-gradients)
// and the telemetry hook (docs/api.md#telemetry: diagnostics during training). Shared by Optimizer, AdamW, the
// facade and the hybrid container.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/core/options.hpp"
#include "matopt/core/view.hpp"

namespace matopt {

/// What a step does when the gradient holds an inf or NaN. Checked before anything is written.
enum class NonFinite {
  Throw,  ///< std::invalid_argument; W and state unchanged (default)
  Skip,   ///< no step: W and state unchanged except the state's `skipped` counter
  Zero,   ///< step with the non-finite entries of G replaced by 0; the state's `zeroed` counter counts it
};

/// The option values of a policy (the facade's `non_finite` option).
inline constexpr std::pair<const char*, NonFinite> non_finite_names[] = {
    {"throw", NonFinite::Throw}, {"skip", NonFinite::Skip}, {"zero", NonFinite::Zero}};
/// The option value of a policy: "throw", "skip" or "zero".
inline const char* non_finite_name(NonFinite p) { return checks::one_of(non_finite_names).name(p); }
/// The check of the `non_finite` option: its names.
inline constexpr checks::OneOf<NonFinite> non_finite_check = checks::one_of(non_finite_names, "a non-finite policy");

namespace detail {
/// The options every optimizer declares after its step's own (core/options.hpp), one meaning each: weight_decay and
/// non_finite.
template <class O, class D>
void describe_decay_and_gate(O& o, D& d) {
  d("weight_decay", o.weight_decay, checks::NonNegative{},
    "lambda, the weight decay (decoupled, except TrustRatio's coupled form)");
  d("non_finite", o.non_finite, non_finite_check, "what a gradient holding inf or NaN does");
}
}  // namespace detail

namespace detail {
/// A batched step's states: none null, none given twice (two parameters would update one state, in parallel on the
/// host). `sorted` is scratch that keeps its capacity.
template <class S>
void require_distinct_states(std::string_view where, const std::vector<S*>& states, std::vector<const S*>& sorted) {
  for (std::size_t i = 0; i < states.size(); ++i)
    if (states[i] == nullptr) fail(where, "batched step: state ", i, " is null");
  sorted.assign(states.begin(), states.end());
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  if (twice != sorted.end())
    fail(where, "batched step: state ", std::find(states.begin(), states.end(), *twice) - states.begin(),
         " is given twice (each parameter needs a state of its own)");
}
}  // namespace detail

/// One parameter's settings in a batched step that steps parameters of several groups in one call
/// (Optimizer::step(params, grads, states, settings); HybridOptimizer): they replace the optimizer's lr,
/// weight_decay and non_finite options for that parameter, without changing them.
template <class T>
struct ParamStep {
  T lr;                        ///< this step's lr (finite, > 0)
  T weight_decay;              ///< this step's weight decay (finite, >= 0)
  NonFinite non_finite;        ///< what a non-finite gradient does
  std::optional<bool> finite;  ///< whether the gradient is finite, when the caller has scanned it (else scanned)
};

namespace detail {
/// What a checked step goes on to do with its gradient.
enum class GradAction { Apply, Skip, Zero };

/// The gradient gate of every optimizer (host and device, matrix and element-wise; docs/api.md#non-finite-gradients):
/// Apply for a finite G, else the policy's action; under Throw, an error naming G's shape, before anything is written.
inline GradAction gradient_action(bool finite, NonFinite policy, const char* where, Index rows, Index cols) {
  if (finite) return GradAction::Apply;
  if (policy == NonFinite::Skip) return GradAction::Skip;
  if (policy == NonFinite::Zero) return GradAction::Zero;
  fail(where, "G (", shape_string(rows, cols),
       ") contains a non-finite value; W and state are unchanged (options.non_finite = throw)");
}
}  // namespace detail

/// What every optimizer's per-parameter State records besides its buffers (Optimizer, AdamW, Lion and their device
/// twins): the shape and storage order of the parameter it was made for, and its step counters.
struct StateCounters {
  Index rows = 0;                    ///< rows of the parameter this state was made for
  Index cols = 0;                    ///< columns of that parameter
  Layout layout = Layout::ColMajor;  ///< its storage order
  std::int64_t steps = 0;            ///< steps taken (skipped ones not counted)
  std::int64_t skipped = 0;          ///< steps skipped for a non-finite gradient (NonFinite::Skip)
  std::int64_t zeroed = 0;           ///< steps taken with non-finite entries of G zeroed (NonFinite::Zero)

  /// Throws, before anything is written, unless G (g_rows x g_cols, laid out as g_layout) is a matrix of W's shape and
  /// storage order, and this state was made for W (rows x cols, laid out as `layout`): every optimizer's step.
  void check_fits(const char* where, Index w_rows, Index w_cols, Layout w_layout, Index g_rows, Index g_cols,
                  Layout g_layout) const {
    using detail::fail, detail::layout_name, detail::same_layout, detail::shape_string;
    if (g_rows != w_rows || g_cols != w_cols)
      fail(where, "G is ", shape_string(g_rows, g_cols), " but W is ", shape_string(w_rows, w_cols));
    if (!same_layout(g_layout, w_layout, w_rows, w_cols))
      fail(where, "G is ", layout_name(g_layout), " but W is ", layout_name(w_layout), " (",
           shape_string(w_rows, w_cols), ")");
    if (rows != w_rows || cols != w_cols)
      fail(where, "state was made for a ", shape_string(rows, cols), " parameter but W is ",
           shape_string(w_rows, w_cols));
    if (!same_layout(layout, w_layout, w_rows, w_cols))
      fail(where, "state was made for a ", layout_name(layout), " W but W is ", layout_name(w_layout), " (",
           shape_string(w_rows, w_cols), ")");
  }

  /// The counters' checkpoint fields, f(name, field), in the order every state writes them first.
  template <class F>
  void counter_fields(F&& f) {
    f("rows", rows);
    f("cols", cols);
    f("layout", layout);
    f("steps", steps);
    f("skipped", skipped);
    f("zeroed", zeroed);
  }
};

/// One parameter's report from a step (see Telemetry). View: where U lies, MatrixView<const T> (host memory) or
/// DeviceMatrixView<const T> (device memory: DeviceStepReport, backend/device_optimizer.hpp).
template <class T, class View = MatrixView<const T>>
struct StepReport {
  const T* param = nullptr;        ///< W's data (in the memory View is of): identifies the parameter
  /// W's shape.
  /// @{
  Index rows = 0, cols = 0;
  /// @}
  std::int64_t step = 0;           ///< the parameter's step count, this step included
  /// U = u_g G + u_v V, what the preconditioner received (after momentum and Nesterov, `docs/math.md#diagnostics`: the
  /// matrix diagonal_dominance and singular_value_quantiles examine, on the host or the device engine). Valid during
  /// the callback only.
  View direction{};
  double update_rms = 0;           ///< ||W_after - W_before||_F / sqrt(mn)
  double effective_lr = 0;         ///< as effective_lr(state) after this step
};

/// Reporting every `every`-th step of each parameter (counted by its state) to `callback`. Off when
/// `every` is 0 (the default): then a step costs one branch more. A reporting step copies W and U (and
/// allocates those copies the first time a shape grows), so it costs about two passes over memory plus
/// whatever the callback computes. Report is StepReport<T> on the host, DeviceStepReport<T> (U in device memory) for
/// DeviceOptimizer.
template <class T, class Report = StepReport<T>>
struct Telemetry {
  /// Report every `every`-th step of each parameter; 0 (the default) turns telemetry off.
  int every = 0;
  /// Called with the report of each due step; telemetry is off while it is empty.
  std::function<void(const Report&)> callback;

  /// Whether the step that brings a parameter's count to `steps_after` reports.
  bool due(std::int64_t steps_after) const {
    return every > 0 && callback && steps_after % every == 0;
  }
};

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// AutoSteps: Orthogonalize with its Newton–Schulz step count planned per matrix from the momentum's spectrum.
// Why: NS maps a normalized singular value s to p_K(s), and directions with s below the schedule's failure
// threshold come out far from 1 (docs/math.md#step-planning-and-autosteps). Magakyan, Parrilo and Ozdaglar
// track the singular-value
// quantiles of each layer's momentum and finds that they settle after a burn-in at a value set by layer type
// and model size, so the fewest steps that still orthogonalize the directions that matter can be chosen per
// layer.
//
// Cost: a check forms U's Gram on the short side in double and its eigenvalues (r^2 s + O(r^3) for r x s,
// r <= s: about one NS iteration and a symmetric eigensolve) and allocates them; between checks a step costs
// K NS iterations and allocates nothing.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include <Eigen/Eigenvalues>

#include "matopt/core/detail/engine_form.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/parse.hpp"
#include "matopt/diagnostics/ns_analysis.hpp"
#include "matopt/distributed/plan.hpp"
#include "matopt/precondition/newton_schulz.hpp"
#include "matopt/precondition/orthogonalize.hpp"

namespace matopt {

namespace detail {
/// The quantile at p (numpy's "linear" rule over all r = min(m, n) values) of the singular values of
/// U / ||U||_F, from the eigenvalues of the r x r Gram in double: sigma_i^2 = lambda_i / ||U||_F^2, on U scaled
/// by 1 / max |U_ij| first (no overflow). Clamped to [0, 1] (rounding can put a rank-one U's value just above
/// 1). Absolute error about 1e-16 r in sigma^2: values below `kSvResolution` are not resolved and read as 0.
/// 0 for a zero U.
inline constexpr double kSvResolution = 1e-7;
template <class UExpr>
double normalized_sv_quantile(const UExpr& u, double p) {
  Eigen::MatrixXd x = u.template cast<double>();
  const double peak = x.size() == 0 ? 0.0 : x.cwiseAbs().maxCoeff();
  if (!(peak > 0)) return 0;
  x /= peak;
  const double fro2 = x.squaredNorm();
  const Eigen::MatrixXd a =
      x.rows() > x.cols() ? Eigen::MatrixXd(x.transpose() * x) : Eigen::MatrixXd(x * x.transpose());
  Eigen::VectorXd s = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(a, Eigen::EigenvaluesOnly).eigenvalues();
  for (Index i = 0; i < s.size(); ++i) s[i] = std::sqrt(std::max(s[i], 0.0) / fro2);  // ascending, as lambda
  const double q = quantile_sorted(s.data(), s.size(), p);
  return q < kSvResolution ? 0.0 : std::min(q, 1.0);
}
}  // namespace detail

/// Orthogonalize<Method> whose Newton–Schulz step count K is planned per matrix (facade: `muon` with `ns_steps=auto`):
/// every `plan_every` steps of a parameter (the first included) it measures the quantile q at `plan_quantile` of the
/// singular values of U / ||U||_F and takes the fewest K whose failure threshold lies at or below q (plan_ns_steps(),
/// diagnostics/ns_analysis.hpp; at most `plan_max_steps`); K holds until the next check. A q below 1e-7 (a zero U,
/// or one rank-deficient at p: the Gram's eigenvalues do not resolve it) keeps the schedule's own `steps`. On the
/// host and on the device optimizers (@ref policy_preconditioner).
template <class Method = NewtonSchulz<>>
struct AutoSteps {
  /// The wrapped preconditioner, Orthogonalize<Method>.
  using Inner = Orthogonalize<Method>;
  /// Orthogonalize's options and the planning rule.
  struct Options : Inner::Options {
    int plan_every = 100;        ///< re-plan every `plan_every` steps of a parameter (the first included)
    double plan_quantile = 0.05;  ///< p of the tracked quantile of sigma(U) / ||U||_F
    double plan_tau = 0.5;       ///< band the tracked direction must reach (NsPlanOptions::tau)
    int plan_max_steps = 10;     ///< the most NS steps a plan may choose
  };
  /// Per parameter: the plan in use and what the last check measured.
  template <class T>
  struct State {
    std::int64_t ns_steps = 0;  ///< K of the last plan (0 before the first step)
    double quantile = 0;        ///< q measured at the last check
    std::int64_t calls = 0;     ///< steps preconditioned
    std::int64_t ns_work = 0;   ///< NS iterations run in all (sum of K over the steps)
    template <class F>
    /// Every field, for checkpoints: f(name, field).
    void fields(F&& f) {
      f("ns_steps", ns_steps);
      f("quantile", quantile);
      f("calls", calls);
      f("ns_work", ns_work);
    }
    /// Checkpoint loading (serialization/archive.hpp): q is a normalized singular value, and a parameter that
    /// has been stepped has a plan of 1 to max_plan_steps steps.
    template <class Fail>
    void check_loaded(Fail&& fail) const {
      if (!(quantile >= 0 && quantile <= 1)) fail("field 'quantile' is ", quantile, ": it must be in [0, 1]");
      if (ns_steps > max_plan_steps) fail("field 'ns_steps' is ", ns_steps, ": it must be <= ", max_plan_steps);
      if (calls > 0 && ns_steps < 1)
        fail("field 'ns_steps' is ", ns_steps, " after ", calls, " steps: it must be >= 1");
    }
  };

  /// The most steps a plan (ns_plan_max_steps) or a loaded state may hold.
  static constexpr int max_plan_steps = 1000;
  /// ns_steps: an integer in [1, max_plan_steps], or `auto` (this policy), which changes nothing.
  struct StepsOrAuto : checks::InRange {
    StepsOrAuto() : checks::InRange{1, max_plan_steps} {}
    /// "in [1, 1000], or auto".
    std::string text() const { return checks::InRange::text() + ", or auto"; }
    /// An integer, or `auto` (no change).
    static void parse(std::string_view key, std::string_view value, int& steps) {
      if (value != "auto") steps = detail::parse_int(key, value);
    }
  };

  /// Before a step (Optimizer::check): a plan longer than these options allow (a checkpoint from a run with a
  /// larger ns_plan_max_steps or ns_steps) is refused, not run.
  template <class T>
  static void check_state(const State<T>& s, const Options& o, Index, Index, std::string_view where) {
    const std::int64_t most = std::max(o.plan_max_steps, o.schedule.steps);
    if (s.ns_steps > most)
      detail::fail(where, "state plans ", s.ns_steps, " Newton-Schulz steps but ns_plan_max_steps ", o.plan_max_steps,
                   " and ns_steps ", o.schedule.steps, " allow at most ", most);
  }

  /// "AutoSteps".
  static constexpr const char* name() { return "AutoSteps"; }
  /// The planner's cost (distributed/plan.hpp): m n min(m, n), the Newton–Schulz products at the planned K.
  static double cost(Index m, Index n) { return orthogonalize_cost(m, n); }
  /// "AutoSteps<Orthogonalize<Method>>".
  static std::string identity() { return std::string("AutoSteps<") + detail::policy_identity<Inner>() + ">"; }

  /// Throws std::invalid_argument for a bad Orthogonalize option, row blocks, AOL, ns_steps above max_plan_steps,
  /// The options (core/options.hpp): ns_steps (also `auto`, what this policy is), the plan's, then Inner's; no row
  /// blocks and no AOL start (a plan is made for the whole, Frobenius-normalized matrix).
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("ns_steps", o.schedule.steps, StepsOrAuto{}, "K, the Newton-Schulz steps");
    d("ns_plan_every", o.plan_every, checks::AtLeast{1}, "re-plan K every this many steps of a parameter");
    d("ns_plan_quantile", o.plan_quantile, checks::Fraction{}, "p of the tracked singular-value quantile");
    d("ns_plan_tau", o.plan_tau, checks::Positive{}, "the band the quantile's direction must reach");
    d("ns_plan_max_steps", o.plan_max_steps, checks::InRange{1, max_plan_steps}, "the most steps a plan chooses");
    Inner::describe(o, d);
    d.rule([&o](std::string_view where) {
      if (o.blocked()) detail::fail(where, "heads / split_sizes: ns_steps=auto plans the whole matrix");
      if (o.schedule.aol)
        detail::fail(where, "ns_aol: ns_steps=auto plans for the Frobenius-normalized input, not AOL's");
    });
  }

  /// Whether this step of the parameter checks its plan (every plan_every steps, the first included).
  template <class T>
  static bool plans_now(const Options& o, const State<T>& s) {
    return s.calls % o.plan_every == 0;
  }
  /// A check: measures q on U (an m x n Eigen expression) and plans K into the state.
  template <class T, class UExpr>
  static void plan(const UExpr& u, const Options& o, State<T>& s) {
    const double q = detail::normalized_sv_quantile(u, o.plan_quantile);  // in {0} or [1e-7, 1]
    NsPlanOptions plan;
    plan.tau = o.plan_tau;
    plan.max_steps = o.plan_max_steps;
    s.ns_steps = q > 0 ? plan_ns_steps(o.schedule, q, plan).steps : o.schedule.steps;
    s.quantile = q;
  }
  /// Counts this step in the state; returns its K, the planned step count.
  template <class T>
  static int advance(State<T>& s) {
    ++s.calls;
    s.ns_work += s.ns_steps;
    return static_cast<int>(s.ns_steps);
  }

  /// The engine form (core/detail/engine_form.hpp): Orthogonalize's, and U's host copy for a check step.
  template <class WS>
  static void reserve_on(WS& ws, const Options& o, Index m, Index n) {
    Inner::reserve_on(ws, o, m, n);
    ws.grow(ws.u, m * n);
    detail::reserve_host(ws, ws.host_u, m * n);
  }
  /// plans_now, plan and advance (the State above) with U formed in the workspace, read on the host on a check step
  /// (a device downloads m n elements every plan_every steps), then Orthogonalize's engine form with the planned
  /// step count, which forms U again.
  template <class E, class WS, class FormU>
  static detail::Strided<typename WS::Scalar> apply_on(E& e, WS& ws, const Options& o,
                                                       State<typename WS::Scalar>& s, Index m, Index n,
                                                       Layout layout, FormU&& form_u) {
    using T = typename WS::Scalar;
    if (plans_now(o, s)) {
      const detail::Strided<T> u = detail::form_in_workspace(ws, m, n, layout, form_u);
      const T* host = detail::host_readable(e, ws, ws.host_u, static_cast<const T*>(u.data), m * n);
      if (layout == Layout::RowMajor)
        plan(Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(host, m, n), o, s);
      else
        plan(Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>>(host, m, n), o, s);
    }
    return Inner::apply_on(e, ws, o, m, n, layout, form_u, advance(s));
  }
};

}  // namespace matopt

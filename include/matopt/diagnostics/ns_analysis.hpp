// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Newton–Schulz analysis: response tables, failure thresholds, a step planner and power-law extrapolation.
// Newton–Schulz analysis (docs/math.md; Magakyan, Parrilo, Ozdaglar). All scalar: no matrices involved.

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "matopt/core/detail/errors.hpp"
#include "matopt/precondition/generators.hpp"
#include "matopt/precondition/schedule.hpp"

namespace matopt {

namespace detail {
inline int resolve_steps(const char* where, const NsSchedule& s, int steps) {
  if (steps == -1) return s.steps;
  if (steps < 1) fail(where, "steps must be >= 1, or -1 for the schedule's own (got ", steps, ")");
  return steps;
}

/// The sample quantile of ascending `sorted` at p (numpy's default "linear" method).
inline double quantile_sorted(const double* sorted, Index count, double p) {
  const double h = double(count - 1) * p;
  const auto lo = static_cast<Index>(std::floor(h));
  if (lo >= count - 1) return sorted[count - 1];
  return sorted[lo] + (h - double(lo)) * (sorted[lo + 1] - sorted[lo]);
}
}  // namespace detail

/// The scalar map after k = 1..max_steps steps at each input: out(i, k - 1) = s.response(sigmas[i], k)
/// (NsSchedule::response: the safety factor is not applied, inputs are singular values of the already
/// normalized X). Steps past the schedule's coefficient list repeat its last entry.
inline Eigen::MatrixXd ns_response_table(const NsSchedule& s, const std::vector<double>& sigmas, int max_steps) {
  constexpr const char* where = "matopt::ns_response_table";
  s.validate(where);
  if (max_steps < 1) detail::fail(where, "max_steps must be >= 1 (got ", max_steps, ")");
  Eigen::MatrixXd out(Index(sigmas.size()), max_steps);
  for (std::size_t i = 0; i < sigmas.size(); ++i) {
    detail::require_finite(where, "sigma", sigmas[i]);
    for (int k = 1; k <= max_steps; ++k) out(Index(i), k - 1) = s.response(sigmas[i], k);
  }
  return out;
}

/// Failure threshold of a schedule: the smallest sigma in (0, sigma_hi] whose response after `steps` steps
/// (default -1: the schedule's own count) reaches tau, i.e. s.response(sigma, steps) >= tau. Singular values
/// below it leave NS under tau: those directions are not orthogonalized. +infinity when no sigma in
/// (0, sigma_hi] reaches tau. The threshold is in the units of NsSchedule::response (after the safety
/// factor); a singular value of U / ||U||_F enters NS divided by s.safety.
///
/// Method: the response is p_k(...p_1(sigma)) with p(0) = 0, so near 0 it is (prod a_i) sigma. Starting where
/// that line is 1000 times below tau, a geometric scan (64 points a decade) finds the first grid interval
/// over which the response crosses tau, then bisection closes in to relative precision 1e-15. Assumption,
/// true of every published schedule: the response increases on [0, its first maximum], and tau is crossed
/// there; the scan would also find a later crossing if the response first peaked below tau, but could step
/// over a crossing and re-crossing inside one grid interval (1/64 of a decade) of a non-monotone map.
/// Published (docs/math.md): Jordan, tau = 0.5, 5 steps -> 1.07e-3; each extra step divides it by about a = 3.4445.
inline double ns_failure_threshold(const NsSchedule& s, double tau, int steps = -1, double sigma_hi = 1.0) {
  constexpr const char* where = "matopt::ns_failure_threshold";
  s.validate(where);
  detail::require_positive(where, "tau", tau);
  detail::require_positive(where, "sigma_hi", sigma_hi);
  const int k = detail::resolve_steps(where, s, steps);
  const auto f = [&](double x) { return s.response(x, k); };
  double slope = 1;  // derivative of the k-step map at 0
  for (int i = 0; i < k; ++i) slope *= s.at(i).a;
  double lo = 1e-3 * sigma_hi;
  if (slope > 0) lo = std::min(lo, 1e-3 * tau / slope);
  while (!(f(lo) < tau) && lo > 1e-290) lo *= 1e-3;
  if (!(f(lo) < tau)) return lo;  // reached at any representable scale
  const double step = std::pow(10.0, 1.0 / 64);
  for (double x0 = lo; x0 < sigma_hi;) {
    const double x1 = std::min(x0 * step, sigma_hi);
    if (f(x1) >= tau) {
      double a = x0, b = x1;  // f(a) < tau <= f(b)
      while (b - a > 1e-15 * b) {
        const double mid = 0.5 * (a + b);
        if (mid <= a || mid >= b) break;
        (f(mid) >= tau ? b : a) = mid;
      }
      return b;
    }
    x0 = x1;
  }
  return std::numeric_limits<double>::infinity();
}

/// What plan_ns_steps looks for, and where.
struct NsPlanOptions {
  double tau = 0.5;        ///< band the tracked quantile must reach after the chosen steps
  int max_steps = 10;      ///< the most steps considered
  bool generate = false;   ///< return polar_express::optimal_composition(l = quantile, K) instead of the base
  double safety = 0.02;    ///< generator's safety (its normalization divides by 1 + safety)
  double cushion = 0.02;   ///< generator's cushion
};

/// A Newton–Schulz configuration chosen for a tracked singular-value quantile.
struct NsPlan {
  int steps = 0;            ///< K: the fewest steps that reach tau, or max_steps when none does
  double threshold = 0;     ///< ns_failure_threshold of `schedule` at K steps
  double input = 0;         ///< the quantile as NS sees it: quantile / schedule.safety
  bool reached = false;     ///< threshold <= input (false: even max_steps leaves the quantile below tau)
  NsSchedule schedule;      ///< the base schedule with steps = K, or the generated Polar Express composition
};

/// Picks the fewest steps K in [1, max_steps] whose failure threshold lies at or below the tracked quantile
/// q of U / ||U||_F (singular_value_quantiles; docs/math.md), so that directions with singular
/// value >= q come out of NS at least tau. The comparison is in NS-input units: threshold(K) <= q / safety.
/// With o.generate, each candidate K is instead the Polar Express composition generated for l = q (docs/math.md;
/// l is capped at 0.999, since the generator needs l < 1) and checked the same way. When no K
/// reaches tau the plan has K = max_steps and reached = false. q must be in (0, 1] (a zero quantile means
/// the matrix is rank-deficient at that p: pick a larger p). Cost: up to max_steps threshold searches (and
/// generations), microseconds each.
inline NsPlan plan_ns_steps(const NsSchedule& base, double quantile, const NsPlanOptions& o = {}) {
  constexpr const char* where = "matopt::plan_ns_steps";
  if (!(quantile > 0 && quantile <= 1))
    detail::fail(where, "quantile must be in (0, 1] (got ", quantile,
                 "); a zero quantile means U is rank-deficient at that p");
  detail::require_positive(where, "tau", o.tau);
  if (o.max_steps < 1) detail::fail(where, "max_steps must be >= 1 (got ", o.max_steps, ")");
  if (!o.generate) base.validate(where);
  NsPlan plan;
  for (int k = 1; k <= o.max_steps; ++k) {
    NsSchedule s = o.generate ? polar_express::optimal_composition(std::min(quantile, 0.999), k, o.safety, o.cushion)
                              : base;
    s.steps = k;
    plan.steps = k;
    plan.threshold = ns_failure_threshold(s, o.tau, k);
    plan.input = quantile / s.safety;
    plan.reached = plan.threshold <= plan.input;
    plan.schedule = std::move(s);
    if (plan.reached) break;
  }
  return plan;
}

/// A power law q(M) = q_ref (M / m_ref)^(-alpha), e.g. a singular-value quantile against model size M
/// (Magakyan, Parrilo and Ozdaglar report alpha from about 0.25, early and middle layers, to 0.96, some late layers).
struct PowerLaw {
  /// q at the reference size.
  double q_ref = 1;
  /// The reference size M_ref.
  double m_ref = 1;
  /// The exponent alpha.
  double alpha = 0;
  double alpha_stderr = 0;  ///< standard error of alpha when fitted (NaN from two points), else 0
  /// q at size m.
  double operator()(double m) const { return q_ref * std::pow(m / m_ref, -alpha); }
};

/// q(M) = q_ref (M / M_ref)^(-alpha): a quantile measured at size M_ref carried to size M.
inline double extrapolate_quantile(double q_ref, double m_ref, double m, double alpha) {
  constexpr const char* where = "matopt::extrapolate_quantile";
  detail::require_positive(where, "q_ref", q_ref);
  detail::require_positive(where, "m_ref", m_ref);
  detail::require_positive(where, "M", m);
  detail::require_finite(where, "alpha", alpha);
  return PowerLaw{q_ref, m_ref, alpha, 0}(m);
}

/// Least-squares fit of log q = log q_ref - alpha log(M / m_ref) to measured (M, q) pairs, with m_ref the
/// geometric mean of the sizes (where q_ref and alpha are uncorrelated). alpha_stderr is the usual OLS
/// standard error of the slope, sqrt(RSS / (n - 2) / sum (log M - mean)^2), NaN for two points.
inline PowerLaw fit_power_law(const std::vector<double>& sizes, const std::vector<double>& values) {
  constexpr const char* where = "matopt::fit_power_law";
  if (sizes.size() != values.size())
    detail::fail(where, "sizes and values differ in length (", sizes.size(), " vs ", values.size(), ")");
  if (sizes.size() < 2) detail::fail(where, "need at least 2 points (got ", sizes.size(), ")");
  const auto n = double(sizes.size());
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    detail::require_positive(where, "size", sizes[i]);
    detail::require_positive(where, "value", values[i]);
    mx += std::log(sizes[i]);
    my += std::log(values[i]);
  }
  mx /= n;
  my /= n;
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const double dx = std::log(sizes[i]) - mx;
    sxx += dx * dx;
    sxy += dx * (std::log(values[i]) - my);
  }
  if (!(sxx > 0)) detail::fail(where, "all sizes are equal: the exponent is undefined");
  const double slope = sxy / sxx;
  double rss = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const double e = std::log(values[i]) - my - slope * (std::log(sizes[i]) - mx);
    rss += e * e;
  }
  PowerLaw law;
  law.m_ref = std::exp(mx);
  law.q_ref = std::exp(my);
  law.alpha = -slope;
  law.alpha_stderr = sizes.size() > 2 ? std::sqrt(rss / (n - 2) / sxx) : std::numeric_limits<double>::quiet_NaN();
  return law;
}

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Newton–Schulz coefficient schedules (NsSchedule) and the published ones (namespace schedules).

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "matopt/core/detail/errors.hpp"
#include "matopt/core/options.hpp"

namespace matopt {

/// Coefficients (a, b, c) of one step: X <- a X + (b A + c A^2) X with A = X X^T.
struct NsCoefficients {
  /// The step's coefficients: X <- a X + (b A + c A^2) X.
  /// @{
  double a = 0, b = 0, c = 0;
  /// @}
  /// The step's scalar map p(s) = a s + b s^3 + c s^5.
  double operator()(double s) const {
    const double s2 = s * s;
    return s * (a + s2 * (b + s2 * c));
  }
};

/// A run-time schedule: step k uses coefficients[min(k, size-1)] (the last entry repeats, as in the
/// Polar Express reference), for `steps` steps, after X <- X / (safety * ||X||_F + eps); with `aol`, after
/// Turbo-Muon's AOL row scaling instead (arXiv 2512.04632; `docs/math.md#aol-start-turbo-muon`): A = X X^T,
/// d_i = 1 / sqrt(max(sum_j |A_ij|, eps)), X <- diag(d) X and A <- diag(d) A diag(d), which the first step
/// reuses (`safety` is not used then). Every singular value of diag(d) X is at most 1 (AOL, arXiv 2208.03160).
struct NsSchedule {
  /// Coefficients per step; the last one repeats (at least one entry).
  std::vector<NsCoefficients> coefficients;
  /// Number of steps, >= 1 (key ns_steps).
  int steps = 5;
  /// X is divided by safety ||X||_F + eps first; > 0 (key ns_safety; not used under `aol`).
  double safety = 1.0;
  /// The eps of that normalization (of the AOL row sums under `aol`), >= 0 (key ns_eps).
  double eps = 1e-7;
  /// Turbo-Muon's AOL row scaling instead of the Frobenius normalization (key ns_aol).
  bool aol = false;

  /// Coefficients of step k (0-based): coefficients[min(k, size - 1)].
  const NsCoefficients& at(int k) const {
    const auto last = static_cast<int>(coefficients.size()) - 1;
    return coefficients[static_cast<std::size_t>(k < last ? k : last)];
  }

  /// Scalar response after `k` steps (default: all) of an input singular value `sigma` that has
  /// already been normalized (the safety factor is not applied here).
  double response(double sigma, int k = -1) const {
    const int n = k < 0 ? steps : k;
    for (int i = 0; i < n; ++i) sigma = at(i)(sigma);
    return sigma;
  }

  /// Throws std::invalid_argument for no coefficients, steps < 1, non-finite coefficients, safety <= 0 or eps < 0.
  void validate(std::string_view where) const {
    if (coefficients.empty()) detail::fail(where, "NS schedule has no coefficients");
    if (steps < 1) detail::fail(where, "NS steps must be >= 1 (got ", steps, ")");
    for (const auto& c : coefficients)
      if (!(std::isfinite(c.a) && std::isfinite(c.b) && std::isfinite(c.c)))
        detail::fail(where, "NS coefficients must be finite (got (", c.a, ", ", c.b, ", ", c.c, "))");
    detail::require_positive(where, "NS safety", safety);
    detail::require_nonnegative(where, "NS eps", eps);
  }
};

/// The published schedules (`docs/math.md#coefficient-schedules`). Each tag's `schedule()` returns a fresh NsSchedule.
namespace schedules {

/// KellerJordan/Muon `zeropower_via_newtonschulz5`: (3.4445, -4.7750, 2.0315) for 5 steps.
struct Jordan {
  /// The schedule's name (schedules::by_name, the facade's ns_schedule).
  static constexpr const char* name = "jordan";
  /// The schedule: 5 steps, safety 1, eps 1e-7.
  static NsSchedule schedule() { return {{{3.4445, -4.7750, 2.0315}}, 5, 1.0, 1e-7}; }
};

/// Jiacheng You's per-step coefficients (via the PolarExpress repository).
struct You {
  /// The schedule's name (schedules::by_name, the facade's ns_schedule).
  static constexpr const char* name = "you";
  /// The schedule: five per-step quintics, safety 1, eps 1e-7.
  static NsSchedule schedule() {
    return {{{4.0848, -6.8946, 2.9270},
             {3.9505, -6.3029, 2.6377},
             {3.7418, -5.5913, 2.3037},
             {2.8769, -3.1427, 1.2046},
             {2.8366, -3.0525, 1.2012}},
            5, 1.0, 1e-7};
  }
};

/// Turbo-Muon (thib-s/flash-newton-schulz turbo_muon_torch.py, variant "turbo"; modded-nanogpt record
/// 2025-11-11_TurboMuon): AOL preconditioning and the last four of You's steps ("drop the first iteration"),
/// eps 1e-6 on the row sums (the Muon wrapper's value).
struct Turbo {
  /// The schedule's name (schedules::by_name, the facade's ns_schedule).
  static constexpr const char* name = "turbo";
  /// The schedule: four quintics with AOL, eps 1e-6.
  static NsSchedule schedule() {
    return {{{3.9505, -6.3029, 2.6377}, {3.7418, -5.5913, 2.3037}, {2.8769, -3.1427, 1.2046}, {2.8366, -3.0525, 1.2012}},
            4, 1.0, 1e-6, true};
  }
};

/// Polar Express 5-step schedule (arXiv 2505.16932) as used by modded-nanogpt and OrScale; equal to
/// `polar_express::optimal_composition(1e-3, 5, 0.02, 0.02)`. Input divided by 1.02 ||X||_F + 1e-6.
struct PolarExpress {
  /// The schedule's name (schedules::by_name, the facade's ns_schedule).
  static constexpr const char* name = "polar_express";
  /// The schedule: five quintics, safety 1.02, eps 1e-6.
  static NsSchedule schedule() {
    return {{{8.156554524902461, -22.48329292557795, 15.878769915207462},
             {4.042929935166739, -2.808917465908714, 0.5000178451051316},
             {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
             {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
             {2.3465413258596377, -1.7097828382687081, 0.42323551169305323}},
            5, 1.02, 1e-6};
  }
};

/// Classic cubic Newton–Schulz: X <- 1.5 X - 0.5 (X X^T) X. Converges to the polar factor for every
/// normalized singular value in (0, 1], slowly from small ones.
struct Cubic {
  /// The schedule's name (schedules::by_name, the facade's ns_schedule).
  static constexpr const char* name = "cubic";
  /// The schedule: 5 cubic steps, safety 1, eps 1e-7.
  static NsSchedule schedule() { return {{{1.5, -0.5, 0.0}}, 5, 1.0, 1e-7}; }
};

/// Quintic Newton–Schulz with p'(1) = p''(1) = 0: (15/8, -10/8, 3/8).
struct QuinticFixedPoint {
  /// The schedule's name (schedules::by_name, the facade's ns_schedule).
  static constexpr const char* name = "quintic";
  /// The schedule: 5 steps, safety 1, eps 1e-7.
  static NsSchedule schedule() { return {{{15.0 / 8, -10.0 / 8, 3.0 / 8}}, 5, 1.0, 1e-7}; }
};

/// The published schedules by name: by_name, the facade's ns_schedule and its docs read this one table.
inline constexpr std::pair<const char*, NsSchedule (*)()> table[] = {
    {Jordan::name, &Jordan::schedule}, {You::name, &You::schedule},   {PolarExpress::name, &PolarExpress::schedule},
    {Cubic::name, &Cubic::schedule},   {QuinticFixedPoint::name, &QuinticFixedPoint::schedule},
    {Turbo::name, &Turbo::schedule}};
/// The names of the table, comma-separated: "jordan, you, polar_express, cubic, quintic, turbo".
inline std::string names() {
  std::string s;
  for (const auto& entry : table) (s += s.empty() ? "" : ", ") += entry.first;
  return s;
}
/// The schedule of a name of the table.
inline NsSchedule by_name(std::string_view name) {
  for (const auto& entry : table)
    if (name == entry.first) return entry.second();
  detail::fail("matopt::schedules::by_name", "unknown NS schedule '", name, "' (known: ", names(), ")");
}

}  // namespace schedules
}  // namespace matopt

namespace matopt::detail {

/// ns_schedule: a name of schedules::by_name, which replaces the whole schedule (the facade applies it first).
struct ScheduleName : checks::Any {
  static std::string text() { return schedules::names(); }
  static void parse(std::string_view, std::string_view value, NsSchedule& s) { s = schedules::by_name(value); }
  /// The name of the published schedule s is, or "" (a schedule of one's own, or one changed by other keys).
  static std::string name(const NsSchedule& s) {
    auto same = [](const NsCoefficients& x, const NsCoefficients& y) { return x.a == y.a && x.b == y.b && x.c == y.c; };
    for (const auto& entry : schedules::table) {
      const NsSchedule p = entry.second();
      if (p.steps == s.steps && p.safety == s.safety && p.eps == s.eps && p.aol == s.aol &&
          std::equal(p.coefficients.begin(), p.coefficients.end(), s.coefficients.begin(), s.coefficients.end(), same))
        return entry.first;
    }
    return "";
  }
};

/// The options of a Newton-Schulz schedule (core/options.hpp): ns_schedule, ns_steps, ns_safety, ns_eps, ns_aol,
/// then the schedule's own checks (its coefficients).
template <class S, class D>
void describe_schedule(S& s, D& d) {
  d("ns_schedule", s, ScheduleName{}, "the Newton-Schulz schedule by name; replaces the whole schedule");
  d("ns_steps", s.steps, checks::AtLeast{1}, "K, the Newton-Schulz steps");
  d("ns_safety", s.safety, checks::Positive{}, "kappa in X / (kappa ||X||_F + epsilon)");
  d("ns_eps", s.eps, checks::NonNegative{}, "epsilon of the normalization (of the row sums under AOL)");
  d("ns_aol", s.aol, checks::Any{}, "AOL row scaling in place of the Frobenius normalization (Turbo-Muon)");
  d.rule([&s](std::string_view where) { s.validate(where); });
}

}  // namespace matopt::detail

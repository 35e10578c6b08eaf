// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Run-time generators of Newton–Schulz schedules: Polar Express (arXiv 2505.16932) and CANS cubics.
// See docs/math.md#schedule-generators.

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "matopt/core/detail/errors.hpp"
#include "matopt/precondition/schedule.hpp"

namespace matopt {
/// Polar Express (Amsel, Persson, Musco, Gower, arXiv 2505.16932): per step the odd quintic that best approximates
/// 1 on the current interval of singular values, composed greedily.
namespace polar_express {

/// The odd quintic p(x) = a x + b x^3 + c x^5 minimizing max |1 - p| on [l, u], 0 < l <= u (Remez exchange on 4
/// equioscillation points).
inline NsCoefficients optimal_quintic(double l, double u) {
  if (!(l > 0 && l <= u && std::isfinite(u)))
    detail::fail("matopt::polar_express::optimal_quintic", "need 0 < l <= u (got l = ", l, ", u = ", u, ")");
  // For l ~ u the equioscillating polynomial is numerically the fixed-point quintic scaled to u.
  if (1 - 5e-6 <= l / u) return {(15.0 / 8) / u, (-10.0 / 8) / (u * u * u), (3.0 / 8) / std::pow(u, 5)};
  double q = (3 * l + u) / 4, r = (l + 3 * u) / 4;  // interior extrema; exact as l -> u
  double e = std::numeric_limits<double>::infinity(), e_old;
  NsCoefficients p;
  // Remez: p - 1 equioscillates (-E, +E, -E, +E) at (l, q, r, u); then move q, r to p's extrema.
  for (int iter = 0; iter < 100; ++iter) {
    e_old = e;
    // [x, x^3, x^5, -+1] (a, b, c, E) = 1 at the four points, by Gaussian elimination with partial pivoting
    // (written out: Eigen's LU costs every file that includes this header about 2 s of compile time).
    double m[4][5];
    const double pts[4] = {l, q, r, u};
    for (int i = 0; i < 4; ++i) {
      const double x = pts[i];
      const double row[5] = {x, x * x * x, std::pow(x, 5), (i % 2 == 0) ? 1.0 : -1.0, 1.0};
      std::copy(row, row + 5, m[i]);
    }
    for (int k = 0; k < 4; ++k) {
      int pivot = k;
      for (int i = k + 1; i < 4; ++i)
        if (std::abs(m[i][k]) > std::abs(m[pivot][k])) pivot = i;
      std::swap(m[k], m[pivot]);
      for (int i = k + 1; i < 4; ++i) {
        const double f = m[i][k] / m[k][k];
        for (int j = k; j < 5; ++j) m[i][j] -= f * m[k][j];
      }
    }
    double sol[4];
    for (int i = 3; i >= 0; --i) {
      double t = m[i][4];
      for (int j = i + 1; j < 4; ++j) t -= m[i][j] * sol[j];
      sol[i] = t / m[i][i];
    }
    p = {sol[0], sol[1], sol[2]};
    e = sol[3];
    const double disc = std::sqrt(9 * p.b * p.b - 20 * p.a * p.c);
    q = std::sqrt((-3 * p.b - disc) / (10 * p.c));
    r = std::sqrt((-3 * p.b + disc) / (10 * p.c));
    if (std::abs(e_old - e) <= 1e-15) break;
  }
  return p;
}

/// Polar Express schedule of `steps` quintics for singular values in [l, 1] (docs/math.md): per step the
/// optimal quintic on [max(l, cushion u), u], rescaled by 2 / (p(l) + p(u)) when cushion u > l; all but the
/// last divided by (sf, sf^3, sf^5), sf = 1 + safety; then l <- p(l), u <- 2 - l. The returned schedule
/// normalizes by (1 + safety) ||X||_F + 1e-6, as the reference does.
/// optimal_composition(1e-3, 5, 0.02, 0.02) reproduces schedules::PolarExpress to 1e-12.
inline NsSchedule optimal_composition(double l, int steps, double safety = 0.02, double cushion = 0.02) {
  constexpr const char* where = "matopt::polar_express::optimal_composition";
  if (!(l > 0 && l < 1)) detail::fail(where, "l must be in (0, 1) (got ", l, ")");
  if (steps < 1) detail::fail(where, "steps must be >= 1 (got ", steps, ")");
  detail::require_nonnegative(where, "safety", safety);
  if (!(cushion >= 0 && cushion < 1)) detail::fail(where, "cushion must be in [0, 1) (got ", cushion, ")");
  const double sf = 1 + safety;
  NsSchedule out{{}, steps, sf, 1e-6};
  double u = 1;
  for (int k = 0; k < steps; ++k) {
    NsCoefficients p = optimal_quintic(std::max(l, cushion * u), u);
    if (cushion * u > l) {
      const double rescale = 2 / (p(l) + p(u));
      p = {p.a * rescale, p.b * rescale, p.c * rescale};
    }
    if (k + 1 < steps) p = {p.a / sf, p.b / (sf * sf * sf), p.c / std::pow(sf, 5)};
    out.coefficients.push_back(p);
    l = p(l);
    u = 2 - l;
  }
  return out;
}

}  // namespace polar_express

/// CANS: Newton–Schulz schedules of odd cubics, each the best approximation of 1 on the current interval
/// (Chebyshev alternation, closed form).
namespace cans {

/// The odd cubic best approximating 1 on [l, u] (CANS): alpha = sqrt(3 / (u^2 + l u + l^2)),
/// beta = 4 / (2 + l u (l + u) alpha^3), coefficients (1.5 alpha beta, -0.5 alpha^3 beta, 0).
inline NsCoefficients optimal_cubic(double l, double u) {
  if (!(l > 0 && l <= u && std::isfinite(u)))
    detail::fail("matopt::cans::optimal_cubic", "need 0 < l <= u (got l = ", l, ", u = ", u, ")");
  const double alpha = std::sqrt(3 / (u * u + l * u + l * l));
  const double a3 = alpha * alpha * alpha;
  const double beta = 4 / (2 + l * u * (l + u) * a3);
  return {1.5 * alpha * beta, -0.5 * a3 * beta, 0.0};
}

/// A schedule of `steps` CANS cubics for singular values in [l, u]: after each step the interval becomes
/// the image [min p, max p] of the previous one (the maximum is beta, at x = 1/alpha, when inside).
inline NsSchedule composition(double l, double u, int steps) {
  constexpr const char* where = "matopt::cans::composition";
  if (steps < 1) detail::fail(where, "steps must be >= 1 (got ", steps, ")");
  NsSchedule out{{}, steps, 1.0, 1e-7};
  for (int k = 0; k < steps; ++k) {
    const NsCoefficients p = optimal_cubic(l, u);
    out.coefficients.push_back(p);
    const double x_max = std::sqrt(-p.a / (3 * p.b));  // p'(x) = 0
    const double lo = std::min(p(l), p(u));
    const double hi = (x_max > l && x_max < u) ? p(x_max) : std::max(p(l), p(u));
    l = lo;
    u = hi;
  }
  return out;
}

}  // namespace cans
}  // namespace matopt

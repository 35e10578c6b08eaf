// SPDX-License-Identifier: MIT
// Newton–Schulz schedules and generators against the published numbers of docs/math.md#coefficient-schedules.
#include <cmath>
#include <stdexcept>

#include <doctest/doctest.h>

#include <matopt/precondition/generators.hpp>
#include <matopt/precondition/schedule.hpp>

using namespace matopt;

namespace {
/// min and max of the scalar response over [lo, hi] (dense log and linear grids).
std::pair<double, double> response_range(const NsSchedule& s, double lo, double hi, double input_scale = 1) {
  double mn = 1e300, mx = -1e300;
  const int n = 100000;
  for (int i = 0; i <= n; ++i) {
    for (double x : {lo * std::pow(hi / lo, double(i) / n), lo + (hi - lo) * double(i) / n}) {
      const double y = s.response(x * input_scale);
      mn = std::min(mn, y);
      mx = std::max(mx, y);
    }
  }
  return {mn, mx};
}
}  // namespace

TEST_CASE("Jordan NS5: published scalar responses (KellerJordan/Muon)") {
  const NsSchedule j = schedules::Jordan::schedule();
  CHECK(j.steps == 5);
  CHECK(j.response(1.0, 1) == doctest::Approx(0.701).epsilon(1e-12));
  // Published to three decimals: allow half a unit of the last digit.
  const std::pair<double, double> published[] = {{1e-4, 0.048}, {1e-3, 0.471}, {1e-2, 0.699},
                                                 {0.1, 0.712},  {0.5, 0.765},  {1.0, 0.696}};
  for (const auto& xy : published) {
    const auto x = xy.first;
    const auto y = xy.second;
    CAPTURE(x);
    CHECK(std::abs(j.response(x) - y) <= 5e-4);
  }
  const auto [mn, mx] = response_range(j, 0.01, 1.0);
  CHECK(mn >= 0.68);
  CHECK(mx <= 1.14);
}

TEST_CASE("PolarExpress 5-step band (arXiv 2505.16932)") {
  const NsSchedule p = schedules::PolarExpress::schedule();
  CHECK(p.safety == 1.02);
  CHECK(p.eps == 1e-6);
  const auto [mn, mx] = response_range(p, 1e-3, 1.0);
  CHECK(mn >= 0.859 - 5e-4);
  CHECK(mx <= 1.141 + 5e-4);
  const auto [mn2, mx2] = response_range(p, 1e-3, 1.0, 1 / 1.02);
  CHECK(mn2 >= 0.847 - 5e-4);
  CHECK(mx2 <= 1.141 + 5e-4);
  CHECK(mn2 <= 0.847 + 5e-4);  // the band is tight, not just contained
}

TEST_CASE("polar_express::optimal_composition reproduces the published table to 1e-12") {
  const NsSchedule gen = polar_express::optimal_composition(1e-3, 5, 0.02, 0.02);
  const NsSchedule ref = schedules::PolarExpress::schedule();
  REQUIRE(gen.coefficients.size() == ref.coefficients.size());
  for (std::size_t k = 0; k < ref.coefficients.size(); ++k) {
    CAPTURE(k);
    CHECK(std::abs(gen.coefficients[k].a - ref.coefficients[k].a) <= 1e-12);
    CHECK(std::abs(gen.coefficients[k].b - ref.coefficients[k].b) <= 1e-12);
    CHECK(std::abs(gen.coefficients[k].c - ref.coefficients[k].c) <= 1e-12);
  }
  CHECK(gen.safety == doctest::Approx(1.02));
}

TEST_CASE("optimal_quintic equioscillates (Remez) and beats the fixed-point quintic") {
  for (const auto& lu : {std::pair{0.01, 1.0}, std::pair{0.2, 1.0}, std::pair{0.05, 0.7}}) {
    const auto l = lu.first;
    const auto u = lu.second;
    CAPTURE(l);
    const NsCoefficients p = polar_express::optimal_quintic(l, u);
    // Extrema of p - 1 on [l, u]: the ends and the two interior critical points.
    const double disc = std::sqrt(9 * p.b * p.b - 20 * p.a * p.c);
    const double q = std::sqrt((-3 * p.b - disc) / (10 * p.c)), r = std::sqrt((-3 * p.b + disc) / (10 * p.c));
    const double e = 1 - p(l);
    CHECK(e > 0);
    CHECK(p(q) - 1 == doctest::Approx(e).epsilon(1e-9));
    CHECK(1 - p(r) == doctest::Approx(e).epsilon(1e-9));
    CHECK(p(u) - 1 == doctest::Approx(e).epsilon(1e-9));
    double worst = 0;
    for (int i = 0; i <= 10000; ++i) worst = std::max(worst, std::abs(1 - p(l + (u - l) * i / 10000.0)));
    CHECK(worst <= e * (1 + 1e-9));
  }
}

TEST_CASE("CANS cubic: Chebyshev alternation on [l, u]") {
  for (const auto& lu : {std::pair{0.01, 1.0}, std::pair{0.3, 1.2}}) {
    const auto l = lu.first;
    const auto u = lu.second;
    const NsCoefficients p = cans::optimal_cubic(l, u);
    CHECK(p.c == 0);
    const double x_star = std::sqrt(-p.a / (3 * p.b));
    const double e = 1 - p(l);
    CHECK(1 - p(u) == doctest::Approx(e).epsilon(1e-12));
    CHECK(p(x_star) - 1 == doctest::Approx(e).epsilon(1e-12));
  }
  // Composed, it drives every singular value in [l, 1] to 1.
  const NsSchedule s = cans::composition(1e-3, 1.0, 12);
  const auto [mn, mx] = response_range(s, 1e-3, 1.0);
  CHECK(mn > 1 - 1e-6);
  CHECK(mx < 1 + 1e-6);
}

TEST_CASE("classic cubic and quintic schedules converge to 1") {
  for (NsSchedule s : {schedules::Cubic::schedule(), schedules::QuinticFixedPoint::schedule()}) {
    s.steps = 40;
    const auto [mn, mx] = response_range(s, 0.01, 1.0);
    CHECK(mn == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(mx == doctest::Approx(1.0).epsilon(1e-12));
  }
  const NsSchedule y = schedules::You::schedule();
  CHECK(y.coefficients.size() == 5);
  CHECK(y.at(7).a == y.at(4).a);  // the last step repeats
}

TEST_CASE("schedule errors name the parameter") {
  CHECK_THROWS_WITH_AS(schedules::by_name("newton"), doctest::Contains("unknown NS schedule 'newton'"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(polar_express::optimal_composition(0.0, 5), doctest::Contains("l must be in (0, 1)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(polar_express::optimal_composition(1e-3, 0), doctest::Contains("steps must be >= 1"),
                       std::invalid_argument);
  CHECK_THROWS_AS(cans::optimal_cubic(0.5, 0.1), std::invalid_argument);
  NsSchedule s = schedules::Jordan::schedule();
  s.steps = 0;
  CHECK_THROWS_WITH_AS(s.validate("where"), doctest::Contains("NS steps must be >= 1 (got 0)"),
                       std::invalid_argument);
  s = schedules::Jordan::schedule();
  s.coefficients.clear();
  CHECK_THROWS_WITH_AS(s.validate("where"), doctest::Contains("no coefficients"), std::invalid_argument);
  s = schedules::Jordan::schedule();
  s.safety = -1;
  CHECK_THROWS_WITH_AS(s.validate("where"), doctest::Contains("NS safety"), std::invalid_argument);
}

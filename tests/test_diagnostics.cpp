// SPDX-License-Identifier: MIT
// Diagnostics (docs/math.md#diagnostics) against independent references: a direct O(m^2 n) loop for diagonal dominance,
// Eigen's JacobiSVD and constructed spectra U = Q1 diag(s) Q2^T for the spectral measurements, the
// published Jordan NS5 threshold, and a constructed least-squares problem for the exact-polar stable step.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>

#include <Eigen/SVD>
#include <matopt/diagnostics.hpp>

#include "test_support.hpp"

using namespace matopt;
using namespace matopt::test;

namespace {

/// Spec §6 written out directly: P_ij = sum_k U_ik U_jk over every (i, j), then the per-row statistics.
DiagonalDominance dominance_reference(const Eigen::MatrixXd& u) {
  const Index m = u.rows(), n = u.cols();
  DiagonalDominance d;
  d.size = m;
  if (m < 2) return d;
  Eigen::MatrixXd p(m, m);
  for (Index i = 0; i < m; ++i)
    for (Index j = 0; j < m; ++j) {
      double s = 0;
      for (Index k = 0; k < n; ++k) s += u(i, k) * u(j, k);
      p(i, j) = s;
    }
  d.r_min = d.ratio_to_max_min = d.gershgorin_min = d.gershgorin_relative_min = 1e300;
  d.r_max = -1e300;
  for (Index i = 0; i < m; ++i) {
    double sum = 0, mx = 0;
    for (Index j = 0; j < m; ++j)
      if (j != i) {
        sum += std::abs(p(i, j));
        mx = std::max(mx, std::abs(p(i, j)));
      }
    const double r = std::abs(p(i, i)) / (sum / double(m - 1) + 1e-10);
    const double rm = p(i, i) / (mx + 1e-10);
    d.r_min = std::min(d.r_min, r);
    d.r_max = std::max(d.r_max, r);
    d.r_avg += r / double(m);
    d.ratio_to_max_min = std::min(d.ratio_to_max_min, rm);
    d.ratio_to_max_avg += rm / double(m);
    d.gershgorin_min = std::min(d.gershgorin_min, p(i, i) - sum);
    d.gershgorin_relative_min = std::min(d.gershgorin_relative_min, p(i, i) > 0 ? (p(i, i) - sum) / p(i, i) : 0.0);
  }
  return d;
}

void check_close(double got, double want, double rel) {
  CHECK(std::abs(got - want) <= rel * std::max(1.0, std::abs(want)));
}

void check_dominance(const DiagonalDominance& got, const DiagonalDominance& want, double rel) {
  CHECK(got.size == want.size);
  check_close(got.r_min, want.r_min, rel);
  check_close(got.r_avg, want.r_avg, rel);
  check_close(got.r_max, want.r_max, rel);
  check_close(got.ratio_to_max_min, want.ratio_to_max_min, rel);
  check_close(got.ratio_to_max_avg, want.ratio_to_max_avg, rel);
  check_close(got.gershgorin_min, want.gershgorin_min, rel);
  check_close(got.gershgorin_relative_min, want.gershgorin_relative_min, rel);
}

/// m x n matrix with the given singular values (min(m, n) of them): Q1 diag(s) Q2^T.
Eigen::MatrixXd with_spectrum(Index m, Index n, const Eigen::VectorXd& s, unsigned seed) {
  const Index r = std::min(m, n);
  REQUIRE(s.size() == r);
  return random_orthonormal(m, r, seed) * s.asDiagonal() * random_orthonormal(n, r, seed + 100).transpose();
}

/// Singular values of u, ascending, from JacobiSVD in double.
template <class M>
Eigen::VectorXd jacobi_singular_values(const M& u) {
  const Eigen::MatrixXd x = u.template cast<double>();
  Eigen::VectorXd s = Eigen::JacobiSVD<Eigen::MatrixXd>(x).singularValues();
  std::reverse(s.data(), s.data() + s.size());
  return s;
}

/// Runs f with the matrix in both storage orders.
template <class T, class F>
void both_orders(const Eigen::MatrixXd& u, F&& f) {
  const RowMat<T> row = u.cast<T>();
  const ColMat<T> col = u.cast<T>();
  f(row);
  f(col);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Diagonal dominance

TEST_CASE_TEMPLATE("diagonal_dominance matches a direct O(m^2 n) loop (diag)", T, float, double) {
  for (const auto& mn : {std::pair<Index, Index>{7, 12}, {12, 7}, {2, 3}, {9, 9}}) {
    const auto m = mn.first;
    const auto n = mn.second;
    CAPTURE(m);
    CAPTURE(n);
    // Values stored in T first, so the reference sees exactly what the function sees.
    const Eigen::MatrixXd u = randn(m, n, unsigned(10 * m + n)).template cast<T>().template cast<double>();
    const DiagonalDominance want = dominance_reference(u);
    const DiagonalDominance want_short = dominance_reference(n < m ? Eigen::MatrixXd(u.transpose()) : u);
    both_orders<T>(u, [&](const auto& x) {
      // Default: products of T in double are exact; only the sums round.
      check_dominance(diagonal_dominance(x), want, 1e-12);
      const DiagonalDominance s = diagonal_dominance(x, GramSide::Short);
      check_dominance(s, want_short, 1e-12);
      CHECK(s.side == (n < m ? GramSide::Short : GramSide::Rows));
      // Accumulating in the input's own precision, allocation-free after reserve.
      DiagonalDominanceWorkspace<T> ws;
      ws.template reserve<T>(m, n);
      const std::size_t bytes = ws.bytes();
      CHECK(bytes == sizeof(T) * std::size_t(m * m + 2 * m));  // no widened copy for T input
      check_dominance(diagonal_dominance(x, ws), want, 100 * tol<T>());
      CHECK(ws.bytes() == bytes);  // nothing grew
      // A double workspace for T input holds the widened copy too.
      DiagonalDominanceWorkspace<double> wd;
      wd.template reserve<T>(m, n, GramSide::Short);
      const std::size_t k = std::size_t(std::min(m, n));
      CHECK(wd.bytes() == sizeof(double) * (k * k + 2 * k + (std::is_same_v<T, double> ? 0 : std::size_t(m * n))));
      check_dominance(diagonal_dominance(x, wd, GramSide::Short), want_short, 1e-12);
    });
  }
}

TEST_CASE("diagonal_dominance: closed forms, zero and degenerate inputs (diag)") {
  // All-ones m x n: P = n 11^T, so r_i = n / (n + 1e-10), ratio-to-max = n / (n + 1e-10), margin n (2 - m).
  const Eigen::MatrixXd ones = Eigen::MatrixXd::Ones(5, 3);
  const DiagonalDominance d = diagonal_dominance(ones);
  CHECK(d.size == 5);
  CHECK(d.r_min == doctest::Approx(3 / (3 + 1e-10)).epsilon(1e-14));
  CHECK(d.r_max == doctest::Approx(3 / (3 + 1e-10)).epsilon(1e-14));
  CHECK(d.ratio_to_max_avg == doctest::Approx(3 / (3 + 1e-10)).epsilon(1e-14));
  CHECK(d.gershgorin_min == doctest::Approx(3.0 * (2 - 5)));
  CHECK(d.gershgorin_relative_min == doctest::Approx(2.0 - 5));
  // Orthogonal rows: P diagonal, so the margin is P_ii and r_i is huge (the 1e-10 guard keeps it finite).
  const Eigen::MatrixXd q = random_orthonormal(9, 4, 5).transpose() * 3.0;  // 4 x 9, rows orthogonal
  const DiagonalDominance o = diagonal_dominance(q);
  CHECK(std::isfinite(o.r_max));
  CHECK(o.r_min > 1e8);
  CHECK(o.gershgorin_relative_min == doctest::Approx(1.0).epsilon(1e-12));
  // m < 2 gives zeros (docs/math.md#diagnostics), a zero matrix gives zero ratios, never NaN.
  const DiagonalDominance one = diagonal_dominance(Eigen::MatrixXd::Ones(1, 6));
  CHECK(one.size == 1);
  CHECK(one.r_min == 0);
  CHECK(one.r_max == 0);
  CHECK(one.gershgorin_min == 0);
  CHECK(diagonal_dominance(Eigen::MatrixXd(0, 4)).r_avg == 0);
  const DiagonalDominance z = diagonal_dominance(Eigen::MatrixXf::Zero(4, 3));
  CHECK(z.r_max == 0);
  CHECK(z.gershgorin_relative_min == 0);
  // The short side of a 6 x 1 column is 1 x 1: zeros.
  CHECK(diagonal_dominance(Eigen::MatrixXd::Ones(6, 1), GramSide::Short).size == 1);
  // Through a MatrixView, in either layout.
  RowMat<float> w = randn<RowMat<float>>(6, 4, 3);
  const Eigen::MatrixXd wd = w.cast<double>();
  check_dominance(diagonal_dominance(view(w)), dominance_reference(wd), 1e-12);
  // The relative Gershgorin margin is 1 - (m - 1) / r_i up to the guard.
  const Eigen::MatrixXd u = randn(6, 40, 8);
  const DiagonalDominance du = diagonal_dominance(u);
  CHECK(du.gershgorin_relative_min == doctest::Approx(1 - 5 / du.r_min).epsilon(1e-9));
}

TEST_CASE("model-wide averages r̄_min, r̄_avg, r̄_max (diag)") {
  std::vector<DiagonalDominance> all;
  for (unsigned seed = 1; seed <= 3; ++seed) all.push_back(diagonal_dominance(randn(8, 20, seed)));
  all.push_back(diagonal_dominance(randn(1, 20, 9)));  // side 1: skipped
  const DiagonalDominanceMean mean = mean_diagonal_dominance(all);
  CHECK(mean.matrices == 3);
  CHECK(mean.skipped == 1);
  CHECK(mean.r_min == doctest::Approx((all[0].r_min + all[1].r_min + all[2].r_min) / 3));
  CHECK(mean.r_avg == doctest::Approx((all[0].r_avg + all[1].r_avg + all[2].r_avg) / 3));
  CHECK(mean.r_max == doctest::Approx((all[0].r_max + all[1].r_max + all[2].r_max) / 3));
  DiagonalDominanceAccumulator acc;
  acc.add(all[0]);
  CHECK(acc.mean().r_avg == all[0].r_avg);
  acc.reset();
  CHECK(acc.mean().matrices == 0);
}

// ---------------------------------------------------------------------------------------------------------
// Singular-value quantiles

TEST_CASE("sample_quantiles: numpy's linear interpolation (diag)") {
  const std::vector<double> v{3, 1, 2, 4};
  // numpy.quantile([1, 2, 3, 4], [0, 0.25, 0.5, 1/3, 1]) = [1, 1.75, 2.5, 2, 4]
  const std::vector<double> q = sample_quantiles(v, {0, 0.25, 0.5, 1.0 / 3, 1});
  CHECK(q[0] == 1);
  CHECK(q[1] == doctest::Approx(1.75));
  CHECK(q[2] == doctest::Approx(2.5));
  CHECK(q[3] == doctest::Approx(2.0));
  CHECK(q[4] == 4);
  CHECK(sample_quantiles({5.0}, {0.3})[0] == 5);
}

TEST_CASE_TEMPLATE("singular_value_quantiles: constructed spectra and JacobiSVD (diag)", T, float, double) {
  // Constructed: singular values 1, 2, 3, 4 (scaled by 7): normalized by sqrt(30).
  const Eigen::MatrixXd u = with_spectrum(4, 9, Eigen::Vector4d(7, 14, 21, 28), 3);
  both_orders<T>(u, [&](const auto& x) {
    const std::vector<double> q = singular_value_quantiles(x, {0, 0.25, 0.5, 1});
    const double f = 1 / std::sqrt(30.0);
    CHECK(q[0] == doctest::Approx(1 * f).epsilon(100 * tol<T>()));
    CHECK(q[1] == doctest::Approx(1.75 * f).epsilon(100 * tol<T>()));
    CHECK(q[2] == doctest::Approx(2.5 * f).epsilon(100 * tol<T>()));
    CHECK(q[3] == doctest::Approx(4 * f).epsilon(100 * tol<T>()));
  });
  // Random tall and wide matrices against JacobiSVD computed here.
  for (const auto& mn : {std::pair<Index, Index>{13, 6}, {6, 13}}) {
    const auto m = mn.first;
    const auto n = mn.second;
    const Eigen::MatrixXd r = randn(m, n, unsigned(m * n)).template cast<T>().template cast<double>();
    Eigen::VectorXd s = jacobi_singular_values(r);
    s /= r.norm();
    const std::vector<double> ps{0, 0.1, 0.37, 0.5, 0.9, 1};
    const std::vector<double> want = sample_quantiles(std::vector<double>(s.data(), s.data() + s.size()), ps);
    both_orders<T>(r, [&](const auto& x) {
      const std::vector<double> got = singular_value_quantiles(x, ps);
      for (std::size_t i = 0; i < ps.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-10));
      const Eigen::VectorXd all = normalized_singular_values(x);
      CHECK(all.size() == std::min(m, n));
      CHECK(all.squaredNorm() == doctest::Approx(1.0).epsilon(1e-12));
      CHECK(all(0) <= all(all.size() - 1));  // ascending
    });
  }
  // A zero matrix: all quantiles 0.
  CHECK(singular_value_quantiles(Eigen::MatrixXd::Zero(3, 5), {0.5})[0] == 0);
}

// ---------------------------------------------------------------------------------------------------------
// Newton–Schulz response, failure threshold, planner, power law

TEST_CASE("Jordan failure threshold: 1.07e-3 at tau 0.5, k 5, each extra step divides it by ~3.4445 (diag)") {
  const NsSchedule j = schedules::Jordan::schedule();
  const double t5 = ns_failure_threshold(j, 0.5);
  CHECK(std::abs(t5 - 1.07e-3) <= 5e-6);  // docs/math.md#diagnostics, published to three figures
  CHECK(j.response(t5) == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(j.response(t5 * (1 - 1e-9)) < 0.5);
  CHECK(ns_failure_threshold(j, 0.5, 5) == t5);
  double prev = t5;
  for (int k = 6; k <= 9; ++k) {
    const double t = ns_failure_threshold(j, 0.5, k);
    CAPTURE(k);
    CHECK(prev / t == doctest::Approx(3.4445).epsilon(1e-4));  // p(s) ~ a s near 0
    prev = t;
  }
  // The first step's threshold solves 3.4445 s - 4.7750 s^3 + 2.0315 s^5 = 0.5 directly.
  const double t1 = ns_failure_threshold(j, 0.5, 1);
  CHECK(3.4445 * t1 - 4.7750 * std::pow(t1, 3) + 2.0315 * std::pow(t1, 5) == doctest::Approx(0.5).epsilon(1e-13));
  // Never reached: Jordan's five steps stay below 1.2 on (0, 1].
  CHECK(std::isinf(ns_failure_threshold(j, 2.0)));
}

TEST_CASE("failure thresholds of every schedule are the smallest sigma reaching tau (diag)") {
  const NsSchedule all[] = {schedules::Jordan::schedule(), schedules::You::schedule(),
                            schedules::PolarExpress::schedule(), schedules::Cubic::schedule(),
                            schedules::QuinticFixedPoint::schedule(),
                            polar_express::optimal_composition(1e-4, 6)};
  for (const NsSchedule& s : all) {
    for (double tau : {0.5, 0.9}) {
      for (int k = 1; k <= 8; ++k) {
        CAPTURE(tau);
        CAPTURE(k);
        const double t = ns_failure_threshold(s, tau, k);
        REQUIRE(std::isfinite(t));
        CHECK(s.response(t, k) >= tau);
        CHECK(s.response(t, k) == doctest::Approx(tau).epsilon(1e-9));
        // Dense independent scan below t: nothing reaches tau.
        bool below = true;
        for (int i = 0; i < 4000; ++i) below = below && s.response(t * double(i) / 4000, k) < tau;
        CHECK(below);
      }
    }
  }
  // The response table against the scalar maps composed here from math.md's table of You's coefficients (the
  // last one repeating past the fifth step, as the Polar Express reference does).
  const double you[5][3] = {{4.0848, -6.8946, 2.9270},
                            {3.9505, -6.3029, 2.6377},
                            {3.7418, -5.5913, 2.3037},
                            {2.8769, -3.1427, 1.2046},
                            {2.8366, -3.0525, 1.2012}};
  const std::vector<double> sig{1e-4, 1e-2, 0.5, 1};
  const Eigen::MatrixXd tab = ns_response_table(schedules::You::schedule(), sig, 7);
  CHECK(tab.rows() == 4);
  CHECK(tab.cols() == 7);
  for (Index i = 0; i < 4; ++i) {
    double x = sig[std::size_t(i)];
    for (int k = 1; k <= 7; ++k) {
      const double* c = you[std::min(k, 5) - 1];
      x = c[0] * x + c[1] * x * x * x + c[2] * x * x * x * x * x;
      CHECK(tab(i, k - 1) == doctest::Approx(x).epsilon(1e-14));
    }
  }
}

TEST_CASE("plan_ns_steps: fewest steps whose threshold lies below the tracked quantile (diag)") {
  // A spectrum whose smallest normalized singular value is q exactly: q, then 9 equal values.
  auto matrix_with_min = [](double q) {
    Eigen::VectorXd s(10);
    s(0) = q;
    s.tail(9).setConstant(std::sqrt((1 - q * q) / 9));
    return with_spectrum(10, 30, 4 * s, 17);  // any scale: quantiles normalize
  };
  const NsSchedule jordan = schedules::Jordan::schedule();
  // Jordan thresholds at tau 0.5: 4.36e-2 (2 steps), 1.27e-2 (3), 3.68e-3 (4), 1.07e-3 (5), 3.10e-4 (6).
  const std::pair<double, int> cases[] = {{0.05, 2}, {0.02, 3}, {2e-3, 5}, {1e-3, 6}, {5e-4, 6}, {2e-4, 7}};
  for (const auto& qminwant : cases) {
    const auto qmin = qminwant.first;
    const auto want = qminwant.second;
    CAPTURE(qmin);
    const double q = singular_value_quantiles(matrix_with_min(qmin), {0.0})[0];
    CHECK(q == doctest::Approx(qmin).epsilon(1e-9));
    const NsPlan plan = plan_ns_steps(jordan, q);
    CHECK(plan.reached);
    CHECK(plan.steps == want);
    CHECK(plan.schedule.steps == want);
    CHECK(plan.threshold <= q);
    CHECK(ns_failure_threshold(jordan, 0.5, want - 1) > q);  // one step fewer does not reach
    CHECK(plan.schedule.response(q) >= 0.5);
  }
  // PolarExpress normalizes by 1.02 ||X||_F: the quantile enters NS as q / 1.02.
  const NsPlan pe = plan_ns_steps(schedules::PolarExpress::schedule(), 1e-3);
  CHECK(pe.input == doctest::Approx(1e-3 / 1.02));
  CHECK(pe.steps == 5);
  // Not enough steps allowed.
  NsPlanOptions few;
  few.max_steps = 4;
  const NsPlan short_plan = plan_ns_steps(jordan, 1e-3, few);
  CHECK_FALSE(short_plan.reached);
  CHECK(short_plan.steps == 4);
  // A higher band needs more steps.
  NsPlanOptions high;
  high.tau = 0.9;
  CHECK(plan_ns_steps(jordan, 2e-3, high).steps == 6);
  // Generated Polar Express for l = q: the returned schedule is optimal_composition(q, K) and lifts q.
  NsPlanOptions gen;
  gen.generate = true;
  for (double q : {1e-2, 1e-3, 1e-5}) {
    CAPTURE(q);
    const NsPlan g = plan_ns_steps(jordan, q, gen);
    CHECK(g.reached);
    const NsSchedule ref = polar_express::optimal_composition(q, g.steps);
    REQUIRE(g.schedule.coefficients.size() == ref.coefficients.size());
    CHECK(g.schedule.coefficients.back().a == ref.coefficients.back().a);
    CHECK(g.schedule.safety == doctest::Approx(1.02));
    CHECK(g.schedule.response(q / 1.02) >= 0.5);
    if (g.steps > 1) {
      const NsSchedule fewer = polar_express::optimal_composition(q, g.steps - 1);
      CHECK(ns_failure_threshold(fewer, 0.5) > q / 1.02);
    }
    CHECK(g.steps <= plan_ns_steps(jordan, q).steps);  // tuned coefficients never need more steps here
  }
}

TEST_CASE("power law q(M) = q_ref (M / M_ref)^(-alpha) (diag)") {
  CHECK(extrapolate_quantile(0.01, 1e8, 1e9, 0.5) == doctest::Approx(0.01 / std::sqrt(10.0)).epsilon(1e-14));
  CHECK(extrapolate_quantile(0.01, 1e8, 1e8, 0.96) == doctest::Approx(0.01));
  // Exact data: recovered exactly, zero standard error.
  const std::vector<double> sizes{77e6, 300e6, 1e9, 2.8e9};
  std::vector<double> q;
  for (double m : sizes) q.push_back(0.02 * std::pow(m / 77e6, -0.25));
  const PowerLaw law = fit_power_law(sizes, q);
  CHECK(law.alpha == doctest::Approx(0.25).epsilon(1e-12));
  CHECK(law.alpha_stderr <= 1e-12);
  CHECK(law(77e6) == doctest::Approx(0.02).epsilon(1e-12));
  CHECK(law(1e12) == doctest::Approx(0.02 * std::pow(1e12 / 77e6, -0.25)).epsilon(1e-12));
  // Noisy data: a positive standard error; two points: NaN.
  q[1] *= 1.1;
  CHECK(fit_power_law(sizes, q).alpha_stderr > 0);
  CHECK(std::isnan(fit_power_law({1.0, 2.0}, {1.0, 0.5}).alpha_stderr));
  CHECK(fit_power_law({1.0, 2.0}, {1.0, 0.5}).alpha == doctest::Approx(1.0));
}

// ---------------------------------------------------------------------------------------------------------
// Orthogonality residual, spectral flatness, stable step

TEST_CASE_TEMPLATE("orthogonality_residual: constructed spectra and JacobiSVD (diag)", T, float, double) {
  const double t_tol = std::is_same_v<T, float> ? 1e-5 : 1e-8;  // sqrt(eigenvalue) precision (see header)
  const Eigen::VectorXd s = Eigen::VectorXd::LinSpaced(6, 0.7, 1.12);
  const double want_gram = std::sqrt((s.array().square() - 1).square().sum() / 6);
  for (const auto& mn : {std::pair<Index, Index>{6, 11}, {11, 6}}) {
    const auto m = mn.first;
    const auto n = mn.second;
    const Eigen::MatrixXd o = with_spectrum(m, n, s, 31);
    both_orders<T>(o, [&](const auto& x) {
      const OrthogonalityResidual r = orthogonality_residual(x);
      CHECK(r.sigma_min == doctest::Approx(0.7).epsilon(t_tol));
      CHECK(r.sigma_max == doctest::Approx(1.12).epsilon(t_tol));
      CHECK(r.gram == doctest::Approx(want_gram).epsilon(10 * tol<T>()));
    });
  }
  // A random matrix against JacobiSVD; an orthonormal one has zero residual.
  const Eigen::MatrixXd g = randn(9, 5, 4).template cast<T>().template cast<double>();
  const Eigen::VectorXd js = jacobi_singular_values(g);
  const OrthogonalityResidual rg = orthogonality_residual(g.cast<T>());
  CHECK(rg.sigma_min == doctest::Approx(js(0)).epsilon(1e-8));
  CHECK(rg.sigma_max == doctest::Approx(js(4)).epsilon(1e-8));
  CHECK(rg.gram == doctest::Approx(std::sqrt((js.array().square() - 1).square().sum() / 5)).epsilon(1e-10));
  const OrthogonalityResidual ro = orthogonality_residual(random_orthonormal(12, 5, 2).cast<T>());
  CHECK(ro.gram <= 10 * tol<T>());
  CHECK(ro.sigma_min == doctest::Approx(1.0).epsilon(t_tol));
}

TEST_CASE_TEMPLATE("spectral_flatness: mean / max singular value and 2 ||G||_* / rank (diag)", T, float, double) {
  Eigen::VectorXd s(5);
  s << 3.0, 1.0, 0.5, 0.25, 0.25;
  const Eigen::MatrixXd g = with_spectrum(5, 8, s, 41);
  both_orders<T>(g, [&](const auto& x) {
    const SpectralFlatness f = spectral_flatness(x);
    CHECK(f.rank == 5);
    CHECK(f.sigma_max == doctest::Approx(3.0).epsilon(100 * tol<T>()));
    CHECK(f.nuclear == doctest::Approx(5.0).epsilon(100 * tol<T>()));
    CHECK(f.sigma_mean == doctest::Approx(1.0).epsilon(100 * tol<T>()));
    CHECK(f.flatness == doctest::Approx(1.0 / 3).epsilon(100 * tol<T>()));
    CHECK(f.stable_lr_bound == doctest::Approx(2.0).epsilon(100 * tol<T>()));
  });
  // Rank 2 of a 7 x 4: the bound averages over the rank, not over min(m, n).
  const Eigen::MatrixXd low = random_orthonormal(7, 2, 1) * Eigen::Vector2d(2, 1).asDiagonal() *
                              random_orthonormal(4, 2, 2).transpose();
  const SpectralFlatness fl = spectral_flatness(low.cast<T>());
  CHECK(fl.rank == 2);
  CHECK(fl.stable_lr_bound == doctest::Approx(3.0).epsilon(100 * tol<T>()));
  // G = 0: nothing moves, any step is stable.
  const SpectralFlatness fz = spectral_flatness(Eigen::Matrix<T, 3, 4>::Zero());
  CHECK(fz.rank == 0);
  CHECK(fz.flatness == 0);
  CHECK(std::isinf(fz.stable_lr_bound));
}

namespace {
/// The exact polar factor by JacobiSVD (independent of the library's ExactPolar).
Eigen::MatrixXd polar(const Eigen::MatrixXd& g) {
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(g, Eigen::ComputeThinU | Eigen::ComputeThinV);
  return svd.matrixU() * svd.matrixV().transpose();
}
double loss(const Eigen::MatrixXd& w, const Eigen::MatrixXd& w_star) { return 0.5 * (w - w_star).squaredNorm(); }
}  // namespace

TEST_CASE("exact-polar step on 1/2 ||W - W*||^2: the 2 ||G||_* / rank bound, measured (diag)") {
  // W* random, W0 = W* + E0 with a spread spectrum; G = W - W*.
  const Index m = 12, n = 8;
  const Eigen::MatrixXd w_star = randn(m, n, 5);
  Eigen::VectorXd s0(8);
  s0 << 3.0, 2.2, 1.5, 1.0, 0.6, 0.3, 0.15, 0.05;
  const Eigen::MatrixXd w0 = w_star + with_spectrum(m, n, s0, 6);
  const double bound = spectral_flatness(w0 - w_star).stable_lr_bound;
  CHECK(bound == doctest::Approx(2 * s0.sum() / 8).epsilon(1e-12));

  SUBCASE("one step decreases the loss iff eta < bound (each s_i -> |s_i - eta|)") {
    for (double c : {0.5, 0.99, 1.01, 1.5}) {
      CAPTURE(c);
      const double eta = c * bound;
      const Eigen::MatrixXd w1 = w0 - eta * polar(w0 - w_star);
      const double want = 0.5 * (s0.array() - eta).square().sum();
      CHECK(loss(w1, w_star) == doctest::Approx(want).epsilon(1e-10));
      CHECK((loss(w1, w_star) < loss(w0, w_star)) == (c < 1));
    }
  }

  SUBCASE("a fixed eta neither converges nor diverges, on either side of the bound: a 2-cycle in [0, eta]") {
    // The stated claim read as "iterate with fixed eta: converge below, diverge above" does not hold:
    // s -> |s - eta| shrinks every singular value into [0, eta] and then alternates s, eta - s.
    for (double c : {0.5, 0.99, 1.01, 3.0}) {
      CAPTURE(c);
      const double eta = c * bound;
      Eigen::MatrixXd w = w0;
      std::vector<double> losses;
      for (int t = 0; t < 200; ++t) {
        w -= eta * polar(w - w_star);
        losses.push_back(loss(w, w_star));
      }
      const Eigen::VectorXd sv = jacobi_singular_values(w - w_star);
      CHECK(sv.maxCoeff() <= eta * (1 + 1e-9));                    // bounded: no divergence
      CHECK(losses.back() == doctest::Approx(losses[losses.size() - 3]).epsilon(1e-8));  // period 2
      CHECK(losses.back() > 1e-3 * loss(w0, w_star));               // and no convergence
    }
  }

  SUBCASE("eta_t = c * 2 ||G_t||_* / rank_t re-measured each step: converges for c < 1, diverges for c > 1") {
    // Loss ratio per step: 1 - 4c(1 - c) ||G||_*^2 / (rank ||G||_F^2), < 1 iff c < 1 (Cauchy-Schwarz).
    for (double c : {0.9, 0.99, 1.01, 1.1}) {
      CAPTURE(c);
      Eigen::MatrixXd w = w0;
      for (int t = 0; t < 6000; ++t) {
        const Eigen::MatrixXd g = w - w_star;
        const double eta = c * spectral_flatness(g).stable_lr_bound;
        const double before = loss(w, w_star);
        w -= eta * polar(g);
        const double after = loss(w, w_star);
        if (c < 1) REQUIRE(after < before);
        if (c > 1) REQUIRE(after > before);
        if (after < 1e-20 * loss(w0, w_star) || after > 1e20 * loss(w0, w_star)) break;
      }
      const double ratio = loss(w, w_star) / loss(w0, w_star);
      if (c < 1) CHECK(ratio < 1e-8);
      if (c > 1) CHECK(ratio > 1e8);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Errors

TEST_CASE("diagnostics reject invalid arguments, naming the parameter and shape (diag)") {
  const Eigen::MatrixXd u = randn(4, 6, 1);
  CHECK_THROWS_WITH_AS(singular_value_quantiles(u, {0.5, 1.5}), doctest::Contains("p[1] must be in [0, 1] (got 1.5)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(singular_value_quantiles(u, {-0.1}), doctest::Contains("p[0] must be in [0, 1]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(singular_value_quantiles(u, {}), doctest::Contains("empty"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(singular_value_quantiles(Eigen::MatrixXd(0, 3), {0.5}),
                       doctest::Contains("U must be non-empty (got 0x3)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(orthogonality_residual(Eigen::MatrixXf(2, 0)), doctest::Contains("O must be non-empty (got 2x0)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(spectral_flatness(Eigen::MatrixXd(0, 0)), doctest::Contains("G must be non-empty (got 0x0)"),
                       std::invalid_argument);
  CHECK_THROWS_AS(sample_quantiles({}, {0.5}), std::invalid_argument);
  CHECK_THROWS_AS(sample_quantiles({1.0, std::nan("")}, {0.5}), std::invalid_argument);

  const NsSchedule j = schedules::Jordan::schedule();
  CHECK_THROWS_WITH_AS(ns_failure_threshold(j, 0.0), doctest::Contains("tau must be finite and > 0 (got 0)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ns_failure_threshold(j, -1.0), doctest::Contains("tau"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ns_failure_threshold(j, 0.5, 0), doctest::Contains("steps must be >= 1"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ns_failure_threshold(j, 0.5, 5, 0.0), doctest::Contains("sigma_hi"), std::invalid_argument);
  NsSchedule empty = j;
  empty.coefficients.clear();
  CHECK_THROWS_WITH_AS(ns_failure_threshold(empty, 0.5), doctest::Contains("no coefficients"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ns_response_table(j, {0.1}, 0), doctest::Contains("max_steps must be >= 1"),
                       std::invalid_argument);

  CHECK_THROWS_WITH_AS(plan_ns_steps(j, 0.0), doctest::Contains("quantile must be in (0, 1] (got 0)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(plan_ns_steps(j, 1.5), doctest::Contains("quantile"), std::invalid_argument);
  NsPlanOptions bad;
  bad.tau = 0;
  CHECK_THROWS_WITH_AS(plan_ns_steps(j, 0.1, bad), doctest::Contains("tau"), std::invalid_argument);
  bad = {};
  bad.max_steps = 0;
  CHECK_THROWS_WITH_AS(plan_ns_steps(j, 0.1, bad), doctest::Contains("max_steps"), std::invalid_argument);

  CHECK_THROWS_WITH_AS(extrapolate_quantile(-1, 1, 1, 0.5), doctest::Contains("q_ref"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(extrapolate_quantile(0.1, 0, 1, 0.5), doctest::Contains("m_ref"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(extrapolate_quantile(0.1, 1, 1, std::nan("")), doctest::Contains("alpha"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(fit_power_law({1, 2, 3}, {1, 2}), doctest::Contains("differ in length (3 vs 2)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(fit_power_law({2, 2}, {1, 2}), doctest::Contains("all sizes are equal"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(fit_power_law({1, 2}, {1, -2}), doctest::Contains("value must be finite and > 0"),
                       std::invalid_argument);
}

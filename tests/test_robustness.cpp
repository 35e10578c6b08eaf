// SPDX-License-Identifier: MIT
// Numerical robustness (issue: reliability): norms without overflow or underflow at extreme magnitudes,
// denormals, the documented results for zero rows and zero matrices, and property tests over random
// shapes, storage orders, scalar types and hyperparameters.

#include <array>
#include <cmath>
#include <limits>
#include <random>

#include <doctest/doctest.h>

#include <matopt/matopt.hpp>

#include "test_support.hpp"

using namespace matopt;
using matopt::test::precondition;
using matopt::test::randn;
using matopt::test::rel_error;
using matopt::test::tol;

namespace {

/// Huge and tiny scales that overflow or underflow a plain sum of squares of T.
template <class T>
std::vector<double> extreme_scales() {
  if constexpr (std::is_same_v<T, float>) return {1e30, 1e-25};
  else return {1e200, 1e-200};
}

/// The update direction of an optimizer step with lr 1, zero momentum buffer, unit scale: W_before - W_after.
template <class Opt, class M>
M direction_of_step(Opt& opt, const M& g) {
  M w = M::Zero(g.rows(), g.cols());
  auto st = opt.make_state(w);
  opt.step(w, g, st);
  return -w;
}

}  // namespace

TEST_CASE_TEMPLATE("row and column norms at extreme magnitudes: unit rows/columns, no inf, no NaN", T, float,
                   double) {
  using M = Eigen::Matrix<T, -1, -1>;
  for (double scale : extreme_scales<T>()) {
    CAPTURE(scale);
    const M u = (randn(7, 11, 1) * scale).cast<T>();
    detail::NormalizeOptions o;
    o.eps = double(std::numeric_limits<T>::min());  // so that tiny norms are not floored
    const M rows = precondition<RowNormalize, T>(u, o);
    const M cols = precondition<ColNormalize, T>(u, o);
    REQUIRE(rows.allFinite());
    REQUIRE(cols.allFinite());
    for (Index i = 0; i < u.rows(); ++i) CHECK(double(rows.row(i).norm()) == doctest::Approx(1.0).epsilon(1e-5));
    for (Index j = 0; j < u.cols(); ++j) CHECK(double(cols.col(j).norm()) == doctest::Approx(1.0).epsilon(1e-5));

    // The fused one-pass steps, both storage orders and both kernel shapes (along and across).
    auto check_fused = [&](auto opt, auto layout_tag, bool by_rows) {
      using L = decltype(layout_tag);
      opt.options().lr = T(1);
      opt.options().momentum = T(0);  // U = G
      opt.options().precondition.eps = o.eps;
      const L g = u;
      const L d = direction_of_step(opt, g);
      REQUIRE(d.allFinite());
      const double s = std::max(1.0, by_rows ? double(u.rows()) / double(u.cols()) : double(u.cols()) / double(u.rows()));
      if (by_rows)
        for (Index i = 0; i < u.rows(); ++i) CHECK(double(d.row(i).norm()) == doctest::Approx(std::sqrt(s)).epsilon(1e-5));
      else
        for (Index j = 0; j < u.cols(); ++j) CHECK(double(d.col(j).norm()) == doctest::Approx(std::sqrt(s)).epsilon(1e-5));
    };
    check_fused(RMNP<T>{}, RowMatrix<T>{}, true);
    check_fused(RMNP<T>{}, ColMatrix<T>{}, true);
    check_fused(ColNorm<T>{}, RowMatrix<T>{}, false);
    check_fused(ColNorm<T>{}, ColMatrix<T>{}, false);
  }
}

TEST_CASE_TEMPLATE("Newton-Schulz and trust ratios are scale invariant up to extreme magnitudes", T, float, double) {
  using M = Eigen::Matrix<T, -1, -1>;
  const M u = randn(6, 9, 2).template cast<T>();
  const M base = precondition<Orthogonalize<>, T>(u);
  const double huge = extreme_scales<T>()[0], tiny = extreme_scales<T>()[1];
  const M d_huge = precondition<Orthogonalize<>, T>(M((u.template cast<double>() * huge).template cast<T>()));
  REQUIRE(d_huge.allFinite());
  CHECK(rel_error(d_huge, base) < 1e-4);
  // Far below NS eps (1e-7, as the reference implementations): X = U / (||U|| + eps) ~ U / eps, so the
  // output is tiny, not orthogonal (documented in docs/reliability.md); finite, never NaN.
  const M d_tiny = precondition<Orthogonalize<>, T>(M((u.template cast<double>() * tiny).template cast<T>()));
  CHECK(d_tiny.allFinite());
  CHECK(double(d_tiny.norm()) < 1e-3);
  // OrScale: W and G both huge -> ratio finite, update finite.
  OrScale<T> opt;
  M w = (randn(6, 9, 3) * huge).template cast<T>();
  auto st = opt.make_state(w);
  opt.step(w, M((randn(6, 9, 4) * huge).template cast<T>()), st);
  CHECK(w.allFinite());
  CHECK(std::isfinite(double(st.scaling.last_ratio)));
}

TEST_CASE("denormal gradients give finite steps") {
  using M = RowMatrix<float>;
  const float denormal = std::numeric_limits<float>::denorm_min() * 1000;
  const M g = M::Constant(5, 8, denormal);
  for (int which = 0; which < 3; ++which) {
    M w = randn<M>(5, 8, 1);
    auto run = [&](auto opt) {
      auto st = opt.make_state(w);
      opt.step(w, g, st);
      opt.step(w, g, st);
    };
    if (which == 0) run(Muon<float>{});
    if (which == 1) run(RMNP<float>{});
    if (which == 2) run(OrScale<float>{});
    CHECK(w.allFinite());
  }
}

TEST_CASE_TEMPLATE("documented results: zero rows give zero update rows, a zero gradient leaves W unchanged", T,
                   float, double) {
  using M = RowMatrix<T>;
  M g = randn<M>(6, 5, 1);
  g.row(2).setZero();
  RMNP<T> rmnp;
  const M d = direction_of_step(rmnp, g);
  CHECK(d.row(2).isZero(0));
  CHECK(d.allFinite());
  ColNorm<T> colnorm;
  M gc = randn<M>(6, 5, 2);
  gc.col(3).setZero();
  const M dc = direction_of_step(colnorm, gc);
  CHECK(dc.col(3).isZero(0));
  {
    M w = randn<M>(6, 5, 3);
    const M w0 = w;
    Muon<T> muon;
    auto st = muon.make_state(w);
    muon.step(w, M(M::Zero(6, 5)), st);  // NS of zero is zero (eps in the normalization)
    CHECK(w == w0);
    OrScale<T> orscale;
    auto so = orscale.make_state(w);
    orscale.step(w, M(M::Zero(6, 5)), so);
    CHECK(w == w0);
  }
}

TEST_CASE("property tests: random shapes, orders, types and hyperparameters") {
  std::mt19937 gen(12345);
  auto uniform = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(gen); };
  auto shape = [&] { return Index(std::uniform_int_distribution<int>(1, 24)(gen)); };

  for (int trial = 0; trial < 40; ++trial) {
    const Index m = shape(), n = shape();
    CAPTURE(m);
    CAPTURE(n);
    const Eigen::MatrixXd u = randn(m, n, unsigned(trial + 1));
    const double alpha = std::pow(10.0, uniform(-3, 3));
    // Scale invariance of the preconditioned direction, and unit norms.
    const Eigen::MatrixXd r1 = precondition<RowNormalize, double>(u), r2 = precondition<RowNormalize, double>(
                                                                          Eigen::MatrixXd(alpha * u));
    CHECK(rel_error(r2, r1) < 1e-12);
    for (Index i = 0; i < m; ++i) CHECK(r1.row(i).norm() == doctest::Approx(1.0));
    const Eigen::MatrixXd c1 = precondition<ColNormalize, double>(u), c2 = precondition<ColNormalize, double>(
                                                                          Eigen::MatrixXd(alpha * u));
    CHECK(rel_error(c2, c1) < 1e-12);
    for (Index j = 0; j < n; ++j) CHECK(c1.col(j).norm() == doctest::Approx(1.0));
    const Eigen::MatrixXf o1 = precondition<Orthogonalize<>, float>(Eigen::MatrixXf(u.cast<float>()));
    const Eigen::MatrixXf o2 = precondition<Orthogonalize<>, float>(Eigen::MatrixXf((alpha * u).cast<float>()));
    CHECK(rel_error(o2, o1) < 1e-4);

    // Finite outputs of every preset for random hyperparameters, both orders, both types.
    auto steps = [&](auto opt, auto w) {
      using W = decltype(w);
      opt.options().lr = decltype(opt.options().lr)(std::pow(10.0, uniform(-4, -0.5)));
      opt.options().weight_decay = decltype(opt.options().lr)(uniform(0, 0.2));
      opt.options().nesterov = uniform(0, 1) < 0.5;
      auto st = opt.make_state(w);
      for (int k = 0; k < 3; ++k) opt.step(w, W(randn(m, n, unsigned(100 * trial + k)).template cast<typename W::Scalar>()), st);
      CHECK(w.allFinite());
    };
    const RowMatrix<float> wf = randn(m, n, unsigned(trial + 7)).cast<float>();
    const ColMatrix<double> wd = randn(m, n, unsigned(trial + 7));
    steps(Muon<float>{}, wf);
    steps(RMNP<float>{}, wf);
    steps(ColNorm<double>{}, wd);
    steps(OrScale<double>{}, wd);
    steps(MoonlightMuon<double>{}, wd);
  }
}

namespace {
/// The scalar map of `steps` Newton–Schulz steps with coefficients `c` (the last one repeating), composed here
/// from the table of docs/math.md#coefficient-schedules rather than taken from the library's schedules.
double ns_scalar_map(const std::vector<std::array<double, 3>>& c, double x, int steps) {
  for (int k = 0; k < steps; ++k) {
    const auto& abc = c[std::size_t(std::min<int>(k, int(c.size()) - 1))];
    x = abc[0] * x + abc[1] * x * x * x + abc[2] * x * x * x * x * x;
  }
  return x;
}

template <class T, class M>
void check_one_row_or_column(Index m, Index n) {
  CAPTURE(m);
  CAPTURE(n);
  const M u = randn<Eigen::MatrixXd>(m, n, 17).cast<T>();
  const double norm = u.template cast<double>().norm();
  const Eigen::MatrixXd unit = u.template cast<double>() / norm;
  const Eigen::MatrixXd sign = u.template cast<double>().array().sign().matrix();
  const double eps = std::numeric_limits<T>::epsilon();
  // RowNormalize: a unit row (1 x n), sign(U) (n x 1); ColNormalize the other way round (docs/reliability.md).
  const Eigen::MatrixXd row = precondition<RowNormalize, T>(u).template cast<double>();
  const Eigen::MatrixXd col = precondition<ColNormalize, T>(u).template cast<double>();
  CHECK(rel_error(row, m == 1 ? unit : sign) <= 4 * eps);
  CHECK(rel_error(col, n == 1 ? unit : sign) <= 4 * eps);
  // Exact polar: U / ||U||.
  CHECK(rel_error(precondition<Orthogonalize<ExactPolar>, T>(u).template cast<double>(), unit) <= 16 * eps);
  // Newton–Schulz: rho U / ||U|| with rho the scalar map of the one singular value ||U|| / (kappa ||U|| + eps):
  // 0.696 for Jordan's NS5, 0.904 for Polar Express, plain and Gram alike.
  const std::vector<std::array<double, 3>> jordan = {{3.4445, -4.7750, 2.0315}};
  const std::vector<std::array<double, 3>> polar_express = {
      {8.156554524902461, -22.48329292557795, 15.878769915207462},
      {4.042929935166739, -2.808917465908714, 0.5000178451051316},
      {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
      {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
      {2.3465413258596377, -1.7097828382687081, 0.42323551169305323}};
  const double rho_j = ns_scalar_map(jordan, norm / (norm + 1e-7), 5);
  const double rho_pe = ns_scalar_map(polar_express, norm / (1.02 * norm + 1e-6), 5);
  CHECK(rho_j == doctest::Approx(0.696).epsilon(1e-3));
  CHECK(rho_pe == doctest::Approx(0.904).epsilon(1e-3));
  for (const NsVariant v : {NsVariant::Plain, NsVariant::Gram}) {
    CAPTURE(int(v));
    typename Orthogonalize<NewtonSchulz<schedules::Jordan>>::Options oj;
    oj.variant = v;
    typename Orthogonalize<NewtonSchulz<schedules::PolarExpress>>::Options ope;
    ope.variant = v;
    // float: five steps of rounding of the one singular value (and the Gram form's squared one); Polar Express's
    // first step (slope 8.2, c = 15.9) amplifies it most (measured 2.4e-5).
    const bool f = std::is_same_v<T, float>;
    CHECK(rel_error(precondition<Orthogonalize<NewtonSchulz<schedules::Jordan>>, T>(u, oj).template cast<double>(),
                    (rho_j * unit).eval()) <= (f ? 2e-6 : 1e-14));
    CHECK(rel_error(
              precondition<Orthogonalize<NewtonSchulz<schedules::PolarExpress>>, T>(u, ope).template cast<double>(),
              (rho_pe * unit).eval()) <= (f ? 5e-5 : 5e-14));
  }
}
}  // namespace

TEST_CASE_TEMPLATE("documented results on one row and one column (docs/reliability.md's table)", T, float, double) {
  check_one_row_or_column<T, matopt::test::RowMat<T>>(1, 7);
  check_one_row_or_column<T, matopt::test::ColMat<T>>(1, 7);
  check_one_row_or_column<T, matopt::test::RowMat<T>>(7, 1);
  check_one_row_or_column<T, matopt::test::ColMat<T>>(7, 1);
  check_one_row_or_column<T, matopt::test::RowMat<T>>(1, 2);  // two entries
}

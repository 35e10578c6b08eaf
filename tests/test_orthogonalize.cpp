// SPDX-License-Identifier: MIT
// Orthogonalize against independent references: the closed-form polar factor Q1 Q2^T of
// U = Q1 diag(sigma) Q2^T, and Eigen's SVD.
#include <doctest/doctest.h>

#include <Eigen/SVD>
#include <matopt/precondition/exact_polar.hpp>
#include <matopt/precondition/orthogonalize.hpp>

#include "test_support.hpp"

using namespace matopt;
using namespace matopt::test;

namespace {
/// U (m x n) with singular values evenly spaced in [smin, 1] and its exact polar factor.
struct Constructed {
  Eigen::MatrixXd u, polar;
};
Constructed constructed(Index m, Index n, double smin, unsigned seed) {
  const Index r = std::min(m, n);
  const Eigen::MatrixXd q1 = random_orthonormal(m, r, seed), q2 = random_orthonormal(n, r, seed + 1);
  const Eigen::VectorXd s = Eigen::VectorXd::LinSpaced(r, smin, 1.0);
  return {q1 * s.asDiagonal() * q2.transpose(), q1 * q2.transpose()};
}
}  // namespace

TEST_CASE_TEMPLATE("many cubic / quintic NS steps converge to the exact polar factor", T, float, double) {
  for (const auto& mn : {std::pair<Index, Index>{12, 7}, {7, 12}, {9, 9}}) {
    const auto m = mn.first;
    const auto n = mn.second;
    CAPTURE(m);
    CAPTURE(n);
    const Constructed c = constructed(m, n, 0.2, 7);
    for (NsSchedule s : {schedules::Cubic::schedule(), schedules::QuinticFixedPoint::schedule()}) {
      s.steps = 40;
      using P = Orthogonalize<NewtonSchulz<>>;
      P::Options o;
      o.schedule = s;
      const auto d = precondition<P, T>(c.u.cast<T>(), o);
      CHECK(rel_error(d, c.polar) <= 10 * tol<T>());
    }
  }
}

TEST_CASE_TEMPLATE("ExactPolar equals U V^T of the SVD, zero singular values map to zero", T, float, double) {
  const Constructed c = constructed(10, 6, 0.05, 11);
  const auto d = precondition<Orthogonalize<ExactPolar>, T>(c.u.cast<T>());
  CHECK(rel_error(d, c.polar) <= 10 * tol<T>());
  // Rank 2: the result is the partial isometry Q1 Q2^T of the range.
  const Eigen::MatrixXd q1 = random_orthonormal(8, 2, 3), q2 = random_orthonormal(5, 2, 4);
  const Eigen::MatrixXd low = q1 * Eigen::Vector2d(2.0, 0.5).asDiagonal() * q2.transpose();
  const auto dl = precondition<Orthogonalize<ExactPolar>, T>(low.cast<T>());
  CHECK(rel_error(dl, q1 * q2.transpose()) <= 10 * tol<T>());
}

TEST_CASE_TEMPLATE("Jordan NS5 maps singular values into the published band and keeps singular vectors", T,
                   float, double) {
  // Polar factor error is only in the singular values: D = Q1 diag(p(sigma / ||U||_F)) Q2^T.
  const Index m = 16, n = 24;
  const Eigen::MatrixXd q1 = random_orthonormal(m, m, 21), q2 = random_orthonormal(n, m, 22);
  Eigen::VectorXd s = Eigen::VectorXd::LinSpaced(m, 0.05, 1.0);
  const Eigen::MatrixXd u = q1 * s.asDiagonal() * q2.transpose();
  const NsSchedule j = schedules::Jordan::schedule();
  const double fro = s.norm();
  Eigen::VectorXd expected(m);
  for (Index i = 0; i < m; ++i) expected(i) = j.response(s(i) / (fro + j.eps));
  const Eigen::MatrixXd want = q1 * expected.asDiagonal() * q2.transpose();
  using P = Orthogonalize<NewtonSchulz<schedules::Jordan>>;
  const auto d = precondition<P, T>(u.cast<T>());
  CHECK(rel_error(d, want) <= 20 * tol<T>());
  const Eigen::VectorXd sv = Eigen::JacobiSVD<Eigen::MatrixXd>(d.template cast<double>()).singularValues();
  CHECK(sv.minCoeff() >= 0.68 - 1e-4);
  CHECK(sv.maxCoeff() <= 1.14 + 1e-4);
}

TEST_CASE_TEMPLATE("Gram Newton–Schulz equals plain Newton–Schulz", T, float, double) {
  for (const auto& mn : {std::pair<Index, Index>{8, 40}, {40, 8}, {12, 12}}) {
    const auto m = mn.first;
    const auto n = mn.second;
    CAPTURE(m);
    CAPTURE(n);
    const auto u = randn<Eigen::MatrixXd>(m, n, 5).template cast<T>().eval();
    for (NsSchedule s : {schedules::Jordan::schedule(), schedules::PolarExpress::schedule()}) {
      using P = Orthogonalize<NewtonSchulz<>>;
      P::Options o;
      o.schedule = s;
      o.variant = NsVariant::Plain;
      const auto plain = precondition<P, T>(u, o);
      o.variant = NsVariant::Gram;
      const auto gram = precondition<P, T>(u, o);
      CHECK(rel_error(gram, plain) <= (std::is_same_v<T, float> ? 1e-4 : 1e-10));
      o.restarts.clear();
      const auto gram_no_restart = precondition<P, T>(u, o);
      CHECK(rel_error(gram_no_restart, plain) <= (std::is_same_v<T, float> ? 1e-3 : 1e-9));
      // Auto picks Gram exactly for the strongly rectangular shape (s >= 4 r).
      o.restarts = {2};
      o.variant = NsVariant::Auto;
      const bool rectangular = std::max(m, n) >= 4 * std::min(m, n);
      CHECK(rel_error(precondition<P, T>(u, o), rectangular ? gram : plain) == 0);
    }
  }
}

TEST_CASE_TEMPLATE("Orthogonalize: tall input is transposed, storage order does not matter", T, float, double) {
  const Eigen::MatrixXd u = randn(14, 6, 9);
  using P = Orthogonalize<NewtonSchulz<>>;
  const auto tall = precondition<P, T>(u.cast<T>());
  const auto wide = precondition<P, T>(u.transpose().cast<T>());
  CHECK(rel_error(tall, wide.transpose()) <= tol<T>());
  const RowMat<T> row_major = u.cast<T>();
  const auto from_row = precondition<P, T>(row_major);
  CHECK(rel_error(from_row, tall) <= tol<T>());
  // Scale invariance: orthogonalization ignores the magnitude of U, up to the normalizing eps
  // (1e-7 against ||U||_F ~ 9 here).
  const auto scaled = precondition<P, T>((T(1e3) * u.cast<T>()).eval());
  CHECK(rel_error(scaled, tall) <= (std::is_same_v<T, float> ? 1e-5 : 1e-7));
  // The zero matrix gives zero, not NaN.
  const auto zero = precondition<P, T>(Eigen::Matrix<T, -1, -1>::Zero(5, 3).eval());
  CHECK(zero.allFinite());
  CHECK(zero.norm() == 0);
}

TEST_CASE("Orthogonalize of a single row is u / ||u||") {
  const Eigen::RowVectorXd u = randn(1, 9, 3);
  using P = Orthogonalize<ExactPolar>;
  CHECK(rel_error(precondition<P, double>(u), u / u.norm()) <= 1e-12);
  const Eigen::VectorXd col = u.transpose();
  CHECK(rel_error(precondition<P, double>(col), col / col.norm()) <= 1e-12);
}

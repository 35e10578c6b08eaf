// SPDX-License-Identifier: MIT
// Orthogonalize against independent references: the closed-form polar factor Q1 Q2^T of
// U = Q1 diag(sigma) Q2^T, and Eigen's SVD.
#include <doctest/doctest.h>

#include <Eigen/SVD>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <matopt/core/detail/bf16_engine.hpp>
#include <matopt/core/detail/engine.hpp>
#include <matopt/facade/any_optimizer.hpp>
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

// ---- ns_dtype = bfloat16: products with bfloat16 operands and float accumulation (oneDNN) ----------------------

namespace {
/// x rounded to bfloat16 (8 significant bits), round to nearest even: written here from frexp / nearbyint, not
/// from the library's bit manipulation.
double bf16_round(double x) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e;
  const double f = std::frexp(x, &e);  // |f| in [0.5, 1)
  return std::ldexp(std::nearbyint(std::ldexp(f, 8)), e - 8);
}
/// One step of Muon from W0 with gradient G under ns_dtype = dtype; returns W1 - W0.
template <class T, class M>
Eigen::Matrix<T, -1, -1> muon_update(const M& w0, const M& g, const char* dtype) {
  auto opt = make_optimizer<T>("muon", {{"ns_dtype", dtype}});
  M w = w0;
  auto state = opt.make_state(view(w));
  opt.step(view(w), view(g), state);
  return (w - w0).template cast<T>();
}
}  // namespace

TEST_CASE("bfloat16 rounding: nearest, ties to even, from float and from double") {
  for (double x : {1.0, -3.14159, 1e-30, 6.5e37, 1.0 + 1.0 / 256, 1.0 + 3.0 / 256, 1.0 + 1.0 / 256 + 1e-12,
                   -(1.0 + 1.0 / 256 - 1e-12), 255.5, 0.0}) {
    CAPTURE(x);
    CHECK(detail::from_bfloat16(detail::to_bfloat16(x)) == bf16_round(x));
    CHECK(detail::from_bfloat16(detail::to_bfloat16(float(x))) == bf16_round(double(float(x))));
  }
  CHECK(std::isnan(detail::from_bfloat16(detail::to_bfloat16(std::nan("")))));
  CHECK(std::isinf(detail::from_bfloat16(detail::to_bfloat16(-std::numeric_limits<float>::infinity()))));
}

#if defined(MATOPT_HAS_ONEDNN)
TEST_CASE_TEMPLATE("bfloat16 products equal the exact product of the rounded operands within float accumulation", T,
                   float, double) {
  if (!detail::onednn_bf16_available()) {  // an AVX2-only CPU: the refusal is tested below instead
    MESSAGE("oneDNN has no bfloat16 matmul for this CPU: bfloat16 products not run here");
    return;
  }
  // Reference: operands rounded by bf16_round, products summed in double (exact for 8-bit significands up to
  // rounding 2^-53); bound per element (k + 1) 2^-24 sum_l |a_il| |b_lj| (float accumulation over k terms, then
  // the result in T).
  auto check_product = [](const Eigen::MatrixXd& got, const Eigen::MatrixXd& a, const Eigen::MatrixXd& b) {
    const Eigen::MatrixXd ar = a.unaryExpr(&bf16_round), br = b.unaryExpr(&bf16_round);
    const Eigen::MatrixXd ref = ar * br;
    const Eigen::MatrixXd bound = double(a.cols() + 1) * std::ldexp(1.0, -24) * (ar.cwiseAbs() * br.cwiseAbs());
    CHECK(((got - ref).cwiseAbs().array() <= bound.array()).all());
    CHECK(got.allFinite());
  };
  for (const auto& shape : {std::array<Index, 3>{7, 33, 5}, {40, 17, 40}, {16, 16, 16}, {3, 300, 9}}) {
    const Index m = shape[0], k = shape[1], n = shape[2];  // named: the lambda below captures them
    CAPTURE(m);
    CAPTURE(k);
    CAPTURE(n);
    const Eigen::MatrixXd a = randn(m, k, 5), b = randn(k, n, 6);
    detail::Bf16Scratch scratch;
    scratch.reserve(std::max({m * k, k * n, m * m}), std::max(m * n, m * m));
    auto both_orders = [&](auto order_tag) {
      constexpr int Order = decltype(order_tag)::value;
      detail::Bf16HostEngine e(scratch);  // an engine per run: it keeps roundings of the matrices it reads
      using Mat = Eigen::Matrix<T, -1, -1, Order>;
      Mat am = a.cast<T>(), bm = b.cast<T>(), c = Mat::Constant(m, n, T(7)), s = Mat::Zero(m, m);
      detail::DenseMap<T, Order> amap(am.data(), m, k), bmap(bm.data(), k, n), cmap(c.data(), m, n),
          smap(s.data(), m, m);
      e.gemm(T(1), amap, bmap, T(0), cmap);  // beta = 0: C's 7s not read
      check_product(c.template cast<double>(), a.cast<T>().template cast<double>(),
                    b.cast<T>().template cast<double>());
      e.gemm(T(2), amap, bmap, T(-1), cmap);  // C <- 2 A B - C = A B within twice the bound
      check_product((c / T(1)).template cast<double>(), a.cast<T>().template cast<double>(),
                    b.cast<T>().template cast<double>());
      e.syrk_lower(T(1), amap, T(0), smap);
      const Eigen::MatrixXd lower = s.template cast<double>().template triangularView<Eigen::Lower>();
      const Eigen::MatrixXd at = a.cast<T>().template cast<double>();
      const Eigen::MatrixXd ref = (at.unaryExpr(&bf16_round) * at.unaryExpr(&bf16_round).transpose());
      const Eigen::MatrixXd bound = double(k + 1) * std::ldexp(1.0, -24) *
                                    (at.unaryExpr(&bf16_round).cwiseAbs() * at.unaryExpr(&bf16_round).cwiseAbs().transpose());
      CHECK(((lower - Eigen::MatrixXd(ref.template triangularView<Eigen::Lower>())).cwiseAbs().array() <=
             bound.array())
                .all());
      // alpha and beta (oneDNN's output scale and sum for float): lower(S) <- 2 A A^T - lower(S), within twice the
      // product's bound plus the rounding of the sum in T
      const Eigen::MatrixXd before = s.template cast<double>();
      e.syrk_lower(T(2), amap, T(-1), smap);
      const Eigen::MatrixXd expected = 2 * ref - before;
      const Eigen::MatrixXd sum_bound =
          2 * bound + std::numeric_limits<T>::epsilon() * (2 * ref.cwiseAbs() + before.cwiseAbs());
      const Eigen::MatrixXd diff = (s.template cast<double>() - expected).cwiseAbs();
      CHECK((diff.template triangularView<Eigen::Lower>().toDenseMatrix().array() <= sum_bound.array()).all());
      // a rounding is reused only while its source is unchanged: A written through the engine is rounded again
      e.gemm(T(1), amap, bmap, T(0), cmap);
      e.scale(amap, T(2));
      e.gemm(T(1), amap, bmap, T(0), cmap);
      check_product(c.template cast<double>(), 2 * a.cast<T>().template cast<double>(),
                    b.cast<T>().template cast<double>());
    };
    both_orders(std::integral_constant<int, Eigen::ColMajor>{});
    both_orders(std::integral_constant<int, Eigen::RowMajor>{});
  }
}

TEST_CASE_TEMPLATE("bfloat16 Newton–Schulz: within 10% of float NS, largest singular value below 1.3, zero stays zero",
                   T, float, double) {
  if (!detail::onednn_bf16_available()) {  // an AVX2-only CPU: the refusal is tested below instead
    MESSAGE("oneDNN has no bfloat16 matmul for this CPU: bfloat16 products not run here");
    return;
  }
  // Measured (24x56 to 512x512, float and double, both orders): ||NS_bf16 - NS_f32||_F / ||NS_f32||_F from 1.3% to
  // 2.7% for the plain iteration, 2.4% to 2.7% for Gram on these rectangles, 7.5% for Gram forced on the square
  // 40x40 (which `auto` never picks); the largest singular value up to 1.28 against float's 1.2
  // (docs/math.md#newton-schulz-in-bfloat16). The storage order changes oneDNN's accumulation order, and the
  // operands' rounding carries that float rounding difference on: the orders agree to bfloat16 accuracy only.
  using P = Orthogonalize<NewtonSchulz<>>;
  for (const auto& shape : {std::pair<Index, Index>{24, 56}, {56, 24}, {40, 40}}) {
    const Index m = shape.first, n = shape.second;
    CAPTURE(m);
    CAPTURE(n);
    const Eigen::MatrixXd u = randn(m, n, 17);
    for (NsVariant variant : {NsVariant::Plain, NsVariant::Gram}) {
      P::Options f32, b16;
      f32.variant = b16.variant = variant;
      b16.dtype = NsDtype::BFloat16;
      const auto ref = precondition<P, T>(u.cast<T>().eval(), f32);
      const auto got = precondition<P, T>(u.cast<T>().eval(), b16);
      const RowMat<T> u_row = u.cast<T>();
      const auto got_row = precondition<P, T>(u_row, b16);
      CHECK(rel_error(got, ref) <= 0.1);
      CHECK(rel_error(got_row, ref) <= 0.1);
      const Eigen::VectorXd sv = Eigen::JacobiSVD<Eigen::MatrixXd>(got.template cast<double>()).singularValues();
      CHECK(sv.maxCoeff() <= 1.3);
    }
    const auto zero = precondition<P, T>(Eigen::Matrix<T, -1, -1>::Zero(m, n).eval(), [] {
      P::Options o;
      o.dtype = NsDtype::BFloat16;
      return o;
    }());
    CHECK(zero.norm() == 0);
  }
}

TEST_CASE_TEMPLATE("Muon with ns_dtype = bfloat16: one step within 10% of the float step", T, float, double) {
  if (!detail::onednn_bf16_available()) {  // an AVX2-only CPU: the refusal is tested below instead
    MESSAGE("oneDNN has no bfloat16 matmul for this CPU: bfloat16 products not run here");
    return;
  }
  for (const auto& shape : {std::pair<Index, Index>{32, 48}, {48, 32}, {32, 32}}) {
    const Index m = shape.first, n = shape.second;
    CAPTURE(m);
    CAPTURE(n);
    const ColMat<T> w0 = randn(m, n, 3).template cast<T>(), g = randn(m, n, 4).template cast<T>();
    const auto ref = muon_update<T>(w0, g, "float32");
    const auto got = muon_update<T>(w0, g, "bfloat16");
    CHECK(rel_error(got, ref) <= 0.1);
    const RowMat<T> w0r = w0, gr = g;
    CHECK(rel_error(muon_update<T>(w0r, gr, "bfloat16"), ref) <= 0.1);
  }
}
#endif

TEST_CASE("ns_dtype: a bad value, or bfloat16 without oneDNN or a bfloat16 matmul for the CPU, is refused with "
          "nothing changed") {
  auto opt = make_optimizer<double>("muon");
  ColMat<double> w = randn(6, 4, 1), g = randn(6, 4, 2);
  const ColMat<double> w0 = w;
  auto state = opt.make_state(view(w));
  CHECK_THROWS_WITH_AS(opt.set("ns_dtype", "float16"),
                       doctest::Contains("'ns_dtype': 'float16' is not one of float32, bfloat16"),
                       std::invalid_argument);
  if (!detail::kHasOneDnn)
    CHECK_THROWS_WITH_AS(opt.set("ns_dtype", "bfloat16"), doctest::Contains("needs oneDNN"),
                         std::invalid_argument);
#if defined(MATOPT_HAS_ONEDNN)
  // ctest runs this case again under ONEDNN_MAX_CPU_ISA=AVX2 (test "host: bfloat16 refused on an AVX2 CPU"), where
  // oneDNN 2.x has no bfloat16 matmul: the refusal is exercised on every machine.
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (isa != nullptr && std::string(isa) == "AVX2") CHECK_FALSE(detail::onednn_bf16_available());
  if (!detail::onednn_bf16_available())
    CHECK_THROWS_WITH_AS(opt.set("ns_dtype", "bfloat16"), doctest::Contains("no bfloat16 matmul for this CPU"),
                         std::invalid_argument);
#endif
  opt.step(view(w), view(g), state);  // the float step, as if nothing had been asked
  auto fresh = make_optimizer<double>("muon");
  ColMat<double> w2 = w0;
  auto s2 = fresh.make_state(view(w2));
  fresh.step(view(w2), view(g), s2);
  CHECK(w == w2);
}

TEST_CASE_TEMPLATE("host engine on strided views (the operations of policies written once over views): products, "
                   "combinations and line norms equal plain loops, every storage order and transpose",
                   T, float, double) {
  using detail::Strided;
  const T tol = std::numeric_limits<T>::epsilon() * 16;
  // A (m x k) and B (k x n) stored column-major or row-major, read as given or as the transpose of a stored k x m /
  // n x k matrix; C (m x n) in either order, beta 0 (C's NaNs not read) and beta 0.5; vectors among the shapes.
  const std::vector<std::array<Index, 3>> shapes{{5, 3, 4}, {5, 1, 4}, {1, 3, 1}, {4, 3, 1}, {1, 2, 5}};
  for (std::size_t run = 0; run < 32 * shapes.size(); ++run) {
    const Index m = shapes[run / 32][0], k = shapes[run / 32][1], n = shapes[run / 32][2];
    const int mask = int(run % 32);
    CAPTURE(m);
    CAPTURE(k);
    CAPTURE(n);
    CAPTURE(mask);
    const bool a_row = mask & 1, a_t = mask & 2, b_row = mask & 4, b_t = mask & 8, c_row = mask & 16;
    std::vector<T> as(m * k), bs(k * n), cs(m * n);
    for (std::size_t i = 0; i < as.size(); ++i) as[i] = T(std::sin(1.0 + double(i)));
    for (std::size_t i = 0; i < bs.size(); ++i) bs[i] = T(std::cos(2.0 + 0.7 * double(i)));
    const auto view = [](T* data, Index r, Index c, bool row, bool t) {
      const Strided<T> s = detail::strided(data, t ? c : r, t ? r : c, row ? Layout::RowMajor : Layout::ColMajor);
      return t ? s.t() : s;
    };
    const Strided<T> a = view(as.data(), m, k, a_row, a_t), b = view(bs.data(), k, n, b_row, b_t);
    const Strided<T> c = detail::strided(cs.data(), m, n, c_row ? Layout::RowMajor : Layout::ColMajor);
    for (const T beta : {T(0), T(0.5)}) {
      for (Index i = 0; i < m; ++i)
        for (Index j = 0; j < n; ++j) c(i, j) = beta == T(0) ? std::numeric_limits<T>::quiet_NaN() : T(i - j);
      detail::HostEngine::gemm(T(-1.5), a, b, beta, c);
      for (Index i = 0; i < m; ++i)
        for (Index j = 0; j < n; ++j) {
          double want = beta == T(0) ? 0.0 : 0.5 * double(i - j), size = std::abs(want);
          for (Index l = 0; l < k; ++l) {
            want += -1.5 * double(a(i, l)) * double(b(l, j));
            size += std::abs(1.5 * double(a(i, l)) * double(b(l, j)));
          }
          CHECK(std::abs(double(c(i, j)) - want) <= double(tol) * size);  // within a few roundings of each term
        }
    }
  }
  // out = a x + b y, copy, norm, and the squared norms and scaling of rows and columns, across storage orders.
  const Index m = 5, n = 4;
  std::vector<T> xs(m * n), ys(m * n), outs(m * n);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    xs[i] = T(double(i) - 7.0);
    ys[i] = T(0.25 * double(i));
  }
  const Strided<T> x = detail::strided(xs.data(), m, n, Layout::RowMajor);
  const Strided<T> y = detail::strided(ys.data(), m, n, Layout::ColMajor);
  const Strided<T> out = detail::strided(outs.data(), m, n, Layout::ColMajor);
  detail::HostEngine::combine(out, T(2), Strided<const T>(x), T(-4), Strided<const T>(y));
  double sumsq = 0;
  for (Index i = 0; i < m; ++i)
    for (Index j = 0; j < n; ++j) {
      CHECK(out(i, j) == T(2) * x(i, j) - T(4) * y(i, j));  // exact: small integers and quarters
      sumsq += double(out(i, j)) * double(out(i, j));
    }
  CHECK(std::abs(double(detail::HostEngine::norm(Strided<const T>(out))) - std::sqrt(sumsq)) <=
        double(tol) * std::sqrt(sumsq));
  for (const bool rows : {true, false}) {
    CAPTURE(rows);
    detail::HostEngine::copy(Strided<const T>(x), out);  // out (column-major) = x (row-major)
    std::vector<T> f(std::size_t(rows ? m : n));
    const Strided<T> lines = rows ? out : out.t();
    detail::HostEngine::row_squared_norms(Strided<const T>(lines), f.data());
    for (Index l = 0; l < Index(f.size()); ++l) {
      double want = 0;
      for (Index e = 0; e < (rows ? n : m); ++e) want += std::pow(double(rows ? x(l, e) : x(e, l)), 2);
      CHECK(double(f[std::size_t(l)]) == want);  // exact: sums of squares of small integers
      f[std::size_t(l)] = T(l + 1);
    }
    detail::HostEngine::scale_rows(lines, static_cast<const T*>(f.data()));
    for (Index i = 0; i < m; ++i)
      for (Index j = 0; j < n; ++j) CHECK(out(i, j) == x(i, j) * T(rows ? i + 1 : j + 1));
  }
}

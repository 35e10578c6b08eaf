// SPDX-License-Identifier: MIT
// What a step does around the math: the non-finite-gradient policy, telemetry, the spectral cap (math.md)
// and the adaptive Row/Orthogonalize preconditioner. References: exact SVD (Eigen's JacobiSVD), the
// presets stepped on a cleaned gradient, and direct computation of U and the update.

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <Eigen/SVD>
#include <doctest/doctest.h>

#include <matopt/matopt.hpp>

#include "test_support.hpp"

using namespace matopt;
using matopt::test::randn;
using matopt::test::RowMat;

namespace {

template <class M>
M with_bad_entries(M g) {
  using T = typename M::Scalar;
  g(0, 0) = std::numeric_limits<T>::quiet_NaN();
  g(g.rows() - 1, g.cols() - 1) = std::numeric_limits<T>::infinity();
  return g;
}
template <class M>
M cleaned(const M& g) {
  using T = typename M::Scalar;
  return g.unaryExpr([](T x) { return std::isfinite(x) ? x : T(0); });
}

}  // namespace

TEST_CASE_TEMPLATE("non-finite gradients: throw, skip and zero, for every preset and AdamW", T, float, double) {
  using M = RowMat<T>;
  auto check = [](auto make) {
    auto opt = make();
    CAPTURE(opt.name());
    M w = randn<M>(7, 5, 1);
    auto st = opt.make_state(w);
    opt.step(w, M(randn<M>(7, 5, 2)), st);
    const M bad = with_bad_entries(M(randn<M>(7, 5, 3)));
    const M w0 = w;
    const auto st0 = st;

    opt.options().non_finite = NonFinite::Throw;  // the default
    CHECK_THROWS_WITH_AS(opt.step(w, bad, st), doctest::Contains("non-finite"), std::invalid_argument);
    CHECK(w == w0);
    CHECK(st.steps == st0.steps);

    opt.options().non_finite = NonFinite::Skip;
    opt.step(w, bad, st);
    CHECK(w == w0);
    CHECK(st.steps == st0.steps);
    CHECK(st.skipped == 1);

    // Zero: exactly the step on G with its non-finite entries replaced by 0.
    auto ref_opt = make();
    M w_ref = w0;
    auto st_ref = st0;
    ref_opt.step(w_ref, cleaned(bad), st_ref);
    opt.options().non_finite = NonFinite::Zero;
    opt.step(w, bad, st);
    CHECK(w == w_ref);
    CHECK(st.steps == st_ref.steps);
    CHECK(st.zeroed == 1);
    CHECK(w.allFinite());
  };
  check([] { return Muon<T>{}; });
  check([] { return RMNP<T>{}; });  // the fused one-pass path
  check([] { return ColNorm<T>{}; });
  check([] { return OrScale<T>{}; });
  check([] { return AdamW<T>{}; });
}

TEST_CASE("non-finite policy in the batched step, the facade and the hybrid container") {
  using M = RowMat<float>;
  SUBCASE("batched: skip and zero per parameter, same as one by one") {
    Muon<float> batched, single;
    std::vector<M> w{randn<M>(8, 8, 1), randn<M>(300, 20, 2), randn<M>(8, 8, 3)};
    std::vector<M> g{randn<M>(8, 8, 4), with_bad_entries(randn<M>(300, 20, 5)), with_bad_entries(randn<M>(8, 8, 6))};
    std::vector<M> w_single = w;
    std::vector<Muon<float>::State> st, st_single;
    for (auto& x : w) st.push_back(batched.make_state(x));
    for (auto& x : w_single) st_single.push_back(single.make_state(x));
    batched.options().non_finite = single.options().non_finite = NonFinite::Zero;
    std::vector<MatrixView<float>> pv;
    std::vector<MatrixView<const float>> gv;
    for (std::size_t i = 0; i < w.size(); ++i) {
      pv.push_back(view(w[i]));
      gv.push_back(view(std::as_const(g[i])));
    }
    batched.step(pv, gv, st);
    for (std::size_t i = 0; i < w.size(); ++i) single.step(w_single[i], g[i], st_single[i]);
    for (std::size_t i = 0; i < w.size(); ++i) CHECK(w[i] == w_single[i]);
    CHECK(st[1].zeroed == 1);
    CHECK(st[0].zeroed == 0);

    batched.options().non_finite = NonFinite::Skip;
    const auto w_before = w;
    batched.step(pv, gv, st);
    CHECK(w[0] != w_before[0]);  // finite: stepped
    CHECK(w[1] == w_before[1]);
    CHECK(w[2] == w_before[2]);
    CHECK(st[1].skipped == 1);
    CHECK(st[0].skipped == 0);

    batched.options().non_finite = NonFinite::Throw;
    const auto w_throw = w;
    CHECK_THROWS_AS(batched.step(pv, gv, st), std::invalid_argument);
    for (std::size_t i = 0; i < w.size(); ++i) CHECK(w[i] == w_throw[i]);
  }
  SUBCASE("facade: non_finite key, counters on the erased state") {
    auto opt = make_optimizer<float>("rmnp", {{"non_finite", "skip"}});
    CHECK(opt.non_finite() == NonFinite::Skip);
    M w = randn<M>(4, 6, 1);
    const M g = with_bad_entries(randn<M>(4, 6, 2));
    auto st = opt.make_state(view(w));
    opt.step(view(w), view(g), st);
    CHECK(st.skipped() == 1);
    CHECK(st.steps() == 0);
    CHECK_THROWS_WITH_AS(make_optimizer<float>("muon", {{"non_finite", "ignore"}}),
                         doctest::Contains("'ignore' is not a non-finite policy (throw, skip, zero)"),
                         std::invalid_argument);
  }
  SUBCASE("hybrid: skip the whole model step, or zero per parameter") {
    M w1 = randn<M>(6, 5, 1), b = randn<M>(1, 5, 2);
    const M g1 = randn<M>(6, 5, 3), gb = with_bad_entries(randn<M>(1, 5, 4));
    HybridOptimizer<float> h(make_optimizer<float>("muon"));
    h.add("w1", view(w1));
    h.add("b", view(b));
    const M w1_0 = w1, b_0 = b;
    CHECK_THROWS_WITH_AS(h.step({view(g1), view(gb)}), doctest::Contains("gradient of 'b' (1x5) contains a non-finite"),
                         std::invalid_argument);
    h.options().non_finite = NonFinite::Skip;
    h.step({view(g1), view(gb)});
    CHECK(w1 == w1_0);  // the whole step is skipped, the finite parameter too
    CHECK(b == b_0);
    CHECK(h.skipped_steps() == 1);
    h.options().non_finite = NonFinite::Zero;
    h.step({view(g1), view(gb)});
    CHECK(w1 != w1_0);
    CHECK(b.allFinite());
    CHECK(b != b_0);
    CHECK(h.adamw().non_finite() == NonFinite::Throw);  // the container's policy applied to its steps only
  }
}

TEST_CASE("a step that refuses one parameter writes none: element-wise batches, the hybrid container, decay") {
  using M = RowMat<float>;
  SUBCASE("AdamW and Lion batched through the facade: every parameter checked before any is written") {
    for (const char* name : {"adamw", "lion"}) {
      CAPTURE(name);
      auto opt = make_optimizer<float>(name);
      M w0 = randn<M>(2, 3, 1), w1 = randn<M>(2, 3, 2), other = randn<M>(2, 2, 3);
      M g0 = randn<M>(2, 3, 4), g1 = randn<M>(2, 3, 5);
      auto s0 = opt.make_state(view(w0)), s1 = opt.make_state(view(w1)), wrong = opt.make_state(view(other));
      const M w0_before = w0, w1_before = w1;
      const std::vector<MatrixView<float>> pv{view(w0), view(w1)};
      const std::vector<MatrixView<const float>> gv{view(std::as_const(g0)), view(std::as_const(g1))};
      const ParamStep<float> k{1e-3f, 0.1f, NonFinite::Throw, std::nullopt};
      const std::vector<ParamStep<float>> settings{k, k};
      CHECK_THROWS_WITH_AS(opt.step(pv, gv, {&s0, &wrong}, settings),
                           doctest::Contains("state was made for a 2x2 parameter but W is 2x3"), std::invalid_argument);
      CHECK_THROWS_WITH_AS(opt.step(pv, gv, {&s1, &s1}, settings), doctest::Contains("state 0 is given twice"),
                           std::invalid_argument);
      g1(1, 2) = std::numeric_limits<float>::quiet_NaN();
      CHECK_THROWS_WITH_AS(opt.step(pv, gv, {&s0, &s1}, settings), doctest::Contains("contains a non-finite"),
                           std::invalid_argument);
      const std::vector<ParamStep<float>> zero_lr{k, {0.f, 0.1f, NonFinite::Throw, std::nullopt}};
      CHECK_THROWS_WITH_AS(opt.step(pv, gv, {&s0, &s1}, zero_lr), doctest::Contains("lr must be finite and > 0"),
                           std::invalid_argument);
      const std::vector<ParamStep<float>> overflow{k, {1e20f, 1e20f, NonFinite::Throw, std::nullopt}};
      CHECK_THROWS_WITH_AS(opt.step(pv, gv, {&s0, &s1}, overflow), doctest::Contains("weight-decay factor"),
                           std::invalid_argument);
      CHECK(w0 == w0_before);
      CHECK(w1 == w1_before);
      CHECK(s0.steps() == 0);
      CHECK(s1.steps() == 0);
      // With G1's NaN skipped, parameter 0 steps as the options' single step at the same lr and decay would.
      const std::vector<ParamStep<float>> skip{k, {1e-3f, 0.1f, NonFinite::Skip, std::nullopt}};
      opt.step(pv, gv, {&s0, &s1}, skip);
      auto single = make_optimizer<float>(name, {{"lr", "0.001"}, {"weight_decay", "0.1"}});
      M w0_single = w0_before;
      auto s_single = single.make_state(view(w0_single));
      single.step(view(w0_single), view(std::as_const(g0)), s_single);
      CHECK(w0 == w0_single);
      CHECK(w1 == w1_before);
      CHECK(s1.skipped() == 1);
    }
  }
  SUBCASE("a matrix optimizer's batched step refuses one state given for two parameters") {
    auto opt = make_optimizer<float>("muon");
    M w0 = randn<M>(4, 6, 1), w1 = randn<M>(4, 6, 2);
    const M g0 = randn<M>(4, 6, 3), g1 = randn<M>(4, 6, 4), w0_before = w0, w1_before = w1;
    auto s0 = opt.make_state(view(w0));
    const ParamStep<float> k{1e-3f, 0.f, NonFinite::Throw, std::nullopt};
    CHECK_THROWS_WITH_AS(opt.step({view(w0), view(w1)}, {view(g0), view(g1)}, {&s0, &s0}, {k, k}),
                         doctest::Contains("state 0 is given twice"), std::invalid_argument);
    CHECK(w0 == w0_before);
    CHECK(w1 == w1_before);
    CHECK(s0.steps() == 0);
  }
  SUBCASE("hybrid: a route's lr that underflows is refused naming the parameter and group, before either route steps") {
    M w1 = randn<M>(4, 4, 1), b = randn<M>(1, 4, 2);
    const M g1 = randn<M>(4, 4, 3), gb = randn<M>(1, 4, 4);
    HybridOptimizer<float> h(make_optimizer<float>("muon", {{"lr", "0.02"}}));
    const std::size_t tiny = h.add_group({"tiny", 1e-42f, std::nullopt});  // Muon's lr x 1e-42 > 0; AdamW's is 0
    h.add("w1", view(w1), Role::Auto, tiny);
    h.add("b", view(b), Role::Auto, tiny);
    const M w1_0 = w1, b_0 = b;
    CHECK_THROWS_WITH_AS(h.step({view(g1), view(gb)}), doctest::Contains("parameter 'b' of group 'tiny': lr ("),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(h.step({view(g1), view(gb)}), doctest::Contains("must be finite and > 0 (got 0)"),
                         std::invalid_argument);
    CHECK(w1 == w1_0);
    CHECK(b == b_0);
    h.group(tiny).lr_scale = 1;
    h.step({view(g1), view(gb)});
    CHECK(w1 != w1_0);
    CHECK(b != b_0);
  }
  SUBCASE("hybrid: rebind refuses null storage, and the step and checkpoint still see the old storage") {
    M w1 = randn<M>(4, 4, 1);
    const M g1 = randn<M>(4, 4, 3);
    HybridOptimizer<float> h(make_optimizer<float>("muon"));
    h.add("w1", view(w1));
    CHECK_THROWS_WITH_AS(h.rebind(0, MatrixView<float>{nullptr, 4, 4, Layout::RowMajor}),
                         doctest::Contains("null data for a 4x4 matrix"), std::invalid_argument);
    const M w1_0 = w1;
    h.step({view(g1)});
    CHECK(w1 != w1_0);
  }
  SUBCASE("Static: a decay factor 1 - lr weight_decay that overflows is refused, W and state unchanged") {
    Muon<float> opt;
    opt.options().lr = 1e20f;
    opt.options().weight_decay = 1e20f;  // each finite, the product not (in float)
    M w = randn<M>(5, 7, 1);
    const M g = randn<M>(5, 7, 2), w0 = w;
    auto st = opt.make_state(w);
    CHECK_THROWS_WITH_AS(opt.step(w, g, st),
                         doctest::Contains("weight-decay factor 1 - lr * weight_decay is not finite"),
                         std::invalid_argument);
    CHECK(w == w0);
    CHECK(st.steps == 0);
    CHECK(st.momentum.isZero());
    // The same Static inside SpectralCap: refused before the cap's power iteration writes its vectors.
    Optimizer<float, Identity, NoMomentum, SpectralCap<Static<>>> capped;
    capped.options().lr = 1e20f;
    capped.options().weight_decay = 1e20f;
    auto cs = capped.make_state(w);
    const auto cs0 = cs.scaling;
    CHECK_THROWS_WITH_AS(capped.step(w, g, cs), doctest::Contains("weight-decay factor"), std::invalid_argument);
    CHECK(w == w0);
    CHECK((cs.scaling.u == cs0.u && cs.scaling.v == cs0.v && cs.scaling.sigma == cs0.sigma && cs.steps == 0));
    AdamW<float>::Options a;
    a.lr = 1e20f;
    a.weight_decay = 1e20f;
    CHECK_THROWS_WITH_AS(AdamW<float>{a}, doctest::Contains("weight-decay factor"), std::invalid_argument);
  }
}

TEST_CASE_TEMPLATE("telemetry: every K-th step, U and the update as computed directly, off costs nothing", T, float,
                   double) {
  using M = RowMat<T>;
  RMNP<T> opt;
  M w = randn<M>(9, 13, 1);
  auto st = opt.make_state(w);
  std::vector<std::int64_t> steps;
  M expected_u, w_prev;
  const M g = randn<M>(9, 13, 2);
  opt.set_telemetry({3, [&](const StepReport<T>& r) {
                       steps.push_back(r.step);
                       CHECK(r.param == w.data());
                       CHECK(r.rows == 9);
                       CHECK(r.cols == 13);
                       Eigen::Map<const M> u(r.direction.data, r.direction.rows, r.direction.cols);
                       CHECK(matopt::test::rel_error(u, expected_u) < matopt::test::tol<T>());
                       const double rms = (w - w_prev).template cast<double>().norm() / std::sqrt(9.0 * 13.0);
                       CHECK(r.update_rms == doctest::Approx(rms).epsilon(1e-5));
                       // lr * max(1, m/n)^(1/2) = 0.02 on 9 x 13 (RMNP's defaults, docs/math.md#shape-rules)
                       CHECK(r.effective_lr == doctest::Approx(0.02).epsilon(1e-7));
                     }});
  for (int k = 1; k <= 7; ++k) {
    // RMNP: U = G + beta (beta V + G) (Sum, Nesterov), V before this step's update.
    Eigen::Map<const M> v(st.momentum.data(), 9, 13);
    const T beta = opt.options().momentum;
    expected_u = g + beta * (beta * v + g);
    w_prev = w;
    opt.step(w, g, st);
  }
  CHECK(steps == std::vector<std::int64_t>{3, 6});

  // Reporting does not change the numbers.
  RMNP<T> plain;
  M w2 = randn<M>(9, 13, 1);
  auto st2 = plain.make_state(w2);
  for (int k = 1; k <= 7; ++k) plain.step(w2, g, st2);
  CHECK(w2 == w);

  opt.set_telemetry({});
  opt.step(w, g, st);
  CHECK(steps.size() == 2);

  // The batched step reports the same steps and steps each parameter exactly once.
  {
    Muon<T> batched, single;
    std::vector<M> ws{randn<M>(6, 7, 5), randn<M>(8, 3, 6)}, ws_single = ws;
    std::vector<typename Muon<T>::State> sb, ss;
    for (auto& x : ws) sb.push_back(batched.make_state(x));
    for (auto& x : ws_single) ss.push_back(single.make_state(x));
    int reports = 0;
    batched.set_telemetry({2, [&](const StepReport<T>&) { ++reports; }});
    const std::vector<M> gs{randn<M>(6, 7, 7), randn<M>(8, 3, 8)};
    std::vector<MatrixView<T>> pv{view(ws[0]), view(ws[1])};
    std::vector<MatrixView<const T>> gv{view(gs[0]), view(gs[1])};
    for (int k = 0; k < 4; ++k) {
      batched.step(pv, gv, sb);
      for (std::size_t i = 0; i < 2; ++i) single.step(ws_single[i], gs[i], ss[i]);
    }
    CHECK(reports == 4);  // steps 2 and 4 of both parameters
    for (std::size_t i = 0; i < 2; ++i) {
      CHECK(sb[i].steps == 4);
      CHECK(ws[i] == ws_single[i]);
    }
  }

  HybridOptimizer<T> h(make_optimizer<T>("muon"));
  M a = randn<M>(5, 4, 3), b = randn<M>(4, 5, 4);
  h.add("a", view(a));
  h.add("b", view(b));
  std::vector<std::string> names;
  h.set_telemetry(1, [&](const std::string& name, const StepReport<T>&) { names.push_back(name); });
  h.step({view(std::as_const(a)), view(std::as_const(b))});
  CHECK(names == std::vector<std::string>{"a", "b"});
}

namespace {
// W <- W - lr D exactly: Identity preconditioner, no momentum, unit scale, the cap on top.
template <class T>
using Capped = Optimizer<T, Identity, NoMomentum, SpectralCap<Static<shape::Unit>>>;
}  // namespace

// docs/math.md#spectral-cap
TEST_CASE_TEMPLATE("spectral cap removes exactly the first-order growth of sigma1", T, float, double) {
  using M = Eigen::Matrix<T, -1, -1>;
  const Index m = 12, n = 9;
  // W with a clear top singular value (gap 3 -> 1.5) so that the power iteration converges.
  const Eigen::MatrixXd uu = matopt::test::random_orthonormal(m, n, 1), vv = matopt::test::random_orthonormal(n, n, 2);
  Eigen::VectorXd sv = Eigen::VectorXd::LinSpaced(n, 1.5, 0.2);
  sv(0) = 3.0;
  const Eigen::MatrixXd w0 = uu * sv.asDiagonal() * vv.transpose();
  const Eigen::VectorXd u1 = uu.col(0), v1 = vv.col(0);
  // D with u1^T D v1 = -0.7 < 0: the step W - eta D would grow sigma1.
  Eigen::MatrixXd d = randn(m, n, 3);
  d += (-0.7 - u1.dot(d * v1)) * u1 * v1.transpose();
  const double lr = 1e-3;

  typename Capped<T>::Options o;
  o.lr = T(lr);
  o.scaling.initial_iterations = 200;
  Capped<T> opt(o);
  M w = w0.cast<T>();
  auto st = opt.make_state(w);
  opt.step(w, M(d.cast<T>()), st);
  const Eigen::MatrixXd applied = (w0 - w.template cast<double>()) / lr;
  const Eigen::MatrixXd expected = d + 0.7 * u1 * v1.transpose();  // D - (u1^T D v1) u1 v1^T
  // Measured: 1.3e-5 (float: W - lr D rounds at 6e-8 of W, divided by lr = 1e-3), below 1e-9 (double). A cap
  // that removed 99% instead of all of the u1 v1^T component would be off by 6e-4.
  const double tol = std::is_same_v<T, float> ? 5e-5 : 1e-9;
  CHECK(matopt::test::rel_error(applied, expected) < tol);
  CHECK(st.scaling.capped == 1);
  CHECK(double(st.scaling.projection) == doctest::Approx(-0.7).epsilon(std::is_same_v<T, float> ? 1e-4 : 1e-9));
  CHECK(double(st.scaling.sigma) == doctest::Approx(3.0).epsilon(1e-5));
  // Other directions unchanged: D_applied - D is rank one along u1 v1^T.
  const Eigen::MatrixXd diff = applied - d;
  CHECK((diff - u1 * (u1.transpose() * diff * v1) * v1.transpose()).norm() < tol * d.norm());

  if constexpr (std::is_same_v<T, double>) {
    // sigma1 after a small step: first-order growth without the cap, only second order with it.
    auto sigma1 = [](const Eigen::MatrixXd& a) { return Eigen::JacobiSVD<Eigen::MatrixXd>(a).singularValues()(0); };
    for (double eta : {1e-3, 1e-4}) {
      const double uncapped = sigma1(w0 - eta * d) - 3.0;
      const double capped = sigma1(w0 - eta * expected) - 3.0;
      CHECK(uncapped / eta == doctest::Approx(0.7).epsilon(0.02));  // -eta u1^T D v1 to first order
      CHECK(std::abs(capped) < 5.0 * eta * eta * d.squaredNorm());  // O(eta^2)
    }
  }

  SUBCASE("no cap when the step shrinks sigma1, or sigma1 is below the threshold") {
    Eigen::MatrixXd d2 = randn(m, n, 4);
    d2 += (0.5 - u1.dot(d2 * v1)) * u1 * v1.transpose();  // u1^T D v1 = +0.5: sigma1 shrinks
    M w2 = w0.cast<T>();
    auto st2 = opt.make_state(w2);
    opt.step(w2, M(d2.cast<T>()), st2);
    CHECK(matopt::test::rel_error((w0 - w2.template cast<double>()) / lr, d2) < tol);
    CHECK(st2.scaling.capped == 0);

    typename Capped<T>::Options high = o;
    high.scaling.threshold = 3.5;  // above sigma1 = 3
    Capped<T> loose(high);
    M w3 = w0.cast<T>();
    auto st3 = loose.make_state(w3);
    loose.step(w3, M(d.cast<T>()), st3);
    CHECK(matopt::test::rel_error((w0 - w3.template cast<double>()) / lr, d) < tol);
    CHECK(st3.scaling.capped == 0);
  }
  SUBCASE("warm start: one power iteration per step tracks sigma1 over many small steps") {
    for (int k = 0; k < 20; ++k) opt.step(w, M(d.cast<T>()), st);
    const double exact = Eigen::JacobiSVD<Eigen::MatrixXd>(w.template cast<double>()).singularValues()(0);
    CHECK(double(st.scaling.sigma) == doctest::Approx(exact).epsilon(1e-3));
  }
  SUBCASE("a zero W has no top direction: nothing is capped, no NaN") {
    M z = M::Zero(m, n);
    auto sz = opt.make_state(z);
    opt.step(z, M(d.cast<T>()), sz);
    CHECK(z.allFinite());
    CHECK(sz.scaling.capped == 0);
  }
}

TEST_CASE_TEMPLATE("adaptive preconditioner: RowNormalize while r_min >= threshold, Orthogonalize below", T, float,
                   double) {
  using M = RowMat<T>;
  using Ad = Optimizer<T, Adaptive<>, Momentum<Sum, Nesterov>, Static<>>;
  using Orth = Optimizer<T, Orthogonalize<>, Momentum<Sum, Nesterov>, Static<>>;
  // Orthogonal rows: U U^T diagonal, r_min huge -> row normalization (equal to RMNP's step).
  const M g_diag = (matopt::test::random_orthonormal(16, 8, 1).transpose() * 3.0).cast<T>();
  // Nearly rank one: every row close to the same vector -> r_min about 1 or below -> Newton-Schulz.
  M g_rank1 = (10.0 * randn(8, 1, 2) * randn(1, 16, 3) + 0.1 * randn(8, 16, 4)).cast<T>();
  g_rank1.row(0) *= T(-1);

  typename Ad::Options o;
  o.precondition.every = 2;
  Ad ad(o);
  RMNP<T> rmnp;
  Orth orth;
  auto run = [&](const M& g, auto& ref) {
    M w = randn<M>(8, 16, 5), w_ref = w;
    auto st = ad.make_state(w);
    auto st_ref = ref.make_state(w_ref);
    ad.step(w, g, st);
    ref.step(w_ref, g, st_ref);
    CHECK(matopt::test::rel_error(w, w_ref) < matopt::test::tol<T>());
    return st;
  };
  const auto s1 = run(g_diag, rmnp);
  CHECK_FALSE(s1.precondition.exact);
  CHECK(s1.precondition.r_min > 1e3);
  const auto s2 = run(g_rank1, orth);
  CHECK(s2.precondition.exact);
  CHECK(s2.precondition.r_min < 1.0);

  SUBCASE("re-checks every `every` steps and counts switches") {
    M w = randn<M>(8, 16, 6);
    auto st = ad.make_state(w);
    ad.step(w, g_diag, st);   // check: row
    ad.step(w, g_rank1, st);  // no check: keeps row
    CHECK_FALSE(st.precondition.exact);
    ad.step(w, g_rank1, st);  // check (calls = 2): U is now dominated by the rank-one gradient
    CHECK(st.precondition.exact);
    CHECK(st.precondition.switches == 1);
  }
  CHECK_THROWS_WITH_AS(Ad(typename Ad::Options{T(0.02), T(0.95), true, T(0), {1.0, 0, {}, {}}, {}}),
                       doctest::Contains("adaptive_every must be >= 1"), std::invalid_argument);
}

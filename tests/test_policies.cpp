// SPDX-License-Identifier: MIT
// Momentum, normalization, scaling and AdamW policies against hand-computed closed forms (docs/math.md).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/SVD>
#include <doctest/doctest.h>

#include <matopt/adamw.hpp>
#include <matopt/precondition/elementwise.hpp>
#include <matopt/presets.hpp>

#include "test_support.hpp"

using namespace matopt;
using namespace matopt::test;

TEST_CASE_TEMPLATE("RowNormalize: unit rows, zero rows stay zero", T, float, double) {
  Eigen::Matrix<T, -1, -1> u = randn(6, 9, 1).cast<T>();
  u.row(2).setZero();
  const auto d = precondition<RowNormalize, T>(u);
  for (Index i = 0; i < 6; ++i) CHECK(d.row(i).norm() == doctest::Approx(i == 2 ? 0.0 : 1.0).epsilon(tol<T>()));
  CHECK(d.allFinite());
  // Each row is the input row rescaled (the direction is kept).
  CHECK(rel_error(d.row(0), u.row(0) / u.row(0).norm()) <= tol<T>());
  // RowNormalize = (U U^T)^(-1/2) U when U U^T is diagonal (orthogonal rows), i.e. equals the polar factor.
  const Eigen::MatrixXd q = random_orthonormal(9, 4, 3).transpose();  // 4 x 9, orthonormal rows
  const Eigen::MatrixXd diag_gram = Eigen::Vector4d(3, 0.5, 2, 1).asDiagonal() * q;
  CHECK(rel_error(precondition<RowNormalize, T>(diag_gram.cast<T>().eval()), q) <= tol<T>());
}

TEST_CASE_TEMPLATE("ColNormalize: unit columns, zero columns stay zero", T, float, double) {
  RowMat<T> u = randn(7, 5, 2).cast<T>();
  u.col(4).setZero();
  const auto d = precondition<ColNormalize, T>(u);
  for (Index j = 0; j < 5; ++j) CHECK(d.col(j).norm() == doctest::Approx(j == 4 ? 0.0 : 1.0).epsilon(tol<T>()));
  CHECK(rel_error(d.col(1), u.col(1) / u.col(1).norm()) <= tol<T>());
}

TEST_CASE("Identity and Sign") {
  Eigen::MatrixXd u(2, 3);
  u << 1.5, -2, 0, 0.25, -1e-30, 7;
  CHECK(precondition<Identity, double>(u) == u);
  Eigen::MatrixXd s(2, 3);
  s << 1, -1, 0, 1, -1, 1;
  CHECK(precondition<Sign, double>(u) == s);
}

namespace {
/// SGD with momentum of convention C: Identity preconditioner, unit scale, so W moves by -lr U exactly.
template <class C, class T>
using Sgd = Optimizer<T, Identity, Momentum<C, Nesterov>, Static<shape::Unit>>;
}  // namespace

TEST_CASE_TEMPLATE("momentum conventions and Nesterov match the hand-written recurrences", T, float, double) {
  const T beta = T(0.9), lr = T(0.5);
  const Eigen::Matrix<T, -1, -1> w0 = randn(3, 4, 4).cast<T>();
  const Eigen::Matrix<T, -1, -1> g1 = randn(3, 4, 5).cast<T>(), g2 = randn(3, 4, 6).cast<T>();
  for (bool nesterov : {true, false}) {
    CAPTURE(nesterov);
    // EMA (KellerJordan/Muon): V1 = (1-b) G1, V2 = b V1 + (1-b) G2; U = (1-b) G + b V or V.
    {
      typename Sgd<Ema, T>::Options o;
      o.lr = lr;
      o.momentum = beta;
      o.nesterov = nesterov;
      Sgd<Ema, T> opt(o);
      Eigen::Matrix<T, -1, -1> w = w0;
      auto st = opt.make_state(w);
      opt.step(w, g1, st);
      opt.step(w, g2, st);
      const Eigen::MatrixXd v1 = (1 - beta) * g1.template cast<double>();
      const Eigen::MatrixXd v2 = beta * v1 + (1 - beta) * g2.template cast<double>();
      const Eigen::MatrixXd u1 = nesterov ? Eigen::MatrixXd((1 - beta) * g1.template cast<double>() + beta * v1) : v1;
      const Eigen::MatrixXd u2 = nesterov ? Eigen::MatrixXd((1 - beta) * g2.template cast<double>() + beta * v2) : v2;
      CHECK(rel_error(w, w0.template cast<double>() - lr * (u1 + u2)) <= tol<T>());
    }
    // Sum (Moonlight, RMNP): V1 = G1, V2 = b V1 + G2; U = G + b V or V.
    {
      typename Sgd<Sum, T>::Options o;
      o.lr = lr;
      o.momentum = beta;
      o.nesterov = nesterov;
      Sgd<Sum, T> opt(o);
      Eigen::Matrix<T, -1, -1> w = w0;
      auto st = opt.make_state(w);
      opt.step(w, g1, st);
      opt.step(w, g2, st);
      const Eigen::MatrixXd v1 = g1.template cast<double>();
      const Eigen::MatrixXd v2 = beta * v1 + g2.template cast<double>();
      const Eigen::MatrixXd u1 = nesterov ? Eigen::MatrixXd(g1.template cast<double>() + beta * v1) : v1;
      const Eigen::MatrixXd u2 = nesterov ? Eigen::MatrixXd(g2.template cast<double>() + beta * v2) : v2;
      CHECK(rel_error(w, w0.template cast<double>() - lr * (u1 + u2)) <= tol<T>());
    }
  }
}

TEST_CASE_TEMPLATE("SGD and signum with momentum, decoupled, cautious and independent weight decay match the "
                   "hand-written update", T, float, double) {
  // Identity and Sign with a momentum buffer under Static take one element-wise pass on the host (chunk by chunk):
  // V <- b V + (1 - b) G, U = (1 - b) G + b V (EMA, Nesterov), D = U or sign(U), W <- (1 - lr lambda) W - lr s D with
  // s = max(1, m/n)^(1/2); cautious decay (arXiv 2510.12402) decays only where D . W >= 0, independent decay is
  // W (1 - lambda). Tall, wide and square, both storage orders, a whole matrix and a block of a larger one stepped in
  // place, one row of G zero (sign(0) = 0: that row only decays); the reference in double.
  using Mat = Eigen::MatrixXd;
  const double beta = 0.9, lr = 0.05, lambda = 0.1;
  auto check = [&](auto opt, bool sign, WeightDecay decay_form, Index m, Index n, auto tag) {
    using M = decltype(tag);
    opt.options().lr = T(lr);
    opt.options().momentum = T(beta);
    opt.options().weight_decay = T(lambda);
    opt.options().scaling.weight_decay_method = decay_form;
    const double s = std::sqrt(std::max(1.0, double(m) / double(n)));
    const double keep = decay_form == WeightDecay::Independent ? 1 - lambda : 1 - lr * lambda;
    M big = randn<M>(m + 3, n + 3, 31);
    const M before = big;
    M w = big.block(1, 2, m, n);
    auto whole = opt.make_state(w);
    auto block = opt.make_state(big.block(1, 2, m, n));
    Mat ref_w = w.template cast<double>(), ref_v = Mat::Zero(m, n);
    for (unsigned k = 0; k < 3; ++k) {
      M g = randn<M>(m, n, 40 + k);
      g.row(m / 2).setZero();
      opt.step(w, g, whole);
      opt.step(big.block(1, 2, m, n), g, block);
      const Mat gd = g.template cast<double>();
      ref_v = beta * ref_v + (1 - beta) * gd;
      const Mat u = (1 - beta) * gd + beta * ref_v;
      const Mat d = sign ? Mat(u.cwiseSign()) : u;
      for (Index i = 0; i < m; ++i)
        for (Index j = 0; j < n; ++j) {
          const bool decays = decay_form != WeightDecay::Cautious || d(i, j) * ref_w(i, j) >= 0;
          ref_w(i, j) = (decays ? keep * ref_w(i, j) : ref_w(i, j)) - lr * s * d(i, j);
        }
    }
    CHECK(rel_error(w, ref_w) <= tol<T>());
    CHECK(M(big.block(1, 2, m, n)) == w);  // the block steps in place as the whole matrix does
    big.block(1, 2, m, n) = before.block(1, 2, m, n);
    CHECK(big == before);
  };
  using Sgd = Optimizer<T, Identity, Momentum<Ema, Nesterov>, Static<>>;
  using Signum = Optimizer<T, Sign, Momentum<Ema, Nesterov>, Static<>>;
  for (const auto& mn : {std::pair<Index, Index>{6, 5}, {5, 7}, {6, 6}})
    for (const WeightDecay decay_form : {WeightDecay::Decoupled, WeightDecay::Cautious, WeightDecay::Independent}) {
      const Index m = mn.first, n = mn.second;
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(int(decay_form));
      check(Sgd{}, false, decay_form, m, n, RowMat<T>());
      check(Sgd{}, false, decay_form, m, n, ColMat<T>());
      check(Signum{}, true, decay_form, m, n, RowMat<T>());
      check(Signum{}, true, decay_form, m, n, ColMat<T>());
    }
}

TEST_CASE_TEMPLATE("EMA and Sum momentum give the same direction after normalization", T, float, double) {
  using EmaMuon = Optimizer<T, Orthogonalize<NewtonSchulz<>>, Momentum<Ema>, Static<>>;
  using SumMuon = Optimizer<T, Orthogonalize<NewtonSchulz<>>, Momentum<Sum>, Static<>>;
  using EmaRow = Optimizer<T, RowNormalize, Momentum<Ema>, Static<>>;
  using SumRow = Optimizer<T, RowNormalize, Momentum<Sum>, Static<>>;
  const Eigen::Matrix<T, -1, -1> w0 = randn(10, 6, 8).cast<T>();
  auto run = [&](auto opt) {
    Eigen::Matrix<T, -1, -1> w = w0;
    auto st = opt.make_state(w);
    for (unsigned k = 0; k < 4; ++k) opt.step(w, randn(10, 6, 100 + k).cast<T>(), st);
    return w;
  };
  // The NS eps (1e-7 against ||U||_F) is the only difference: EMA's U is (1 - beta) times Sum's.
  CHECK(rel_error(run(EmaMuon{}), run(SumMuon{})) <= (std::is_same_v<T, float> ? 1e-5 : 1e-7));
  CHECK(rel_error(run(EmaRow{}), run(SumRow{})) <= tol<T>());
}

TEST_CASE_TEMPLATE("decoupled weight decay uses the unscaled lr", T, float, double) {
  // W1 = W0 (1 - lr lambda) - lr s G with s = MuonOriginal(12, 3) = 2.
  using Opt = Optimizer<T, Identity, NoMomentum, Static<shape::MuonOriginal>>;
  typename Opt::Options o;
  o.lr = T(0.1);
  o.weight_decay = T(0.3);
  Opt opt(o);
  const Eigen::Matrix<T, -1, -1> w0 = randn(12, 3, 1).cast<T>(), g = randn(12, 3, 2).cast<T>();
  Eigen::Matrix<T, -1, -1> w = w0;
  auto st = opt.make_state(w);
  opt.step(w, g, st);
  const Eigen::MatrixXd want = w0.template cast<double>() * (1 - 0.1 * 0.3) - 0.1 * 2.0 * g.template cast<double>();
  CHECK(rel_error(w, want) <= tol<T>());
  CHECK(opt.effective_lr(st) == doctest::Approx(0.2).epsilon(1e-6));
}

// docs/math.md#shape-rules
TEST_CASE("shape rules") {
  CHECK(shape::Unit{}(8, 2) == 1.0);
  CHECK(shape::MuonOriginal{}(8, 2) == doctest::Approx(2.0));
  CHECK(shape::MuonOriginal{}(2, 8) == 1.0);
  CHECK(shape::TransposedMuonOriginal{}(2, 8) == doctest::Approx(2.0));
  CHECK(shape::TransposedMuonOriginal{}(8, 2) == 1.0);
  CHECK(shape::MoonlightRms{}(8, 50) == doctest::Approx(0.2 * std::sqrt(50.0)));
  CHECK(shape::MoonlightRms{}(50, 8) == doctest::Approx(0.2 * std::sqrt(50.0)));
  CHECK(shape::Spectral{}(8, 2) == doctest::Approx(2.0));
  CHECK(shape::Spectral{}(2, 8) == doctest::Approx(0.5));
  CHECK(shape::ScionColumn{}(9, 3) == doctest::Approx(3.0));
  CHECK(shape::Function{[](Index m, Index n) { return double(m * n); }}(3, 4) == 12.0);
}

TEST_CASE("a user rule as a functor type drives the scale") {
  struct Half {
    double operator()(Index, Index) const { return 0.5; }
  };
  Optimizer<double, Identity, NoMomentum, Static<Half>> opt;
  Eigen::MatrixXd w = Eigen::MatrixXd::Zero(2, 2), g = Eigen::MatrixXd::Ones(2, 2);
  auto st = opt.make_state(w);
  opt.step(w, g, st);
  CHECK(w(0, 0) == doctest::Approx(-0.02 * 0.5));
}

TEST_CASE("conv weights: the 2-D view (out, in*kh*kw) drives the scale") {
  // (out, in, kh, kw) = (16, 2, 3, 3): the view is 16 x 18, so MuonOriginal gives max(1, 16/18)^(1/2) = 1,
  // not sqrt(16/2) (from (out, in)) nor anything from (kh, kw).
  std::vector<float> wbuf(16 * 2 * 3 * 3, 0.0f), gbuf(wbuf.size());
  for (std::size_t i = 0; i < gbuf.size(); ++i) gbuf[i] = std::sin(float(i));
  auto w = conv_weight_view(wbuf.data(), 16, 2, 3, 3);
  auto g = conv_weight_view(static_cast<const float*>(gbuf.data()), 16, 2, 3, 3);
  CHECK(w.rows() == 16);
  CHECK(w.cols() == 18);
  RMNP<float> opt;
  auto st = opt.make_state(w);
  CHECK(opt.effective_lr(st) == doctest::Approx(0.02f));
  opt.step(w, g, st);
  // Each output filter moved by exactly lr (unit row norm, s = 1).
  for (Index i = 0; i < 16; ++i) CHECK(w.row(i).norm() == doctest::Approx(0.02f).epsilon(1e-5));
  // The tall case: (64, 1, 2, 2) -> 64 x 4, s = 4.
  std::vector<float> tall(64 * 4, 0.0f);
  auto wt = conv_weight_view(tall.data(), 64, 1, 2, 2);
  CHECK(opt.effective_lr(opt.make_state(wt)) == doctest::Approx(0.02f * 4));
  CHECK_THROWS_AS(conv_weight_view(wbuf.data(), 16, -2, 3, 3), std::invalid_argument);
}

namespace {
template <class T>
using OrScaleSgd = Optimizer<T, Identity, NoMomentum, TrustRatio<trust::OrScale, shape::Unit>>;
}

TEST_CASE_TEMPLATE("OrScale trust ratio: clipping, coupled decay, calibration to r0 = 1", T, float, double) {
  const Eigen::Matrix<T, -1, -1> g = randn(5, 8, 3).cast<T>();
  const Eigen::Matrix<T, -1, -1> w0 = randn(5, 8, 4).cast<T>();
  typename OrScaleSgd<T>::Options o;
  o.lr = T(0.1);
  o.weight_decay = T(0.2);
  // r = ||W|| / (||D|| + eps) with D = lambda W + Q: scale W to land inside, above and below the clip.
  for (double wscale : {1.0, 50.0, 0.01}) {
    CAPTURE(wscale);
    OrScaleSgd<T> opt(o);
    Eigen::Matrix<T, -1, -1> w = (T(wscale) * w0).eval();
    const Eigen::MatrixXd wd = w.template cast<double>();
    const Eigen::MatrixXd d = 0.2 * wd + g.template cast<double>();
    const double r = std::clamp(wd.norm() / (d.norm() + 1e-6), 0.5, 1.5);
    auto st = opt.make_state(w);
    opt.step(w, g, st);
    CHECK(rel_error(w, wd - 0.1 * r * d) <= tol<T>());
    CHECK(double(st.scaling.last_ratio) == doctest::Approx(r).epsilon(tol<T>()));
    CHECK(double(opt.effective_lr(st)) == doctest::Approx(0.1 * r).epsilon(tol<T>()));
  }
  // OrScale-LM: calibrate c at the first step so that r0 = 1, with clip [0.1, 5].
  o.scaling.calibrate = true;
  o.scaling.clip_min = 0.1;
  o.scaling.clip_max = 5.0;
  OrScaleSgd<T> opt(o);
  Eigen::Matrix<T, -1, -1> w = (T(50) * w0).eval();
  auto st = opt.make_state(w);
  opt.step(w, g, st);
  CHECK(double(st.scaling.last_ratio) == doctest::Approx(1.0).epsilon(1e-5));
  const double c = double(st.scaling.calibration);
  CHECK(c > 1.0);
  opt.step(w, g, st);  // c stays fixed after the first step
  CHECK(double(st.scaling.calibration) == c);
}

TEST_CASE("OrScale calibration falls back to 0.2 sqrt(max(m, n)) when a norm is below eps") {
  using Opt = OrScaleSgd<double>;
  Opt::Options o;
  o.scaling.calibrate = true;
  Opt opt(o);
  Eigen::MatrixXd w = Eigen::MatrixXd::Zero(4, 9), g = Eigen::MatrixXd::Ones(4, 9);
  auto st = opt.make_state(w);
  opt.step(w, g, st);
  CHECK(st.scaling.calibration == doctest::Approx(0.2 * 3.0));
  CHECK(st.scaling.last_ratio == 0.5);  // ||W|| = 0: r = 0, clipped to 0.5
}

TEST_CASE("LARS trust ratio (arXiv 1708.03888)") {
  using Opt = Optimizer<double, Identity, NoMomentum, TrustRatio<trust::Lars>>;
  Opt::Options o;
  o.lr = 1.0;
  o.weight_decay = 0.1;
  Opt opt(o);
  const Eigen::MatrixXd w0 = randn(4, 4, 1), g = randn(4, 4, 2);
  Eigen::MatrixXd w = w0;
  auto st = opt.make_state(w);
  opt.step(w, g, st);
  const double r = 0.001 * w0.norm() / (g.norm() + 0.1 * w0.norm());
  CHECK(rel_error(w, w0 - r * (0.1 * w0 + g)) <= 1e-12);
  // Zero weights still move (r = 1).
  Eigen::MatrixXd z = Eigen::MatrixXd::Zero(4, 4);
  auto sz = opt.make_state(z);
  opt.step(z, g, sz);
  CHECK(rel_error(z, -g) <= 1e-12);
}

TEST_CASE_TEMPLATE("AdamW: constant gradient closed form", T, float, double) {
  // With a constant g, the bias-corrected moments are exactly g and g^2: every step moves by
  // lr g / (|g| + eps) after the decay factor.
  typename AdamW<T>::Options o;
  o.lr = T(0.01);
  o.weight_decay = T(0.5);
  AdamW<T> opt(o);
  Eigen::Matrix<T, -1, 1> w(3), g(3);
  w << T(1), T(-2), T(0.5);
  g << T(0.3), T(-4), T(1e-3);
  Eigen::VectorXd want = w.template cast<double>();
  auto st = opt.make_state(w);
  for (int k = 0; k < 4; ++k) {
    opt.step(w, g, st);
    for (Index i = 0; i < 3; ++i) {
      const double gi = double(g(i));
      want(i) = want(i) * (1 - 0.01 * 0.5) - 0.01 * gi / (std::abs(gi) + 1e-8);
    }
  }
  CHECK(rel_error(w, want) <= 10 * tol<T>());
  CHECK(st.steps == 4);
}

// docs/math.md#presets
TEST_CASE("preset defaults") {
  CHECK(Muon<float>::Options{}.lr == 0.02f);
  CHECK(Muon<float>::Options{}.momentum == 0.95f);
  CHECK(Muon<float>::Options{}.nesterov);
  CHECK(Muon<float>::Options{}.weight_decay == 0.0f);
  CHECK(Muon<float>::Options{}.precondition.schedule.coefficients[0].a == 3.4445);
  CHECK(MoonlightMuon<double>::Options{}.lr == 1e-3);
  CHECK(MoonlightMuon<double>::Options{}.weight_decay == 0.1);
  CHECK(RMNP<double>::Options{}.lr == 0.02);
  CHECK(RMNP<double>::Options{}.precondition.eps == 1e-12);
  CHECK(ColNorm<double>::Options{}.lr == 0.02);
  CHECK(OrScale<double>::Options{}.scaling.clip_min == 0.5);
  CHECK(OrScale<double>::Options{}.scaling.clip_max == 1.5);
  CHECK(OrScale<double>::Options{}.precondition.schedule.safety == 1.02);
  CHECK(AdamW<double>::Options{}.lr == 3e-4);
  CHECK(AdamW<double>::Options{}.beta1 == 0.9);
  CHECK(AdamW<double>::Options{}.beta2 == 0.95);
  CHECK(AdamW<double>::Options{}.eps == 1e-8);
  // Effective lr of each preset on a 64 x 16 matrix.
  Eigen::MatrixXd w(64, 16);
  Muon<double> muon;
  CHECK(muon.effective_lr(muon.make_state(w)) == doctest::Approx(0.02 * 2));
  MoonlightMuon<double> moon;
  CHECK(moon.effective_lr(moon.make_state(w)) == doctest::Approx(1e-3 * 0.2 * 8));
  ColNorm<double> col;
  CHECK(col.effective_lr(col.make_state(w)) == doctest::Approx(0.02));
  Eigen::MatrixXd wide(16, 64);
  CHECK(col.effective_lr(col.make_state(wide)) == doctest::Approx(0.02 * 2));
  // Row blocks: the first block's shape (each block is scaled as a parameter of its own): heads = 4 gives 16 x 16
  // blocks, s = 1; split_sizes {32, 16, 16}, and 4 groups of {8, 4, 4}, a first block of 32 x 16, s = sqrt(2); rows
  // that do not split as asked (heads = 3), the whole matrix.
  const auto blocked_lr = [&w](auto&& set) {
    Muon<double> opt;
    set(opt.options().precondition);
    return opt.effective_lr(opt.make_state(w));
  };
  CHECK(blocked_lr([](auto& p) { p.heads = 4; }) == doctest::Approx(0.02));
  CHECK(blocked_lr([](auto& p) { p.split_sizes = {32, 16, 16}; }) == doctest::Approx(0.02 * std::sqrt(2.0)));
  CHECK(blocked_lr([](auto& p) {
          p.split_sizes = {8, 4, 4};
          p.split_groups = 4;
        }) == doctest::Approx(0.02 * std::sqrt(2.0)));
  CHECK(blocked_lr([](auto& p) { p.heads = 3; }) == doctest::Approx(0.02 * 2));
  // Blocks all of one shape, two or more (the CUDA engine orthogonalizes them as one batch).
  RowBlocks b;
  b.heads = 4;
  CHECK(b.equal_blocks(64));
  CHECK_FALSE(b.equal_blocks(66));  // 4 does not divide 66
  b.heads = 1;
  CHECK_FALSE(b.equal_blocks(64));
  b.split_sizes = {16, 16};
  b.split_groups = 2;
  CHECK(b.equal_blocks(64));
  b.split_sizes = {32, 16, 16};
  b.split_groups = 1;
  CHECK_FALSE(b.equal_blocks(64));
  b.split_sizes = {64};
  CHECK_FALSE(b.equal_blocks(64));  // one block
}

// AutoSteps (ns_steps=auto): the plan against the spectrum the test builds, K against Jordan's scalar map.
namespace {
/// G = Q1 diag(sigma) Q2^T, m x n (m <= n), with orthonormal Q1, Q2: its singular values are sigma.
Eigen::MatrixXd with_singular_values(const Eigen::VectorXd& sigma, Index n, unsigned seed) {
  const Index m = sigma.size();
  return random_orthonormal(m, m, seed) * sigma.asDiagonal() * random_orthonormal(n, m, seed + 1).transpose();
}
/// numpy's "linear" quantile at p of sigma / ||sigma|| (sigma ascending).
double normalized_quantile(const Eigen::VectorXd& sigma, double p) {
  const Eigen::VectorXd s = sigma / sigma.norm();
  const double h = double(s.size() - 1) * p;
  const auto lo = Index(std::floor(h));
  return s[lo] + (h - double(lo)) * (s[lo + 1] - s[lo]);
}
/// The fewest k whose k-step Jordan map p(s) = 3.4445 s - 4.7750 s^3 + 2.0315 s^5 (math.md) takes q to >= tau.
int jordan_steps(double q, double tau) {
  for (int k = 1;; ++k) {
    q = q * (3.4445 + q * q * (-4.7750 + q * q * 2.0315));
    if (q >= tau) return k;
  }
}
template <class T>
using AutoMuon = MuonAutoSteps<T>;
}  // namespace

TEST_CASE_TEMPLATE("AutoSteps plans the fewest Jordan steps that lift the tracked quantile to tau, and steps as Muon "
                   "with that many steps",
                   T, float, double) {
  const double sv_tol = std::is_same_v<T, float> ? 2e-6 : 1e-12;  // float: G rounded to 24 bits
  // Two spectra of a 12 x 20 gradient: a flat one (q about 0.2: one step) and one with a tail at 1e-4.
  Eigen::VectorXd flat(12), tail(12);
  for (Index i = 0; i < 12; ++i) flat[i] = 0.8 + 0.05 * double(i);
  for (Index i = 0; i < 12; ++i) tail[i] = i < 2 ? 1e-4 * double(i + 1) : std::pow(10.0, -2.0 + 0.2 * double(i));
  for (const Eigen::VectorXd* sigma : {&flat, &tail}) {
    const double q = normalized_quantile(*sigma, 0.05);
    const int k = jordan_steps(q, 0.5);
    CAPTURE(q);
    CAPTURE(k);
    const Eigen::MatrixXd g = with_singular_values(*sigma, 20, 7);
    for (bool tall : {false, true}) {
      CAPTURE(tall);
      const RowMat<T> gt = (tall ? Eigen::MatrixXd(g.transpose()) : g).cast<T>();
      const RowMat<T> w0 = randn(gt.rows(), gt.cols(), 3).template cast<T>();
      AutoMuon<T> opt;
      RowMat<T> w = w0;
      auto s = opt.make_state(w);
      opt.step(w, gt, s);
      CHECK(std::abs(s.precondition.quantile - q) <= sv_tol);
      CHECK(s.precondition.ns_steps == k);
      CHECK(s.precondition.ns_work == k);
      // The step is Muon's with ns_steps = k (the plan reaches Newton–Schulz).
      typename Muon<T>::Options mo;
      mo.precondition.schedule.steps = k;
      Muon<T> muon(mo);
      RowMat<T> wm = w0;
      auto sm = muon.make_state(wm);
      muon.step(wm, gt, sm);
      CHECK(wm == w);
    }
  }
  CHECK(jordan_steps(normalized_quantile(flat, 0.05), 0.5) == 1);
  CHECK(jordan_steps(normalized_quantile(tail, 0.05), 0.5) == 8);
}

TEST_CASE("AutoSteps re-plans every plan_every steps and counts its Newton–Schulz work") {
  typename AutoMuon<double>::Options o;
  o.precondition.plan_every = 2;
  AutoMuon<double> opt(o);
  Eigen::VectorXd flat = Eigen::VectorXd::Constant(6, 1.0), tail(6);
  tail << 1e-5, 1e-3, 0.1, 0.5, 1, 1;
  const RowMat<double> g_flat = with_singular_values(flat, 10, 1), g_tail = 1e3 * with_singular_values(tail, 10, 2);
  RowMat<double> w = RowMat<double>::Zero(6, 10);
  auto s = opt.make_state(w);
  opt.step(w, g_flat, s);  // planned: an orthogonal U needs one step (q = 1 / sqrt(6))
  CHECK(s.precondition.ns_steps == jordan_steps(1 / std::sqrt(6.0), 0.5));
  const auto k1 = s.precondition.ns_steps;
  opt.step(w, g_tail, s);  // not a check: the plan is kept
  CHECK(s.precondition.ns_steps == k1);
  CHECK(s.precondition.calls == 2);
  opt.step(w, g_tail, s);  // re-planned for U, whose tail now needs more steps
  CHECK(s.precondition.ns_steps > k1);
  CHECK(s.precondition.ns_work == 2 * k1 + s.precondition.ns_steps);
  CHECK(w.allFinite());
}

namespace {
/// One Newton–Schulz step's scalar map p(s) = a s + b s^3 + c s^5.
struct Quintic {
  double a, b, c;
  double operator()(double s) const { return s * (a + s * s * (b + s * s * c)); }
  /// p' = a + 3 b t + 5 c t^2 (t = s^2) > 0 on [0, y]: p increases there (its minimum over t in [0, y^2] is at
  /// an end or at the vertex t = -3b / 10c).
  bool increasing_up_to(double y) const {
    const auto slope = [&](double t) { return a + 3 * b * t + 5 * c * t * t; };
    const double t_hi = y * y, t_v = c != 0 ? -3 * b / (10 * c) : -1;
    return slope(0) > 0 && slope(t_hi) > 0 && !(t_v > 0 && t_v < t_hi && slope(t_v) <= 0);
  }
};
/// A schedule as written here: the steps' maps (the last repeats past the list) and the normalization
/// X / (safety ||X||_F + eps).
struct ScalarSchedule {
  std::vector<Quintic> maps;
  double safety, eps;
  const Quintic& at(int k) const { return maps[std::size_t(std::min<int>(k, int(maps.size()) - 1))]; }
  double compose(double x, int k) const {
    for (int i = 0; i < k; ++i) x = at(i)(x);
    return x;
  }
};
/// KellerJordan/Muon's zeropower_via_newtonschulz5: (3.4445, -4.7750, 2.0315), X / (||X||_F + 1e-7).
const ScalarSchedule kJordan{{{3.4445, -4.7750, 2.0315}}, 1.0, 1e-7};
/// Polar Express, 5 steps (arXiv 2505.16932; modded-nanogpt's polar_express_coeffs), X / (1.02 ||X||_F + 1e-6).
const ScalarSchedule kPolarExpress{{{8.156554524902461, -22.48329292557795, 15.878769915207462},
                                    {4.042929935166739, -2.808917465908714, 0.5000178451051316},
                                    {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
                                    {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
                                    {2.3465413258596377, -1.7097828382687081, 0.42323551169305323}},
                                   1.02,
                                   1e-6};
/// The plan rule of docs/policies.md ("AutoSteps") and docs/diagnostics.md ("plan_ns_steps"): the fewest K in
/// [1, max_steps] whose failure threshold (the smallest sigma that K steps take to >= tau) is at or below
/// x = q / safety, else max_steps. While each step's map increases on [0, its input at x] (required here), the
/// k-step map increases on [0, x], so the threshold is at or below x exactly when p_k(...p_1(x)) >= tau.
int planned_steps(const ScalarSchedule& s, double q, double tau, int max_steps) {
  double y = q / s.safety;
  for (int k = 1; k <= max_steps; ++k) {
    REQUIRE(s.at(k - 1).increasing_up_to(y));
    y = s.at(k - 1)(y);
    if (y >= tau) return k;
  }
  return max_steps;
}
/// The exact K-step Newton–Schulz direction of g (m x n, either orientation): g = P diag(sigma) Q^T from
/// JacobiSVD in double, D = P diag(p_K(...p_1(sigma / (safety ||g||_F + eps)))) Q^T.
Eigen::MatrixXd ns_closed_form(const Eigen::MatrixXd& g, const ScalarSchedule& s, int k) {
  const Eigen::JacobiSVD<Eigen::MatrixXd> svd(g, Eigen::ComputeThinU | Eigen::ComputeThinV);
  Eigen::VectorXd out = svd.singularValues() / (s.safety * g.norm() + s.eps);
  for (Index i = 0; i < out.size(); ++i) out[i] = s.compose(out[i], k);
  return svd.matrixU() * out.asDiagonal() * svd.matrixV().transpose();
}
/// numpy's "linear" quantile at p of the singular values of g / ||g||_F, from JacobiSVD in double.
double exact_sv_quantile(const Eigen::MatrixXd& g, double p) {
  return normalized_quantile(Eigen::JacobiSVD<Eigen::MatrixXd>(g).singularValues().reverse(), p);
}
/// What one AutoSteps plan is made with, and the schedule as the test writes it.
struct PlanCase {
  const char* what;
  double p, tau;
  int max_steps;
  bool polar_express;
  const ScalarSchedule& scalar() const { return polar_express ? kPolarExpress : kJordan; }
};
/// MuonAutoSteps with U = G (no momentum), lr 1, one step from W = 0 in storage Mat: the measured q and the
/// plan against the exact SVD of G as stored (after rounding to T), W against -scale D of the planned K steps.
template <class Mat>
void check_planned_step(const Eigen::MatrixXd& g64, const PlanCase& c) {
  using T = typename Mat::Scalar;
  const Mat g = g64.cast<T>();
  const Eigen::MatrixXd g_seen = g.template cast<double>();
  const double q = exact_sv_quantile(g_seen, c.p);
  const int k = planned_steps(c.scalar(), q, c.tau, c.max_steps);
  CAPTURE(q);
  CAPTURE(k);
  typename MuonAutoSteps<T>::Options o;
  o.momentum = T(0);
  o.nesterov = false;
  o.lr = T(1);
  o.precondition.plan_quantile = c.p;
  o.precondition.plan_tau = c.tau;
  o.precondition.plan_max_steps = c.max_steps;
  if (c.polar_express) o.precondition.schedule = schedules::PolarExpress::schedule();
  MuonAutoSteps<T> opt(o);
  Mat w = Mat::Zero(g.rows(), g.cols());
  auto s = opt.make_state(w);
  opt.step(w, g, s);
  // The library's q comes from the Gram's eigenvalues: sigma^2 to about 1e-16 r, so sigma to about 1e-16 r / 2q.
  CHECK(std::abs(s.precondition.quantile - q) <= 1e-15 / q);
  CHECK(s.precondition.ns_steps == k);
  CHECK(s.precondition.ns_work == k);
  const double scale = std::sqrt(std::max(1.0, double(g.rows()) / double(g.cols())));  // MuonOriginal
  // Rounding in NS grows with K (each step multiplies small directions by up to a): 3.5e-5 (float) and 2e-13
  // (double) measured at K = 8.
  CHECK(rel_error(w, -scale * ns_closed_form(g_seen, c.scalar(), k)) <= (std::is_same_v<T, float> ? 1e-4 : 1e-12));
}
}  // namespace

TEST_CASE_TEMPLATE("AutoSteps plans with its own quantile p, tau, max steps and schedule (exact SVD, scalar maps)", T,
                   float, double) {
  // A 12 x 20 gradient whose normalized singular values have a tail: q(0.05) is about 9.4e-5 (between the two
  // smallest), q(0.3) about 4e-3 (between the 4th and 5th: the interpolation counts).
  Eigen::VectorXd sigma(12);
  sigma << 1e-4, 2e-4, 3e-4, 5e-3, 0.01, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1;
  const Eigen::MatrixXd g = 50 * with_singular_values(sigma, 20, 11);
  const PlanCase defaults{"defaults", 0.05, 0.5, 10, false};
  const std::vector<PlanCase> cases{defaults,
                                    {"quantile 0.3", 0.3, 0.5, 10, false},
                                    {"tau 0.1", 0.05, 0.1, 10, false},
                                    {"max 3 steps", 0.05, 0.5, 3, false},
                                    {"Polar Express", 0.05, 0.5, 10, true},
                                    {"all four", 0.3, 0.1, 3, true}};
  // Each option moves K on its own, so a planner that ignored one would plan another K: every case but the
  // defaults plans differently from them, and "all four" from itself with p, tau or the schedule reset.
  const auto plan = [&](const PlanCase& c) {
    return planned_steps(c.scalar(), exact_sv_quantile(g, c.p), c.tau, c.max_steps);
  };
  for (std::size_t i = 1; i < cases.size(); ++i) CHECK(plan(cases[i]) != plan(defaults));
  CHECK(plan(cases[5]) != plan({"", 0.05, 0.1, 3, true}));
  CHECK(plan(cases[5]) != plan({"", 0.3, 0.5, 3, true}));
  CHECK(plan(cases[5]) != plan({"", 0.3, 0.1, 3, false}));
  CHECK(plan(cases[3]) < planned_steps(kJordan, exact_sv_quantile(g, 0.05), 0.5, 1000));  // the cap binds
  for (const PlanCase& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    for (bool tall : {false, true}) {
      CAPTURE(tall);
      const Eigen::MatrixXd gt = tall ? Eigen::MatrixXd(g.transpose()) : g;
      check_planned_step<RowMat<T>>(gt, c);
      check_planned_step<ColMat<T>>(gt, c);
    }
  }
}

namespace {
/// 250 steps of default MuonAutoSteps but U = G (no momentum), lr 1, in storage Mat: G is A for calls 0-49, B for
/// 50-149, A again from 150. The plan is made at calls 0, 100 and 200 only (for A, B and A) and kept between.
template <class Mat>
void check_replan_interval(const Eigen::MatrixXd& a64, const Eigen::MatrixXd& b64) {
  using T = typename Mat::Scalar;
  const Mat a = a64.cast<T>(), b = b64.cast<T>();
  const Eigen::MatrixXd a_seen = a.template cast<double>(), b_seen = b.template cast<double>();
  const double qa = exact_sv_quantile(a_seen, 0.05), qb = exact_sv_quantile(b_seen, 0.05);
  const int ka = planned_steps(kJordan, qa, 0.5, 10), kb = planned_steps(kJordan, qb, 0.5, 10);
  CAPTURE(ka);
  CAPTURE(kb);
  CHECK(ka != kb);  // so a plan made at the wrong call shows
  typename MuonAutoSteps<T>::Options o;
  o.momentum = T(0);
  o.nesterov = false;
  o.lr = T(1);
  MuonAutoSteps<T> opt(o);
  Mat w = Mat::Zero(a.rows(), a.cols());
  auto s = opt.make_state(w);
  const double scale = std::sqrt(std::max(1.0, double(a.rows()) / double(a.cols())));  // MuonOriginal
  std::int64_t work = 0;
  double measured = -1;
  for (int call = 0; call < 250; ++call) {
    CAPTURE(call);
    const bool on_b = call >= 50 && call < 150;
    const Mat w_before = w;
    opt.step(w, on_b ? b : a, s);
    const bool planned_b = call >= 100 && call < 200;  // the check at call 100 saw B, those at 0 and 200 saw A
    const int k = planned_b ? kb : ka;
    work += k;
    CHECK(s.precondition.ns_steps == k);
    CHECK(s.precondition.calls == call + 1);
    CHECK(s.precondition.ns_work == work);
    if (call % 100 == 0) {
      const double q = planned_b ? qb : qa;
      CHECK(std::abs(s.precondition.quantile - q) <= 1e-15 / q);
      measured = s.precondition.quantile;
    }
    CHECK(s.precondition.quantile == measured);  // not re-measured between checks
    // The kept plan is what runs: call 50 steps B with A's K, call 100 with B's own.
    if (call == 50 || call == 100) {
      const Eigen::MatrixXd delta = (w - w_before).template cast<double>();
      CHECK(rel_error(delta, -scale * ns_closed_form(b_seen, kJordan, k)) <= (std::is_same_v<T, float> ? 1e-4 : 1e-12));
    }
  }
}
}  // namespace

TEST_CASE_TEMPLATE("AutoSteps re-plans every 100 steps by default, at calls 0, 100 and 200, and keeps the plan between",
                   T, float, double) {
  CHECK(AutoSteps<>::Options{}.plan_every == 100);
  CHECK(typename MuonAutoSteps<T>::Options{}.precondition.plan_every == 100);
  // A flat spectrum (q about 0.2: one Jordan step) and one with a tail at 1e-4 (seven steps), 12 x 20.
  Eigen::VectorXd flat(12), tail(12);
  for (Index i = 0; i < 12; ++i) flat[i] = 0.8 + 0.05 * double(i);
  tail << 1e-4, 2e-4, 3e-4, 5e-3, 0.01, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1;
  const Eigen::MatrixXd a = 10 * with_singular_values(flat, 20, 21), b = 10 * with_singular_values(tail, 20, 23);
  check_replan_interval<RowMat<T>>(a, b);
  check_replan_interval<ColMat<T>>(a.transpose(), b.transpose());
}

TEST_CASE_TEMPLATE("AutoSteps on a zero gradient, one row and one column", T, float, double) {
  // Zero U: q = 0, the schedule's own 5 steps, W unchanged.
  AutoMuon<T> opt;
  RowMat<T> w = RowMat<T>::Ones(4, 7);
  auto s = opt.make_state(w);
  opt.step(w, RowMat<T>::Zero(4, 7), s);
  CHECK(s.precondition.quantile == 0);
  CHECK(s.precondition.ns_steps == 5);
  CHECK(w == RowMat<T>::Ones(4, 7));
  if constexpr (std::is_same_v<T, double>) {
    // Rank 2 of 12: the 5% quantile falls on zero singular values (1e-16 after rounding), below the 1e-7
    // resolution: q reads 0 and the schedule's 5 steps run, as for a zero U.
    Eigen::VectorXd sigma = Eigen::VectorXd::Zero(12);
    sigma[10] = 0.5;
    sigma[11] = 1;
    AutoMuon<double> low;
    RowMat<double> wl = RowMat<double>::Zero(12, 20);
    auto sl = low.make_state(wl);
    low.step(wl, RowMat<double>(with_singular_values(sigma, 20, 9)), sl);
    CHECK(sl.precondition.quantile == 0);
    CHECK(sl.precondition.ns_steps == 5);
  }
  // 1 x n and n x 1: the one normalized singular value is 1, one step suffices: NS's input is s U / ||U|| with
  // s = ||U|| / (||U|| + eps) (eps 1e-7), and D = p(s) U / ||U||.
  const auto p = [](double x) { return x * (3.4445 + x * x * (-4.7750 + x * x * 2.0315)); };
  for (bool row : {true, false}) {
    CAPTURE(row);
    const RowMat<T> g = (row ? randn(1, 9, 4) : randn(9, 1, 4)).cast<T>();
    typename AutoMuon<T>::Options o;
    o.momentum = T(0);  // U = G
    o.nesterov = false;
    o.lr = T(1);
    AutoMuon<T> one(o);
    RowMat<T> w1 = RowMat<T>::Zero(g.rows(), g.cols());
    auto s1 = one.make_state(w1);
    one.step(w1, g, s1);
    CHECK(s1.precondition.ns_steps == 1);
    const double scale = row ? 1.0 : 3.0;  // MuonOriginal: max(1, m/n)^(1/2)
    const double norm = g.template cast<double>().norm();
    CHECK(rel_error(w1.template cast<double>(), (-scale * p(norm / (norm + 1e-7)) / norm) * g.template cast<double>()) <=
          tol<T>());
  }
}

TEST_CASE("AutoSteps refuses options it cannot plan for, naming the key") {
  using O = typename AutoMuon<double>::Options;
  auto refuses = [](O o, const char* message) {
    CAPTURE(message);
    CHECK_THROWS_WITH_AS(AutoMuon<double>{o}, doctest::Contains(message), std::invalid_argument);
  };
  O o;
  o.precondition.plan_quantile = 0;
  refuses(o, "ns_plan_quantile must be in (0, 1] (got 0");
  o = O{};
  o.precondition.plan_every = 0;
  refuses(o, "ns_plan_every must be >= 1");
  o = O{};
  o.precondition.plan_max_steps = 0;
  refuses(o, "ns_plan_max_steps must be in [1, 1000]");
  o = O{};
  o.precondition.plan_tau = -1;
  refuses(o, "ns_plan_tau");
  o = O{};
  o.precondition.schedule.aol = true;
  refuses(o, "ns_aol: ns_steps=auto plans for the Frobenius-normalized input");
  o = O{};
  o.precondition.heads = 2;
  refuses(o, "heads / split_sizes: ns_steps=auto plans the whole matrix");
  // A state whose plan is longer than the options allow (e.g. loaded from a run with ns_plan_max_steps 50) is
  // refused at step, changing nothing.
  AutoMuon<double> opt;
  RowMat<double> w = randn(5, 8, 1), g = randn(5, 8, 2);
  auto s = opt.make_state(w);
  opt.step(w, g, s);
  s.precondition.ns_steps = 50;
  const RowMat<double> w_before = w;
  const auto calls = s.precondition.calls;
  CHECK_THROWS_WITH_AS(opt.step(w, g, s),
                       doctest::Contains("state plans 50 Newton-Schulz steps but ns_plan_max_steps 10 and ns_steps 5"),
                       std::invalid_argument);
  CHECK(w == w_before);
  CHECK(s.precondition.calls == calls);
}

// SPDX-License-Identifier: MIT
#pragma once
// Optimizer-step cases shared by the Thrust suite (tests/test_thrust.cpp: ThrustEngine, on Thrust's CPP/OMP
// system, and on its CUDA system through tests/gpu/test_thrust_cuda.cu) and the CUDA suite
// (tests/gpu/test_cuda.cu: cuda::Engine): every preset and the compositions against the host (through
// tests/device_compare.hpp), extreme magnitudes and zero gradients, the non-finite policies, bad input.
// The including file defines, before including this header:
//   MATOPT_BACKEND             a string literal that starts every test name, as for tests/device_cases.hpp;
//   MATOPT_COMPOSITION_TYPES   the scalar types of the compositions case (`float` or `float, double`);
//   matopt::test::Backend      as for tests/device_cases.hpp (Engine, optimizer<Opt>, before_step), and
//                                static const std::vector<std::pair<Index, Index>>& shapes();
//                              the odd shapes (1 x n, n x 1, empty, tall, wide) and any of the engine's
//                              kernel paths.

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <thrust/count.h>

#include <matopt/matopt.hpp>

#include "device_compare.hpp"
#include "test_support.hpp"

namespace matopt::test::cases {

/// A scaling of one's own, written once with the engine's operations (docs/extending.md#a-new-scaling): D's
/// direction with G's Frobenius norm, W <- (1 - lr lambda) W - lr (||G|| / max(||D||, eps)) D.
struct GraftToGradient {
  struct Options {
    double eps = 1e-12;
  };
  template <class T>
  struct State {
    T last_ratio = T(1);
    template <class F>
    void fields(F&& f) {
      f("last_ratio", last_ratio);
    }
  };
  static constexpr const char* name() { return "GraftToGradient"; }
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("graft_eps", o.eps, checks::Positive{}, "the floor of ||D||_F in the ratio");
  }
  static double factor(const Options&, Index, Index) { return 1.0; }
  template <class T>
  static T effective_lr(const Options&, const State<T>& st, T lr, Index, Index) {
    return lr * st.last_ratio;
  }
  template <class T, class Engine, class W, class D, class G>
  static void update(Engine& e, W& w, const D& d, const G& g, State<T>& st, const Options& o, T lr, T lambda) {
    const T ratio = e.norm(g) / std::max(e.norm(d), T(o.eps));
    st.last_ratio = ratio;
    e.update(w, T(1) - lr * lambda, lr * ratio, d);
  }
};

/// A scaling of one's own that keeps no state, so row blocks take it: W <- (1 - lr lambda) W - lr sqrt(m n) D /
/// max(||D||_F, eps), each row block with its own shape and norm (a split_groups block's runs together).
struct UnitRmsStep {
  struct Options {};
  template <class T>
  struct State {
    template <class F>
    void fields(F&&) {}
  };
  static constexpr const char* name() { return "UnitRmsStep"; }
  template <class O, class D>
  static void describe(O&, D&) {}
  static double factor(const Options&, Index, Index) { return 1.0; }
  template <class T>
  static T effective_lr(const Options&, const State<T>&, T lr, Index, Index) {
    return lr;
  }
  template <class T, class Engine, class W, class D, class G>
  static void update(Engine& e, W& w, const D& d, const G&, State<T>&, const Options&, T lr, T lambda) {
    const T step = lr * std::sqrt(T(e.rows(w)) * T(e.cols(w))) / std::max(e.norm(d), T(1e-12));
    e.update(w, T(1) - lr * lambda, step, d);
  }
};

/// A second moment of one's own, written once with the engine's operations (docs/extending.md#a-new-second-moment):
/// per column j of D, S_j <- b S_j + (1 - b) ||D_:j||^2 and D'_:j = D_:j / (sqrt(S_j) + eps), then D' rescaled to
/// ||U||_F / (||D'||_F + eps). S and the factors on the host; ||U||_F from the driver.
struct ColumnMoment {
  struct Options {
    double beta2 = 0.9;
    double eps = 1e-8;
  };
  static constexpr const char* name() { return "ColumnMoment"; }
  static constexpr bool sign_input = false;
  static constexpr bool engine_state = false;
  static constexpr bool reads_input_norm = true;
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("column_beta2", o.beta2, checks::UnitInterval{}, "beta2 of the column moment");
  }
  static Index state_size(Index, Index n) { return n; }
  static Index workspace_size(Index, Index n) { return n; }
  template <class T, class E, class D, class GNorm, class UNorm, class Sink>
  static void apply(E& e, const D& d, const Options& o, T* s, T* f, GNorm&&, UNorm&& u_norm, Sink&& sink) {
    e.line_squared_norms(d, false, f);
    for (Index j = 0; j < e.cols(d); ++j) {
      s[j] = T(o.beta2) * s[j] + T(1 - o.beta2) * f[j];
      f[j] = T(1) / (std::sqrt(s[j]) + T(o.eps));
    }
    const T u = T(u_norm());
    e.scale_lines(d, false, static_cast<const T*>(f),
                  [&](const auto& x) { e.scaled(x, u / (e.norm(x) + T(o.eps)), sink); });
  }
};

/// One device step of Opt (options o) from W0 = randn(7) with G = randn(8), both rounded to T, on 20 x 12, 12 x 28 and
/// 16 x 16 in both storage orders; check(w0, g, w1, state) compares W1 and the state with a closed form (in double).
template <class Opt, class Check>
void one_step_against(const typename Opt::Options& o, Check&& check) {
  using T = typename Opt::Scalar;
  for (const auto& shape : std::vector<std::pair<Index, Index>>{{20, 12}, {12, 28}, {16, 16}})
    for (const Layout layout : {Layout::RowMajor, Layout::ColMajor}) {
      const Index m = shape.first, n = shape.second;
      const std::string order = matopt::detail::layout_name(layout);
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(order);
      const Eigen::MatrixXd w0 = test::randn<Eigen::MatrixXd>(m, n, 7).template cast<T>().template cast<double>();
      const Eigen::MatrixXd g = test::randn<Eigen::MatrixXd>(m, n, 8).template cast<T>().template cast<double>();
      auto dev = test::Backend::template optimizer<Opt>(o);
      DeviceMatrix<T> dw(m, n, layout), dg(m, n, layout);
      dw.assign(w0.template cast<T>());
      dg.assign(g.template cast<T>());
      auto ds = dev.make_state(dw);
      test::Backend::before_step(dev);
      dev.step(dw, dg, ds);
      const Eigen::MatrixXd w1 = to_host(dw).template cast<double>();
      check(w0, g, w1, ds);
    }
}

/// Opt on the backend against the host on every shape of Backend::shapes().
template <class Opt>
DeviceDifferences compare_all_shapes(const typename Opt::Options& options = {}, const GradientFn& gradient = {}) {
  return compare_on<Backend, Opt>(options, Backend::shapes(), gradient);
}

}  // namespace matopt::test::cases

TEST_CASE_TEMPLATE(MATOPT_BACKEND ": every preset equals the Eigen backend", T, float, double) {
  using matopt::test::cases::compare_all_shapes;
  SUBCASE("Muon") { compare_all_shapes<matopt::Muon<T>>(); }
  SUBCASE("MoonlightMuon") { compare_all_shapes<matopt::MoonlightMuon<T>>(); }
  SUBCASE("RMNP") { compare_all_shapes<matopt::RMNP<T>>(); }
  SUBCASE("ColNorm") { compare_all_shapes<matopt::ColNorm<T>>(); }
  SUBCASE("ColNorm with cautious weight decay (the one-pass step on transposes, masked)") {
    typename matopt::ColNorm<T>::Options o;
    o.weight_decay = T(0.1);
    o.scaling.weight_decay_method = matopt::WeightDecay::Cautious;
    compare_all_shapes<matopt::ColNorm<T>>(o);
  }
  SUBCASE("OrScale") { compare_all_shapes<matopt::OrScale<T>>(); }
  SUBCASE("Dion") {  // the same pseudo-random Q on both (seeded by the shape); rank fraction 1 and 0.5
    compare_all_shapes<matopt::Dion<T>>();
    typename matopt::Dion<T>::Options o;
    o.precondition.rank_fraction = 0.5;
    compare_all_shapes<matopt::Dion<T>>(o);
  }
  SUBCASE("MuonAutoSteps") {  // planned on the first step, then every second step (plans from downloaded U)
    compare_all_shapes<matopt::MuonAutoSteps<T>>();
    typename matopt::MuonAutoSteps<T>::Options o;
    o.precondition.plan_every = 2;
    compare_all_shapes<matopt::MuonAutoSteps<T>>(o);
  }
  SUBCASE("OrScale-LM (calibrated trust ratio, coupled decay)") {
    typename matopt::OrScale<T>::Options o;
    o.scaling.calibrate = true;
    o.scaling.clip_min = 0.1;
    o.scaling.clip_max = 5.0;
    o.weight_decay = T(0.01);
    compare_all_shapes<matopt::OrScale<T>>(o);
  }
}

TEST_CASE_TEMPLATE(MATOPT_BACKEND ": compositions (Gram NS, plain NS, LARS, unfused normalization, sign)", T,
                   MATOPT_COMPOSITION_TYPES) {
  using namespace matopt;
  using test::cases::compare_all_shapes;
  SUBCASE("Gram Newton-Schulz, forced") {
    compare_all_shapes<Optimizer<T, Orthogonalize<GramNewtonSchulz<schedules::PolarExpress>>, Momentum<Sum, Nesterov>,
                                 Static<shape::MuonOriginal>>>();
  }
  SUBCASE("plain Newton-Schulz on a strongly rectangular matrix, with weight decay") {
    typename Muon<T>::Options o;
    o.precondition.variant = NsVariant::Plain;
    o.weight_decay = T(0.1);
    test::compare_on<test::Backend, Muon<T>>(o, {{6, 50}, {50, 6}});
  }
  SUBCASE("LARS trust ratio on row normalization (the unfused path), no Nesterov") {
    using Opt = Optimizer<T, RowNormalize, Momentum<Ema, Plain>, TrustRatio<trust::Lars, shape::Unit>>;
    typename Opt::Options o;
    o.weight_decay = T(0.001);
    compare_all_shapes<Opt>(o);
  }
  SUBCASE("column normalization with TrustRatio") {
    compare_all_shapes<Optimizer<T, ColNormalize, Momentum<Sum, Nesterov>, TrustRatio<trust::OrScale, shape::Unit>>>();
  }
  SUBCASE("sign descent without momentum; identity with momentum") {
    compare_all_shapes<Optimizer<T, Sign, NoMomentum, Static<shape::Unit>>>();
    compare_all_shapes<Optimizer<T, Identity, Momentum<Ema, Nesterov>, Static<shape::Spectral>>>();
  }
  SUBCASE("a scaling of one's own, written once (GraftToGradient, docs/extending.md)") {
    // One step against the closed form, computed here in double: U = G (Sum from zero), D = G's rows normalized
    // (||D||_F = sqrt(m)), W1 = (1 - lr lambda) W0 - lr (||G||_F / sqrt(m)) D.
    using Opt = Optimizer<T, RowNormalize, Momentum<Sum, Plain>, test::cases::GraftToGradient>;
    typename Opt::Options o;
    o.lr = T(0.1);
    o.weight_decay = T(0.01);
    test::cases::one_step_against<Opt>(o, [](const Eigen::MatrixXd& w0, const Eigen::MatrixXd& g,
                                             const Eigen::MatrixXd& w1, const auto& ds) {
      const double m = double(g.rows());
      const Eigen::MatrixXd d = g.rowwise().norm().cwiseInverse().asDiagonal() * g;
      const Eigen::MatrixXd want = (1 - 0.1 * 0.01) * w0 - 0.1 * (g.norm() / std::sqrt(m)) * d;
      CHECK(test::rel_error(w1, want) <= (std::is_same_v<T, float> ? 1e-6 : 1e-14));
      CHECK(double(ds.scaling.last_ratio) == doctest::Approx(g.norm() / std::sqrt(m)).epsilon(1e-6));
    });
    // Three steps against the host, every shape (W and the state).
    compare_all_shapes<Opt>(o);
  }
  SUBCASE("a scaling of one's own without state, on row blocks (heads; Megatron's split_groups, gathered)") {
    using Opt = Optimizer<T, Orthogonalize<>, Momentum<Ema, Nesterov>, test::cases::UnitRmsStep>;
    typename Opt::Options heads;
    heads.weight_decay = T(0.01);
    heads.precondition.heads = 4;
    test::compare_on<test::Backend, Opt>(heads, {{16, 12}, {12, 28}, {16, 16}});
    typename Opt::Options groups = heads;
    groups.precondition.heads = 1;
    groups.precondition.split_sizes = {4, 2, 2};
    groups.precondition.split_groups = 2;
    test::compare_on<test::Backend, Opt>(groups, {{16, 12}, {16, 28}});
  }
  SUBCASE("a second moment of one's own, written once (ColumnMoment, docs/extending.md)") {
    // One step against the closed form, computed here in double: U = D = G (Identity, Sum from zero),
    // S_j = (1 - b) ||G_:j||^2, D'_:j = G_:j / (sqrt(S_j) + eps), D'' = D' ||G||_F / (||D'||_F + eps),
    // W1 = W0 - lr D''.
    using Opt =
        Optimizer<T, SecondMoment<Identity, test::cases::ColumnMoment>, Momentum<Sum, Plain>, Static<shape::Unit>>;
    typename Opt::Options o;
    o.lr = T(0.1);
    test::cases::one_step_against<Opt>(o, [](const Eigen::MatrixXd& w0, const Eigen::MatrixXd& g,
                                             const Eigen::MatrixXd& w1, const auto& ds) {
      const Eigen::VectorXd s = 0.1 * g.colwise().squaredNorm().transpose();
      const Eigen::MatrixXd d1 = g * (s.cwiseSqrt().array() + 1e-8).inverse().matrix().asDiagonal();
      const Eigen::MatrixXd want = w0 - 0.1 * (g.norm() / (d1.norm() + 1e-8)) * d1;
      const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-14;
      CHECK(test::rel_error(w1, want) <= tol);
      CHECK(test::rel_error(ds.precondition.second_moment.template cast<double>(), s) <= tol);
    });
    // Three steps against the host, every shape (W and S); per-head blocks of an Orthogonalize inner.
    compare_all_shapes<Opt>(o);
    using Heads = Optimizer<T, SecondMoment<Orthogonalize<>, test::cases::ColumnMoment>, Momentum<Ema, Nesterov>,
                            Static<shape::Spectral>>;
    typename Heads::Options heads;
    heads.precondition.heads = 4;
    test::compare_on<test::Backend, Heads>(heads, {{16, 12}, {12, 28}, {16, 16}});
  }
}

TEST_CASE_TEMPLATE(MATOPT_BACKEND ": extreme magnitudes and zero gradients give no NaN", T, float, double) {
  using namespace matopt;
  using Opt = RMNP<T>;
  // Squares of `tiny` underflow and of `huge` overflow. Rows of up to 256, 4096, 8192 and more elements: every
  // row-kernel path of the CUDA engine; column-major storage takes the two-pass kernels across the lines.
  const double tiny = std::is_same_v<T, float> ? 1e-30 : 1e-200, huge = std::is_same_v<T, float> ? 1e30 : 1e200;
  for (const auto& shape : std::vector<std::pair<Index, Index>>{{6, 9}, {6, 300}, {4, 5000}, {3, 9000}}) {
    const Index m = shape.first, n = shape.second;  // no structured bindings: CAPTURE's lambda captures them
    for (const double magnitude : {tiny, huge, 0.0}) {
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(magnitude);
      const Eigen::MatrixXd w0 = test::randn(m, n, 3), g = test::randn(m, n, 4) * magnitude;
      Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> w = w0.cast<T>();
      Opt host;
      auto hs = host.make_state(w);
      host.step(w, decltype(w)(g.cast<T>()), hs);
      for (const Layout layout : {Layout::RowMajor, Layout::ColMajor}) {
        CAPTURE(int(layout));
        auto dev = test::Backend::template optimizer<Opt>({});
        DeviceMatrix<T> dw = test::detail::device_copy<T>(w0, layout);
        auto ds = dev.make_state(dw);
        test::Backend::before_step(dev);
        dev.step(dw, test::detail::device_copy<T>(g, layout), ds);
        const Eigen::MatrixXd got = to_host(dw).template cast<double>();
        REQUIRE(got.allFinite());
        CHECK(test::rel_error(got, w.template cast<double>()) <= 1e-6);
      }
    }
  }
  // Muon and OrScale on a zero gradient: W unchanged (Muon) and finite.
  const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> w = test::randn<Eigen::Matrix<T, -1, -1>>(5, 8, 5);
  DeviceMatrix<T> dw(w), dg(5, 8, Layout::ColMajor);
  auto muon = test::Backend::template optimizer<Muon<T>>({});
  auto s = muon.make_state(dw);
  test::Backend::before_step(muon);
  muon.step(dw, dg, s);
  CHECK(test::rel_error(to_host(dw), w) == 0.0);
  auto orscale = test::Backend::template optimizer<OrScale<T>>({});
  auto so = orscale.make_state(dw);
  test::Backend::before_step(orscale);
  orscale.step(dw, dg, so);
  CHECK(to_host(dw).allFinite());
}

TEST_CASE_TEMPLATE(MATOPT_BACKEND ": non-finite gradients (throw, skip, zero) as on the host", T, float, double) {
  using namespace matopt;
  using Opt = Muon<T>;
  using HostMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Index m = 4, n = 6;
  const HostMat w0 = test::randn<HostMat>(m, n, 7);
  HostMat g = test::randn<HostMat>(m, n, 8);
  g(1, 2) = std::numeric_limits<T>::quiet_NaN();
  g(3, 0) = std::numeric_limits<T>::infinity();
  const DeviceMatrix<T> dg(g);
  typename Opt::Options o;
  DeviceMatrix<T> dw(w0);
  // One device step on dw with the options `o` as set by then; returns the state.
  const auto device_step = [&] {
    auto dev = test::Backend::template optimizer<Opt>(o);
    auto ds = dev.make_state(dw);
    test::Backend::before_step(dev);
    dev.step(dw, dg, ds);
    return ds;
  };

  SUBCASE("throw: error, W and state unchanged") {
    auto dev = test::Backend::template optimizer<Opt>(o);
    auto ds = dev.make_state(dw);
    test::Backend::before_step(dev);
    CHECK_THROWS_WITH_AS(dev.step(dw, dg, ds), doctest::Contains("non-finite"), std::invalid_argument);
    CHECK(to_host(dw) == w0);
    CHECK(ds.steps == 0);
    CHECK(thrust::count(ds.momentum.begin(), ds.momentum.end(), T(0)) == m * n);
  }
  SUBCASE("skip: counted, W unchanged") {
    o.non_finite = NonFinite::Skip;
    const auto ds = device_step();
    CHECK(ds.skipped == 1);
    CHECK(ds.steps == 0);
    CHECK(to_host(dw) == w0);
  }
  SUBCASE("zero: the host's zeroed step") {
    o.non_finite = NonFinite::Zero;
    Opt host(o);
    HostMat w = w0;
    auto hs = host.make_state(w);
    host.step(w, g, hs);
    const auto ds = device_step();
    CHECK(ds.zeroed == 1);
    CHECK(ds.steps == 1);
    CHECK(test::rel_error(to_host(dw), w) <= 1e-6);
  }
}

TEST_CASE(MATOPT_BACKEND ": bad input names the parameter and shapes, and changes nothing") {
  using namespace matopt;
  using Opt = RMNP<float>;
  auto dev = test::Backend::template optimizer<Opt>({});
  const auto w0 = test::randn<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(3, 4, 1);
  DeviceMatrix<float> dw(w0), g_wrong(4, 3), g_col(3, 4, Layout::ColMajor), other(2, 2), g_ok(3, 4);
  auto ds = dev.make_state(dw);
  CHECK_THROWS_WITH_AS(dev.step(dw, g_wrong, ds), doctest::Contains("G is 4x3 but W is 3x4"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(dev.step(dw, g_col, ds), doctest::Contains("column-major"), std::invalid_argument);
  auto small = dev.make_state(other);
  CHECK_THROWS_WITH_AS(dev.step(dw, g_ok, small), doctest::Contains("state was made for a 2x2"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(dev.step(DeviceMatrixView<float>{nullptr, 3, 4, Layout::RowMajor}, dw.view(), ds),
                       doctest::Contains("null data"), std::invalid_argument);
  dev.options().lr = -1.0f;
  CHECK_THROWS_WITH_AS(dev.step(dw, g_ok, ds), doctest::Contains("lr"), std::invalid_argument);
  CHECK(to_host(dw) == w0);
  CHECK(ds.steps == 0);
  Opt::Options bad;
  bad.momentum = 1.5f;
  CHECK_THROWS_WITH_AS(test::Backend::template optimizer<Opt>(bad), doctest::Contains("momentum"),
                       std::invalid_argument);
}

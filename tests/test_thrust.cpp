// The Thrust backend against the Eigen backend (issue: GPU backends). Built with g++ and Thrust's CPP or
// OMP device system in CI (the whole suite on the CPU), and as CUDA source (label gpu) when
// MATOPT_THRUST_DEVICE_SYSTEM=CUDA. Every preset, both storage orders, float and double, odd shapes;
// non-finite policies and bad input leave W and state unchanged. The cases shared with the CUDA suite
// (ExactPolar, checkpoints between host and device, spectral diagnostics) run on Thrust from
// tests/test_thrust_cases.cpp.

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <thrust/count.h>

#include <matopt/backend/thrust.hpp>
#include <matopt/matopt.hpp>

#include "device_compare.hpp"
#include "test_support.hpp"

namespace {

using matopt::Index;
using matopt::Layout;
using matopt::test::rel_error;

template <class T, int Order>
using HostMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>;

/// `steps` steps of the host optimizer (storage order Order) and of its Thrust twin (the same storage order)
/// on the same inputs, compared after every step (tests/device_compare.hpp).
template <class Opt, int Order>
matopt::test::DeviceDifferences compare_with_host(Index m, Index n, int steps, typename Opt::Options options = {},
                                                  const matopt::test::GradientFn& gradient = {}) {
  const Layout layout = Order == Eigen::RowMajor ? Layout::RowMajor : Layout::ColMajor;
  return matopt::test::compare_device_with_host<Opt, Order>(
      m, n, steps, options, {layout},
      [](const typename Opt::Options& o) { return matopt::DeviceOptimizer<Opt, matopt::ThrustEngine>(o); },
      [](auto&) {}, gradient);
}

template <class Opt>
matopt::test::DeviceDifferences compare_all_shapes(typename Opt::Options options = {},
                                                   const matopt::test::GradientFn& gradient = {}) {
  const std::vector<std::pair<Index, Index>> shapes = {{5, 7}, {7, 5}, {1, 6}, {6, 1}, {0, 4}, {4, 0},
                                                       {16, 16}, {9, 40}, {40, 9}, {24, 33}};
  matopt::test::DeviceDifferences worst;
  for (const auto& [m, n] : shapes) {
    worst.merge(compare_with_host<Opt, Eigen::RowMajor>(m, n, 3, options, gradient));
    worst.merge(compare_with_host<Opt, Eigen::ColMajor>(m, n, 3, options, gradient));
  }
  return worst;
}

}  // namespace

TEST_CASE_TEMPLATE("thrust backend: every preset equals the Eigen backend", T, float, double) {
  SUBCASE("Muon") { compare_all_shapes<matopt::Muon<T>>(); }
  SUBCASE("MoonlightMuon") { compare_all_shapes<matopt::MoonlightMuon<T>>(); }
  SUBCASE("RMNP") { compare_all_shapes<matopt::RMNP<T>>(); }
  SUBCASE("ColNorm") { compare_all_shapes<matopt::ColNorm<T>>(); }
  SUBCASE("OrScale") { compare_all_shapes<matopt::OrScale<T>>(); }
  SUBCASE("OrScale-LM (calibrated trust ratio, coupled decay)") {
    typename matopt::OrScale<T>::Options o;
    o.scaling.calibrate = true;
    o.scaling.clip_min = 0.1;
    o.scaling.clip_max = 5.0;
    o.weight_decay = T(0.01);
    compare_all_shapes<matopt::OrScale<T>>(o);
  }
}

TEST_CASE_TEMPLATE("thrust backend: compositions (Gram NS, plain NS, LARS, unfused normalization, sign)", T, float,
                   double) {
  using namespace matopt;
  SUBCASE("Gram Newton-Schulz, forced") {
    using Opt = Optimizer<T, Orthogonalize<GramNewtonSchulz<schedules::PolarExpress>>, Momentum<Sum, Nesterov>,
                          Static<shape::MuonOriginal>>;
    compare_all_shapes<Opt>();
  }
  SUBCASE("plain Newton-Schulz on a strongly rectangular matrix, with weight decay") {
    using Opt = Muon<T>;
    typename Opt::Options o;
    o.precondition.variant = NsVariant::Plain;
    o.weight_decay = T(0.1);
    compare_with_host<Opt, Eigen::RowMajor>(6, 50, 3, o);
    compare_with_host<Opt, Eigen::ColMajor>(50, 6, 3, o);
  }
  SUBCASE("LARS trust ratio on row normalization (the unfused path), no Nesterov") {
    using Opt = Optimizer<T, RowNormalize, Momentum<Ema, Plain>, TrustRatio<trust::Lars, shape::Unit>>;
    typename Opt::Options o;
    o.weight_decay = T(0.001);
    compare_all_shapes<Opt>(o);
  }
  SUBCASE("column normalization with TrustRatio") {
    using Opt = Optimizer<T, ColNormalize, Momentum<Sum, Nesterov>, TrustRatio<trust::OrScale, shape::Unit>>;
    compare_all_shapes<Opt>();
  }
  SUBCASE("sign descent without momentum; identity with momentum") {
    compare_all_shapes<Optimizer<T, Sign, NoMomentum, Static<shape::Unit>>>();
    compare_all_shapes<Optimizer<T, Identity, Momentum<Ema, Nesterov>, Static<shape::Spectral>>>();
  }
}

TEST_CASE_TEMPLATE("thrust backend: extreme magnitudes and zero gradients give no NaN", T, float, double) {
  using Opt = matopt::RMNP<T>;
  for (const double magnitude : {1e-30, 1e30, 0.0}) {
    CAPTURE(magnitude);
    const T scale = T(magnitude);  // float: squares of 1e-30 underflow and of 1e30 overflow
    HostMat<T, Eigen::RowMajor> w = matopt::test::randn<HostMat<T, Eigen::RowMajor>>(6, 9, 3);
    const HostMat<T, Eigen::RowMajor> g = matopt::test::randn<HostMat<T, Eigen::RowMajor>>(6, 9, 4) * scale;
    Opt host;
    auto hs = host.make_state(w);
    matopt::DeviceOptimizer<Opt, matopt::ThrustEngine> dev;
    matopt::DeviceMatrix<T> dw(w);
    auto ds = dev.make_state(dw);
    host.step(w, g, hs);
    dev.step(dw, matopt::DeviceMatrix<T>(g), ds);
    const Eigen::MatrixXd got = matopt::to_host(dw).template cast<double>();
    REQUIRE(got.allFinite());
    CHECK(rel_error(got, w.template cast<double>()) <= 1e-6);
  }
  // Muon and OrScale on a zero gradient: W unchanged (Muon) and finite.
  HostMat<T, Eigen::ColMajor> w = matopt::test::randn<HostMat<T, Eigen::ColMajor>>(5, 8, 5);
  matopt::DeviceMatrix<T> dw(w), dg(5, 8, Layout::ColMajor);
  matopt::DeviceOptimizer<matopt::Muon<T>, matopt::ThrustEngine> muon;
  auto s = muon.make_state(dw);
  muon.step(dw, dg, s);
  CHECK(rel_error(matopt::to_host(dw), w) == 0.0);
  matopt::DeviceOptimizer<matopt::OrScale<T>, matopt::ThrustEngine> orscale;
  auto so = orscale.make_state(dw);
  orscale.step(dw, dg, so);
  CHECK(matopt::to_host(dw).allFinite());
}

TEST_CASE_TEMPLATE("thrust backend: non-finite gradients (throw, skip, zero) as on the host", T, float, double) {
  using Opt = matopt::Muon<T>;
  const Index m = 4, n = 6;
  const HostMat<T, Eigen::RowMajor> w0 = matopt::test::randn<HostMat<T, Eigen::RowMajor>>(m, n, 7);
  HostMat<T, Eigen::RowMajor> g = matopt::test::randn<HostMat<T, Eigen::RowMajor>>(m, n, 8);
  g(1, 2) = std::numeric_limits<T>::quiet_NaN();
  g(3, 0) = std::numeric_limits<T>::infinity();
  const matopt::DeviceMatrix<T> dg(g);

  SUBCASE("throw: error, W and state unchanged") {
    matopt::DeviceOptimizer<Opt, matopt::ThrustEngine> dev;
    matopt::DeviceMatrix<T> dw(w0);
    auto ds = dev.make_state(dw);
    CHECK_THROWS_WITH_AS(dev.step(dw, dg, ds), doctest::Contains("non-finite"), std::invalid_argument);
    CHECK(matopt::to_host(dw) == w0.template cast<T>());
    CHECK(ds.steps == 0);
    CHECK(thrust::count(ds.momentum.begin(), ds.momentum.end(), T(0)) == m * n);
  }
  SUBCASE("skip: counted, W unchanged") {
    typename Opt::Options o;
    o.non_finite = matopt::NonFinite::Skip;
    matopt::DeviceOptimizer<Opt, matopt::ThrustEngine> dev(o);
    matopt::DeviceMatrix<T> dw(w0);
    auto ds = dev.make_state(dw);
    dev.step(dw, dg, ds);
    CHECK(ds.skipped == 1);
    CHECK(ds.steps == 0);
    CHECK(matopt::to_host(dw) == w0.template cast<T>());
  }
  SUBCASE("zero: the host's zeroed step") {
    typename Opt::Options o;
    o.non_finite = matopt::NonFinite::Zero;
    Opt host(o);
    HostMat<T, Eigen::RowMajor> w = w0;
    auto hs = host.make_state(w);
    host.step(w, g, hs);
    matopt::DeviceOptimizer<Opt, matopt::ThrustEngine> dev(o);
    matopt::DeviceMatrix<T> dw(w0);
    auto ds = dev.make_state(dw);
    dev.step(dw, dg, ds);
    CHECK(ds.zeroed == 1);
    CHECK(ds.steps == 1);
    CHECK(rel_error(matopt::to_host(dw), w) <= 1e-6);
  }
}

TEST_CASE("thrust backend: bad input names the parameter and shapes, and changes nothing") {
  using Opt = matopt::RMNP<float>;
  matopt::DeviceOptimizer<Opt, matopt::ThrustEngine> dev;
  const HostMat<float, Eigen::RowMajor> w0 = matopt::test::randn<HostMat<float, Eigen::RowMajor>>(3, 4, 1);
  matopt::DeviceMatrix<float> dw(w0), g_wrong(4, 3), g_col(3, 4, Layout::ColMajor), other(2, 2);
  auto ds = dev.make_state(dw);
  CHECK_THROWS_WITH_AS(dev.step(dw, g_wrong, ds), doctest::Contains("G is 4x3 but W is 3x4"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(dev.step(dw, g_col, ds), doctest::Contains("column-major"), std::invalid_argument);
  auto small = dev.make_state(other);
  CHECK_THROWS_WITH_AS(dev.step(dw, matopt::DeviceMatrix<float>(3, 4), small), doctest::Contains("state was made for a 2x2"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(dev.step(matopt::DeviceMatrixView<float>{nullptr, 3, 4, Layout::RowMajor}, dw.view(), ds),
                       doctest::Contains("null data"), std::invalid_argument);
  dev.options().lr = -1.0f;
  CHECK_THROWS_WITH_AS(dev.step(dw, matopt::DeviceMatrix<float>(3, 4), ds), doctest::Contains("lr"),
                       std::invalid_argument);
  CHECK(matopt::to_host(dw) == w0);
  CHECK(ds.steps == 0);
  Opt::Options bad;
  bad.momentum = 1.5f;
  CHECK_THROWS_WITH_AS((matopt::DeviceOptimizer<Opt, matopt::ThrustEngine>(bad)), doctest::Contains("momentum"),
                       std::invalid_argument);
}

TEST_CASE("thrust backend: a non-owning view of a framework's buffer, and a workspace sized once") {
  using Opt = matopt::Muon<float>;
  thrust::device_vector<float> wbuf(8 * 12), gbuf(8 * 12);
  const HostMat<float, Eigen::RowMajor> w0 = matopt::test::randn<HostMat<float, Eigen::RowMajor>>(8, 12, 2);
  const HostMat<float, Eigen::RowMajor> g = matopt::test::randn<HostMat<float, Eigen::RowMajor>>(8, 12, 3);
  thrust::copy(w0.data(), w0.data() + w0.size(), wbuf.begin());
  thrust::copy(g.data(), g.data() + g.size(), gbuf.begin());
  const matopt::DeviceMatrixView<float> w{thrust::raw_pointer_cast(wbuf.data()), 8, 12, Layout::RowMajor};
  const matopt::DeviceMatrixView<const float> gv{thrust::raw_pointer_cast(gbuf.data()), 8, 12, Layout::RowMajor};
  matopt::DeviceOptimizer<Opt, matopt::ThrustEngine> dev;
  auto ds = dev.make_state(w);
  const std::size_t bytes = dev.workspace_bytes();
  CHECK(bytes == (2 * 8 * 12 + 2 * 8 * 8) * sizeof(float));  // X, Y (r x s) and A, B (r x r), r = 8
  dev.step(w, gv, ds);
  CHECK(dev.workspace_bytes() == bytes);
  Opt host;
  HostMat<float, Eigen::RowMajor> hw = w0;
  auto hs = host.make_state(hw);
  host.step(hw, g, hs);
  CHECK(rel_error(matopt::to_host(w), hw) <= 1e-6);
}

TEST_CASE_TEMPLATE("thrust backend: diagonal dominance of a device matrix equals the host's", T, float, double) {
  const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-10;
  for (const auto& shape : std::vector<std::pair<Index, Index>>{{6, 20}, {20, 6}, {1, 5}, {8, 8}}) {
    const Index m = shape.first, n = shape.second;
    for (const auto side : {matopt::GramSide::Rows, matopt::GramSide::Short}) {
      CAPTURE(m);
      CAPTURE(n);
      const HostMat<T, Eigen::RowMajor> u = matopt::test::randn<HostMat<T, Eigen::RowMajor>>(m, n, 21);
      const matopt::DeviceMatrix<T> du(u);
      matopt::ThrustEngine engine;
      const matopt::DiagonalDominance got = matopt::diagonal_dominance(engine, du.view(), side);
      const matopt::DiagonalDominance want = matopt::diagonal_dominance(u, side);
      CHECK(got.size == want.size);
      CHECK(got.side == want.side);
      CHECK(got.r_min == doctest::Approx(want.r_min).epsilon(tol));
      CHECK(got.r_avg == doctest::Approx(want.r_avg).epsilon(tol));
      CHECK(got.r_max == doctest::Approx(want.r_max).epsilon(tol));
      CHECK(got.ratio_to_max_min == doctest::Approx(want.ratio_to_max_min).epsilon(tol));
      CHECK(got.gershgorin_min == doctest::Approx(want.gershgorin_min).epsilon(tol).scale(1.0));
    }
  }
}

// ---- SpectralCap and Adaptive on device -----------------------------------------------------------------------

namespace {

using matopt::test::along_w;  // gradients of tests/device_compare.hpp
using matopt::test::rank_one_after_first;

/// The host state after `steps` steps (to show what a case exercises: the cap fired, Adaptive switched).
template <class Opt>
typename Opt::State host_state(Index m, Index n, int steps, const typename Opt::Options& o,
                               const matopt::test::GradientFn& gradient) {
  using T = typename Opt::Scalar;
  HostMat<T, Eigen::RowMajor> w = matopt::test::randn<HostMat<T, Eigen::RowMajor>>(m, n, 11);
  Opt host(o);
  auto s = host.make_state(w);
  for (int k = 0; k < steps; ++k)
    host.step(w, HostMat<T, Eigen::RowMajor>(gradient(k, w.template cast<double>()).template cast<T>()), s);
  return s;
}

template <class T>
std::string type_name() {
  return std::is_same_v<T, float> ? "float" : "double";
}

}  // namespace

TEST_CASE_TEMPLATE("thrust backend: SpectralCap equals the host (Muon-like and RMNP-like, Static and TrustRatio)", T,
                   float, double) {
  using namespace matopt;
  using CappedMuon = Optimizer<T, Orthogonalize<>, Momentum<Ema, Nesterov>, SpectralCap<Static<>>>;
  using CappedRmnp = Optimizer<T, RowNormalize, Momentum<Sum, Nesterov>, SpectralCap<Static<shape::MuonOriginal>>>;
  using CappedOrScale = Optimizer<T, Orthogonalize<NewtonSchulz<schedules::PolarExpress>>, Momentum<Sum, Nesterov>,
                                  SpectralCap<TrustRatio<trust::OrScale, shape::Unit>>>;
  using CappedLars =
      Optimizer<T, RowNormalize, Momentum<Ema, Plain>, SpectralCap<TrustRatio<trust::Lars, shape::Unit>>>;
  test::DeviceDifferences worst;
  SUBCASE("random gradients, every shape and storage order") {
    worst.merge(compare_all_shapes<CappedMuon>());
    worst.merge(compare_all_shapes<CappedRmnp>());
    worst.merge(compare_all_shapes<CappedOrScale>());
    typename CappedLars::Options o;
    o.weight_decay = T(0.001);
    o.scaling.power_iterations = 2;
    o.scaling.initial_iterations = 5;
    worst.merge(compare_all_shapes<CappedLars>(o));
  }
  SUBCASE("the cap fires (c < 0) on every step") {
    CHECK(host_state<CappedMuon>(9, 40, 3, {}, along_w(-1)).scaling.capped == 3);
    CHECK(host_state<CappedRmnp>(40, 9, 3, {}, along_w(-1)).scaling.capped == 3);
    CHECK(host_state<CappedOrScale>(24, 33, 3, {}, along_w(-1)).scaling.capped == 3);
    worst.merge(compare_all_shapes<CappedMuon>({}, along_w(-1)));
    worst.merge(compare_all_shapes<CappedRmnp>({}, along_w(-1)));
    worst.merge(compare_all_shapes<CappedOrScale>({}, along_w(-1)));
  }
  SUBCASE("the cap does not fire: c > 0, or sigma1 below the threshold") {
    CHECK(host_state<CappedMuon>(9, 40, 3, {}, along_w(+1)).scaling.capped == 0);
    CHECK(host_state<CappedRmnp>(40, 9, 3, {}, along_w(+1)).scaling.capped == 0);
    worst.merge(compare_all_shapes<CappedMuon>({}, along_w(+1)));
    worst.merge(compare_all_shapes<CappedRmnp>({}, along_w(+1)));
    typename CappedOrScale::Options o;
    o.scaling.threshold = 1e9;
    const auto s = host_state<CappedOrScale>(24, 33, 3, o, along_w(-1));
    CHECK(s.scaling.capped == 0);
    CHECK(s.scaling.projection == T(0));
    CHECK(s.scaling.sigma > T(0));
    worst.merge(compare_all_shapes<CappedOrScale>(o, along_w(-1)));
  }
  MESSAGE("SpectralCap (", type_name<T>(), "): max relative W difference ", worst.w,
          ", max state-field difference ", worst.state);
}

TEST_CASE_TEMPLATE("thrust backend: Adaptive equals the host (RowNormalize or ColNormalize against Orthogonalize)", T,
                   float, double) {
  using namespace matopt;
  using RowAdaptive = Optimizer<T, Adaptive<RowNormalize, Orthogonalize<>>, Momentum<Sum, Nesterov>,
                                Static<shape::MuonOriginal>>;
  using ColAdaptive = Optimizer<T, Adaptive<ColNormalize, Orthogonalize<NewtonSchulz<schedules::PolarExpress>>>,
                                Momentum<Ema, Nesterov>, Static<shape::TransposedMuonOriginal>>;
  using CappedAdaptive = Optimizer<T, Adaptive<RowNormalize, Orthogonalize<>>, Momentum<Ema, Nesterov>,
                                   SpectralCap<TrustRatio<trust::OrScale, shape::Unit>>>;
  test::DeviceDifferences worst;
  for (const int every : {1, 2}) {
    CAPTURE(every);
    typename RowAdaptive::Options ro;
    ro.precondition.every = every;
    typename ColAdaptive::Options co;
    co.precondition.every = every;
    worst.merge(compare_all_shapes<RowAdaptive>(ro));
    worst.merge(compare_all_shapes<ColAdaptive>(co));
    // A switch from Cheap to Exact: at step 2 (every = 1) or at the check of step 3 (every = 2).
    const auto switched = [](const auto& s) {
      CHECK(s.switches == 1);
      CHECK(s.exact);
      CHECK(s.calls == 3);
    };
    switched(host_state<RowAdaptive>(8, 32, 3, ro, rank_one_after_first).precondition);
    switched(host_state<ColAdaptive>(32, 8, 3, co, rank_one_after_first).precondition);
    worst.merge(compare_all_shapes<RowAdaptive>(ro, rank_one_after_first));
    worst.merge(compare_all_shapes<ColAdaptive>(co, rank_one_after_first));
    typename CappedAdaptive::Options o;
    o.precondition.every = every;
    worst.merge(compare_all_shapes<CappedAdaptive>(o, rank_one_after_first));
  }
  MESSAGE("Adaptive (", type_name<T>(), "): max relative W difference ", worst.w, ", max state-field difference ",
          worst.state);
}

TEST_CASE("thrust backend: SpectralCap and Adaptive keep the host's State types, make_state sizes the workspace") {
  using namespace matopt;
  using Opt = Optimizer<float, Adaptive<RowNormalize, Orthogonalize<>>, Momentum<Ema, Nesterov>, SpectralCap<Static<>>>;
  using Dev = DeviceOptimizer<Opt, ThrustEngine>;
  static_assert(std::is_same_v<decltype(Dev::State::scaling), decltype(Opt::State::scaling)>);
  static_assert(std::is_same_v<decltype(Dev::State::precondition), decltype(Opt::State::precondition)>);
  const Index m = 12, n = 20;
  Dev dev;
  DeviceMatrix<float> w(test::randn<HostMat<float, Eigen::RowMajor>>(m, n, 1));
  const DeviceMatrix<float> g(test::randn<HostMat<float, Eigen::RowMajor>>(m, n, 2));
  auto s = dev.make_state(w);
  CHECK(s.scaling.u.size() == m);
  CHECK(s.scaling.v.size() == n);
  CHECK_FALSE(s.scaling.warm);
  const std::size_t bytes = dev.workspace_bytes();
  // NS (2rs + 2r^2), U for the check and RowNormalize (mn), row scales (m), the Gram (m^2), u and v (m + n)
  CHECK(bytes == (2 * m * n + 2 * m * m + m * n + m + m * m + m + n) * sizeof(float));
  for (int k = 0; k < 3; ++k) dev.step(w, g, s);
  CHECK(dev.workspace_bytes() == bytes);
  CHECK(s.scaling.warm);
  CHECK(s.precondition.calls == 3);
}

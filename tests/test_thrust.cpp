// The Thrust backend against the Eigen backend (issue: GPU backends). Built with g++ and Thrust's CPP or
// OMP device system in CI (the whole suite on the CPU), and as CUDA source (label gpu) when
// MATOPT_THRUST_DEVICE_SYSTEM=CUDA. Every preset, both storage orders, float and double, odd shapes;
// non-finite policies and bad input leave W and state unchanged.

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <thrust/count.h>

#include <matopt/backend/thrust.hpp>
#include <matopt/matopt.hpp>

#include "test_support.hpp"

namespace {

using matopt::Index;
using matopt::Layout;
using matopt::test::rel_error;

template <class T, int Order>
using HostMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>;

/// Runs `steps` steps of the host optimizer and of its device twin on the same inputs and compares W after
/// every step: relative to W (the criterion) and relative to the update W - W0.
template <class Opt, int Order>
void compare_with_host(Index m, Index n, int steps, typename Opt::Options options = {}) {
  using T = typename Opt::Scalar;
  const Layout layout = Order == Eigen::RowMajor ? Layout::RowMajor : Layout::ColMajor;
  CAPTURE(m);
  CAPTURE(n);
  CAPTURE(int(layout));
  HostMat<T, Order> w = matopt::test::randn<HostMat<T, Order>>(m, n, 11);
  const HostMat<T, Order> w0 = w;
  Opt host(options);
  auto hs = host.make_state(w);
  matopt::DeviceOptimizer<Opt, matopt::ThrustEngine> dev(options);
  matopt::DeviceMatrix<T> dw(w);
  CHECK(dw.layout() == layout);
  auto ds = dev.make_state(dw);
  for (int k = 0; k < steps; ++k) {
    const HostMat<T, Order> g = matopt::test::randn<HostMat<T, Order>>(m, n, 100 + unsigned(k));
    host.step(w, g, hs);
    dev.step(dw, matopt::DeviceMatrix<T>(g), ds);
    const Eigen::MatrixXd hw = w.template cast<double>(), dwh = matopt::to_host(dw).template cast<double>();
    REQUIRE(dwh.allFinite());
    const double tol_w = std::is_same_v<T, float> ? 1e-6 : 1e-13;
    const double tol_update = std::is_same_v<T, float> ? 2e-4 : 1e-10;
    CHECK(rel_error(dwh, hw) <= tol_w);
    CHECK(rel_error(dwh - w0.template cast<double>(), hw - w0.template cast<double>()) <= tol_update);
    CHECK(ds.steps == hs.steps);
    // The same rule (inf for an m x 0 Muon shape); a trust ratio reads norms, summed in another order.
    const double lr_dev = double(dev.effective_lr(ds)), lr_host = double(host.effective_lr(hs));
    if (std::isinf(lr_host))
      CHECK(lr_dev == lr_host);
    else
      CHECK(lr_dev == doctest::Approx(lr_host).epsilon(std::is_same_v<T, float> ? 1e-4 : 1e-12));
  }
  if constexpr (Opt::MomentumType::has_buffer) {
    Eigen::Matrix<T, Eigen::Dynamic, 1> v(Index(ds.momentum.size()));
    thrust::copy(ds.momentum.begin(), ds.momentum.end(), v.data());
    CHECK(rel_error(v, hs.momentum) <= 1e-6);
  }
}

template <class Opt>
void compare_all_shapes(typename Opt::Options options = {}) {
  const std::vector<std::pair<Index, Index>> shapes = {{5, 7}, {7, 5}, {1, 6}, {6, 1}, {0, 4}, {4, 0},
                                                       {16, 16}, {9, 40}, {40, 9}, {24, 33}};
  for (const auto& [m, n] : shapes) {
    compare_with_host<Opt, Eigen::RowMajor>(m, n, 3, options);
    compare_with_host<Opt, Eigen::ColMajor>(m, n, 3, options);
  }
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

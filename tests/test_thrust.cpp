// SPDX-License-Identifier: MIT
// The Thrust backend against the Eigen backend (issue: GPU backends). Built with g++ and Thrust's CPP or
// OMP device system in CI (the whole suite on the CPU), and as CUDA source (label gpu) when
// MATOPT_THRUST_DEVICE_SYSTEM=CUDA. The step cases shared with the CUDA suite (tests/device_step_cases.hpp:
// every preset and the compositions in both storage orders, float and double, odd shapes; extreme magnitudes;
// non-finite policies and bad input leave W and state unchanged) and, here, framework views, diagonal
// dominance, SpectralCap and Adaptive. The other shared cases (ExactPolar, checkpoints between host and
// device, spectral diagnostics) run on Thrust from tests/test_thrust_cases.cpp.

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <thrust/copy.h>
#include <thrust/device_vector.h>

#include "thrust_backend.hpp"

#define MATOPT_COMPOSITION_TYPES float, double
#include "device_step_cases.hpp"

namespace {

using matopt::Index;
using matopt::Layout;
using matopt::test::rel_error;
using matopt::test::cases::compare_all_shapes;

template <class T, int Order>
using HostMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>;

}  // namespace

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

TEST_CASE("thrust backend: row blocks that do not fit, or a second moment sized for other heads, are refused") {
  using Opt = matopt::NorMuon<float>;
  thrust::device_vector<float> wbuf(6 * 4, 0.5f), gbuf(6 * 4, 1.0f);
  const matopt::DeviceMatrixView<float> w{thrust::raw_pointer_cast(wbuf.data()), 6, 4, Layout::RowMajor};
  const matopt::DeviceMatrixView<const float> gv{thrust::raw_pointer_cast(gbuf.data()), 6, 4, Layout::RowMajor};
  matopt::DeviceOptimizer<Opt, matopt::ThrustEngine> dev;
  dev.options().precondition.heads = 2;
  auto ds = dev.make_state(w);
  CHECK(ds.precondition.second_moment.size() == 2 * 4);  // max(3 rows, 4 cols) per head, in host memory
  dev.options().precondition.heads = 4;
  CHECK_THROWS_WITH_AS(dev.step(w, gv, ds), doctest::Contains("heads = 4 does not divide the rows of W (6x4)"),
                       std::invalid_argument);
  dev.options().precondition.heads = 3;
  CHECK_THROWS_WITH_AS(dev.step(w, gv, ds), doctest::Contains("changed since make_state"), std::invalid_argument);
  matopt::DeviceOptimizer<matopt::OrScale<float>, matopt::ThrustEngine> orscale;
  auto os = orscale.make_state(w);
  orscale.options().precondition.heads = 2;
  CHECK_THROWS_WITH_AS(orscale.step(w, gv, os), doctest::Contains("scaling without per-parameter state"),
                       std::invalid_argument);
  CHECK(matopt::to_host(w) == HostMat<float, Eigen::ColMajor>::Constant(6, 4, 0.5f));
  CHECK(ds.steps == 0);
  CHECK(os.steps == 0);
}

TEST_CASE("thrust backend: ns_dtype = bfloat16 is refused by the device optimizer, W and state unchanged") {
  using Opt = matopt::Muon<float>;
  thrust::device_vector<float> wbuf(6 * 4, 0.5f), gbuf(6 * 4, 1.0f);
  const matopt::DeviceMatrixView<float> w{thrust::raw_pointer_cast(wbuf.data()), 6, 4, Layout::RowMajor};
  const matopt::DeviceMatrixView<const float> gv{thrust::raw_pointer_cast(gbuf.data()), 6, 4, Layout::RowMajor};
  matopt::DeviceOptimizer<Opt, matopt::ThrustEngine> dev;
  auto ds = dev.make_state(w);
  dev.options().precondition.dtype = matopt::NsDtype::BFloat16;
  // The device's own rule speaks first, with or without oneDNN (without it, the options' host rule used to: "needs
  // oneDNN", found on the first GPU run).
  CHECK_THROWS_WITH_AS(dev.step(w, gv, ds), doctest::Contains("ns_dtype = bfloat16 is the host engine's"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(dev.make_state(w), doctest::Contains("set ns_dtype = float32"), std::invalid_argument);
  CHECK(matopt::to_host(w) == HostMat<float, Eigen::ColMajor>::Constant(6, 4, 0.5f));
  CHECK(ds.steps == 0);
  CHECK(std::vector<float>(ds.momentum.begin(), ds.momentum.end()) == std::vector<float>(6 * 4, 0.0f));
  // At construction too, and where a wrapper holds the Newton–Schulz options (NorMuon: SecondMoment of Orthogonalize).
  Opt::Options muon;
  muon.precondition.dtype = matopt::NsDtype::BFloat16;
  CHECK_THROWS_WITH_AS((matopt::DeviceOptimizer<Opt, matopt::ThrustEngine>(muon)),
                       doctest::Contains("ns_dtype = bfloat16 is the host engine's"), std::invalid_argument);
  matopt::NorMuon<float>::Options normuon;
  normuon.precondition.dtype = matopt::NsDtype::BFloat16;
  CHECK_THROWS_WITH_AS((matopt::DeviceOptimizer<matopt::NorMuon<float>, matopt::ThrustEngine>(normuon)),
                       doctest::Contains("ns_dtype = bfloat16 is the host engine's"), std::invalid_argument);
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

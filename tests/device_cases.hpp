// SPDX-License-Identifier: MIT
#pragma once
// Device test cases shared by tests/test_thrust_cases.cpp (ThrustEngine) and tests/gpu/test_cuda.cu
// (cuda::Engine).
// The including file defines, before including this header:
//   MATOPT_BACKEND           a string literal that starts every test name ("thrust backend", "cuda backend");
//   matopt::test::Backend    with  using Engine = ...;
//                                  template <class Opt> static auto optimizer(const typename Opt::Options&);
//                                  template <class Dev> static void before_step(Dev&);  (e.g. poison scratch)
//
// Cases: ExactPolar (and Adaptive switching to it) against the host; checkpoints moved between the host and
// device optimizers, both ways, and rejected (state unchanged) when corrupted or for another layout; the
// spectral diagnostics of device matrices against the host's; telemetry against the host's reports; the engine's
// matrix norm at magnitudes whose squares overflow or underflow.

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <thrust/copy.h>

#include <matopt/matopt.hpp>
#include <matopt/serialization/checkpoint.hpp>

#include "device_compare.hpp"
#include "test_support.hpp"

namespace matopt::test::cases {

template <class T>
std::vector<T> host_copy(const thrust::device_vector<T>& v) {
  std::vector<T> h(v.size());
  matopt::detail::copy_n(v.begin(), v.size(), h.data());
  return h;
}

}  // namespace matopt::test::cases

TEST_CASE_TEMPLATE(MATOPT_BACKEND ": ExactPolar, alone and as Adaptive's Exact, equals the host", T, float, double) {
  using namespace matopt;
  using ExactMuon = Optimizer<T, Orthogonalize<ExactPolar>, Momentum<Ema, Nesterov>, Static<shape::Spectral>>;
  using ExactAdaptive = Optimizer<T, Adaptive<RowNormalize, Orthogonalize<ExactPolar>>, Momentum<Ema, Nesterov>,
                                  TrustRatio<trust::OrScale, shape::Unit>>;
  // Odd shapes, both orientations, a rank-1 (1 x n) input; square 16 x 16 is the SVD's worst conditioning here.
  const std::vector<std::pair<Index, Index>> shapes = {{5, 7}, {7, 5}, {1, 6}, {6, 1}, {0, 4}, {16, 16}, {9, 40}};
  test::DeviceDifferences worst = test::compare_on<test::Backend, ExactMuon>({}, shapes);
  typename ExactMuon::Options weighted;
  weighted.weight_decay = T(0.1);
  worst.merge(test::compare_on<test::Backend, ExactMuon>(weighted, shapes));
  typename ExactAdaptive::Options ao;
  ao.precondition.every = 1;
  worst.merge(test::compare_on<test::Backend, ExactAdaptive>(ao, shapes, test::rank_one_after_first));

  // The case above does switch: the host's Adaptive picks ExactPolar from step 1 on.
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> w = test::randn<decltype(w)>(8, 32, 11);
  ExactAdaptive host(ao);
  auto hs = host.make_state(w);
  for (int k = 0; k < 3; ++k)
    host.step(w, decltype(w)(test::rank_one_after_first(k, w.template cast<double>()).template cast<T>()), hs);
  CHECK(hs.precondition.exact);
  CHECK(hs.precondition.switches == 1);
  MESSAGE("ExactPolar: max relative W difference ", worst.w, ", max state-field difference ", worst.state);
}

TEST_CASE_TEMPLATE(MATOPT_BACKEND ": checkpoints move between the host and device optimizers", T, float, double) {
  using namespace matopt;
  using Host = Optimizer<T, Orthogonalize<>, Momentum<Ema, Nesterov>, SpectralCap<TrustRatio<trust::OrScale, shape::Unit>>>;
  using HostMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Index m = 9, n = 14;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-13;
  auto grad = [&](unsigned seed) { return HostMat(test::randn<HostMat>(m, n, seed)); };

  // Host: two steps, saved. Device: a fresh state for the same W, loaded, then both take a third step.
  HostMat w = test::randn<HostMat>(m, n, 11);
  Host host;
  std::vector<typename Host::State> hs{host.make_state(w)};
  for (unsigned k = 0; k < 2; ++k) host.step(w, grad(100 + k), hs[0]);
  std::stringstream file;
  save_checkpoint(file, host, hs);

  auto dev = test::Backend::template optimizer<Host>({});
  using Dev = decltype(dev);
  CHECK(Dev::identity() == Host::identity());
  DeviceMatrix<T> dw(w);
  std::vector<typename Dev::State> ds{dev.make_state(dw)};
  load_checkpoint(file, dev, ds);
  CHECK(ds[0].steps == 2);
  CHECK(ds[0].scaling.warm == hs[0].scaling.warm);
  CHECK(ds[0].scaling.sigma == hs[0].scaling.sigma);
  CHECK(ds[0].scaling.inner.last_ratio == hs[0].scaling.inner.last_ratio);
  CHECK(ds[0].scaling.inner.calibration == hs[0].scaling.inner.calibration);
  CHECK(test::cases::host_copy(ds[0].momentum) ==
        std::vector<T>(hs[0].momentum.data(), hs[0].momentum.data() + hs[0].momentum.size()));

  const HostMat g3 = grad(102);
  host.step(w, g3, hs[0]);
  test::Backend::before_step(dev);
  dev.step(dw, DeviceMatrix<T>(g3), ds[0]);
  CHECK(test::rel_error(to_host(dw), w) <= tol);

  // Device to host: the device's state after three steps loads into a fresh host state, bitwise.
  std::stringstream back;
  save_checkpoint(back, dev, ds);
  std::vector<typename Host::State> hs2{host.make_state(w)};
  load_checkpoint(back, host, hs2);
  CHECK(hs2[0].steps == 3);
  CHECK(hs2[0].momentum == Eigen::Matrix<T, Eigen::Dynamic, 1>(Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(
                               test::cases::host_copy(ds[0].momentum).data(), m * n)));
  CHECK(hs2[0].scaling.u == ds[0].scaling.u);
  CHECK(hs2[0].scaling.v == ds[0].scaling.v);
  CHECK(hs2[0].scaling.inner.last_ratio == ds[0].scaling.inner.last_ratio);

  // Rejected files leave the device state as it was.
  const std::vector<T> before = test::cases::host_copy(ds[0].momentum);
  std::string bytes = back.str();
  bytes[bytes.size() - 3] ^= 0x5A;  // a payload byte: checksum mismatch
  std::stringstream corrupted(bytes);
  CHECK_THROWS_AS(load_checkpoint(corrupted, dev, ds), CheckpointError);
  CHECK(ds[0].steps == 3);
  CHECK(test::cases::host_copy(ds[0].momentum) == before);
  const DeviceMatrix<T> col{Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>(w)};
  std::vector<typename Dev::State> other{dev.make_state(col)};
  std::stringstream again(back.str());
  CHECK_THROWS_WITH_AS(load_checkpoint(again, dev, other), doctest::Contains("layout"), CheckpointError);
  CHECK(other[0].steps == 0);
  CHECK(test::cases::host_copy(other[0].momentum) == std::vector<T>(std::size_t(m * n), T(0)));
}

TEST_CASE_TEMPLATE(MATOPT_BACKEND ": the engine's matrix norm neither overflows nor underflows (tiny, huge, zero, "
                   "inf, NaN)", T, float, double) {
  using namespace matopt;
  typename test::Backend::Engine engine;
  // Squares of `tiny` underflow and of `huge` overflow: the rescaled passes, against the norm in double of the values
  // the device holds (scaled by the magnitude, so that double neither overflows nor underflows either).
  const double tiny = std::is_same_v<T, float> ? 1e-30 : 1e-200, huge = std::is_same_v<T, float> ? 1e30 : 1e200;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  for (const Layout layout : {Layout::RowMajor, Layout::ColMajor})
    for (const double magnitude : {tiny, huge, 1.0, 0.0}) {
      CAPTURE(int(layout));
      CAPTURE(magnitude);
      Eigen::MatrixXd x = test::randn(7, 33, 6) * magnitude;
      const DeviceMatrix<T> dx = test::detail::device_copy<T>(x, layout);
      const Eigen::MatrixXd held = x.cast<T>().template cast<double>();
      const double want = magnitude == 0.0 ? 0.0 : magnitude * (held / magnitude).norm();
      const double got = double(engine.norm(detail::strided(dx.view())));
      if (magnitude == 0.0)
        CHECK(got == 0.0);
      else
        CHECK(std::abs(got - want) <= tol * want);
      for (const double bad : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
        CAPTURE(bad);
        x(2, 3) = bad;
        const double norm = double(engine.norm(detail::strided(test::detail::device_copy<T>(x, layout).view())));
        if (std::isnan(bad))
          CHECK(std::isnan(norm));
        else
          CHECK(norm == bad);
      }
    }
}

TEST_CASE_TEMPLATE(MATOPT_BACKEND ": spectral diagnostics of a device matrix equal the host's", T, float, double) {
  using namespace matopt;
  typename test::Backend::Engine engine;
  const std::vector<double> ps = {0.0, 0.1, 0.5, 0.9, 1.0};
  for (const auto& shape : std::vector<std::pair<Index, Index>>{{6, 20}, {20, 6}, {1, 5}, {5, 1}, {8, 8}}) {
    const Index m = shape.first, n = shape.second;
    CAPTURE(m);
    CAPTURE(n);
    const Eigen::MatrixXd u = test::randn(m, n, 21);
    const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> ut = u.cast<T>();
    for (const Layout layout : {Layout::RowMajor, Layout::ColMajor}) {
      CAPTURE(int(layout));
      const DeviceMatrix<T> du = test::detail::device_copy<T>(u, layout);
      // The same host code on the same values: equal up to the SVD's own rounding on a reordered copy.
      const std::vector<double> q = singular_value_quantiles(engine, du.view(), ps), qh = singular_value_quantiles(ut, ps);
      for (std::size_t i = 0; i < ps.size(); ++i) CHECK(q[i] == doctest::Approx(qh[i]).epsilon(1e-12));
      CHECK(test::rel_error(normalized_singular_values(engine, du.view()), normalized_singular_values(ut)) <= 1e-12);
      const OrthogonalityResidual r = orthogonality_residual(engine, du.view()), rh = orthogonality_residual(ut);
      CHECK(r.sigma_max == doctest::Approx(rh.sigma_max).epsilon(1e-12));
      CHECK(r.gram == doctest::Approx(rh.gram).epsilon(1e-12));
      const SpectralFlatness f = spectral_flatness(engine, du.view()), fh = spectral_flatness(ut);
      CHECK(f.rank == fh.rank);
      CHECK(f.flatness == doctest::Approx(fh.flatness).epsilon(1e-12));
      CHECK(f.stable_lr_bound == doctest::Approx(fh.stable_lr_bound).epsilon(1e-12));
    }
  }
  const DeviceMatrix<T> empty(Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>(0, 4));
  CHECK_THROWS_WITH_AS(singular_value_quantiles(engine, empty.view(), ps), doctest::Contains("0x4"),
                       std::invalid_argument);
  CHECK_THROWS_AS(spectral_flatness(engine, empty.view()), std::invalid_argument);
}

TEST_CASE_TEMPLATE(MATOPT_BACKEND ": telemetry reports what the host's does, and changes no numbers", T, float, double) {
  using namespace matopt;
  using HostMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  // A Newton–Schulz step and a fused normalization step (U formed outside the fused pass), with momentum.
  auto run = [&](auto host, const char* which) {
    using Host = decltype(host);
    CAPTURE(which);
    const Index m = 12, n = 20;
    HostMat w = test::randn<HostMat>(m, n, 11);
    DeviceMatrix<T> dw(w), quiet(w);
    auto dev = test::Backend::template optimizer<Host>({});
    auto silent = test::Backend::template optimizer<Host>({});
    auto hs = host.make_state(w);
    auto ds = dev.make_state(dw);
    auto qs = silent.make_state(quiet);
    const std::size_t bytes = dev.workspace_bytes();
    std::vector<StepReport<T>> host_reports;
    std::vector<Eigen::MatrixXd> host_u;
    host.set_telemetry({2, [&](const StepReport<T>& r) {
                          host_reports.push_back(r);
                          host_u.push_back(matopt::detail::with_map(r.direction, [](const auto& u) { return Eigen::MatrixXd(u.template cast<double>()); }));
                        }});
    std::vector<DeviceStepReport<T>> dev_reports;
    std::vector<Eigen::MatrixXd> dev_u;
    std::vector<DiagonalDominance> dev_dominance;
    dev.set_telemetry({2, [&](const DeviceStepReport<T>& r) {
                         dev_reports.push_back(r);
                         dev_u.push_back(to_host(r.direction).template cast<double>());
                         dev_dominance.push_back(diagonal_dominance(dev.engine(), r.direction));
                       }});
    for (unsigned k = 0; k < 5; ++k) {
      const HostMat g = test::randn<HostMat>(m, n, 100 + k);
      host.step(w, g, hs);
      test::Backend::before_step(dev);
      dev.step(dw, DeviceMatrix<T>(g), ds);
      test::Backend::before_step(silent);
      silent.step(quiet, DeviceMatrix<T>(g), qs);
    }
    REQUIRE(dev_reports.size() == 2);  // steps 2 and 4
    REQUIRE(host_reports.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) {
      CAPTURE(i);
      CHECK(dev_reports[i].step == host_reports[i].step);
      CHECK(dev_reports[i].step == std::int64_t(2 * (i + 1)));
      CHECK(dev_reports[i].rows == m);
      CHECK(dev_reports[i].cols == n);
      CHECK(dev_reports[i].param == dw.view().data);
      CHECK(test::rel_error(dev_u[i], host_u[i]) <= tol);
      CHECK(dev_reports[i].update_rms == doctest::Approx(host_reports[i].update_rms).epsilon(10 * tol));
      CHECK(dev_reports[i].effective_lr == doctest::Approx(host_reports[i].effective_lr).epsilon(tol));
      CHECK(dev_dominance[i].r_min == doctest::Approx(diagonal_dominance(host_u[i]).r_min).epsilon(1e-4));
    }
    CHECK(test::rel_error(to_host(dw), w) <= tol);
    CHECK(to_host(dw) == to_host(quiet));  // reporting changes nothing
    CHECK(ds.steps == 5);
    CHECK(dev.workspace_bytes() == bytes + 2 * std::size_t(m * n) * sizeof(T));
  };
  run(Muon<T>{}, "Muon");
  run(RMNP<T>{}, "RMNP (fused)");
}

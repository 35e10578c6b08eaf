// SPDX-License-Identifier: MIT
#pragma once
// The host-vs-device comparison of the device suites (tests/test_thrust.cpp: ThrustEngine; tests/gpu/test_cuda.cu:
// cuda::Engine; the cases both run, tests/device_cases.hpp and tests/device_step_cases.hpp): a device optimizer
// against its host Optimizer on the same inputs, step by step.
//
// The host reference runs once, in the Eigen storage order HostOrder (the host's numbers depend on it only up
// to rounding, math.md#conventions); the device runs on each of `layouts`. After every step: W relative to the host's W
// (1e-6 in float, 1e-13 in double, the criterion; in float plus 2e-4 of the update) and the update W - W0
// relative to the host's (2e-4, 1e-10; in float plus W's rounding, (k + 1) eps |W|); the step count; the effective
// learning rate (1e-4, 1e-12: a trust ratio reads norms summed in another order); and every field of the
// policies' states (the device state holds the host's State types: SpectralCap's u, v, sigma, projection, capped,
// warm; Adaptive's choice, r_min, calls, switches; TrustRatio's ratio): integers and flags equal, floating-point
// values to 1e-4 (1e-11 in double) of max(1, |host|). At the end the momentum buffers agree to 1e-6.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <thrust/copy.h>

#include <matopt/backend/device_matrix.hpp>
#include <matopt/matopt.hpp>

#include "test_support.hpp"

namespace matopt::test {

/// The gradient of step k (0-based) given the host's W before the step; the default is randn(m, n, 100 + k).
using GradientFn = std::function<Eigen::MatrixXd(int k, const Eigen::MatrixXd& w)>;

/// G = sign W + 0.1 randn: SpectralCap's cap fires (c < 0) for sign = -1 (D grows sigma1), never for +1.
inline GradientFn along_w(double sign) {
  return [sign](int k, const Eigen::MatrixXd& w) {
    return Eigen::MatrixXd(sign * w + 0.1 * randn(w.rows(), w.cols(), 200 + unsigned(k)));
  };
}
/// A random G at step 0, then a dominant rank-1 G (rows and columns all parallel: r_min < 1, so Adaptive
/// switches to Exact).
inline Eigen::MatrixXd rank_one_after_first(int k, const Eigen::MatrixXd& w) {
  const Eigen::MatrixXd noise = randn(w.rows(), w.cols(), 300 + unsigned(k));
  if (k == 0) return noise;
  return 10.0 * randn(w.rows(), 1, 7) * randn(1, w.cols(), 8) + 0.1 * noise;
}

/// The largest differences a comparison measured (relative to W, and of the state fields as checked).
struct DeviceDifferences {
  double w = 0;
  double state = 0;
  void merge(const DeviceDifferences& o) {
    w = std::max(w, o.w);
    state = std::max(state, o.state);
  }
};

namespace detail {

/// A policy state flattened through its fields(): one entry per scalar or vector field.
struct FlatField {
  std::string name;
  std::vector<double> values;
  bool exact = false;  ///< an integer or a flag: compared for equality
};

struct Flatten {
  std::vector<FlatField>* out;
  std::string prefix;
  template <class V>
  void operator()(const char* name, V& v) const {
    const std::string full = prefix + name;
    using P = std::remove_cv_t<V>;
    if constexpr (std::is_arithmetic_v<P>) {
      out->push_back({full, {double(v)}, !std::is_floating_point_v<P>});
    } else if constexpr (std::is_base_of_v<Eigen::EigenBase<P>, P>) {
      FlatField f{full, {}, false};
      for (Index i = 0; i < v.size(); ++i) f.values.push_back(double(v.data()[i]));
      out->push_back(std::move(f));
    } else {
      v.fields(Flatten{out, full + "."});
    }
  }
};

template <class S>
std::vector<FlatField> flatten(S state) {  // a copy: fields() is not const
  std::vector<FlatField> out;
  state.fields(Flatten{&out, ""});
  return out;
}

/// Every field of a policy state (the device's copy of the host State type) against the host's; returns the
/// largest floating-point difference relative to max(1, |host|).
template <class S>
double check_state_fields(const S& device, const S& host, double tol) {
  const std::vector<FlatField> d = flatten(device), h = flatten(host);
  REQUIRE(d.size() == h.size());
  double worst = 0;
  for (std::size_t f = 0; f < d.size(); ++f) {
    CAPTURE(h[f].name);
    REQUIRE(d[f].values.size() == h[f].values.size());
    for (std::size_t i = 0; i < d[f].values.size(); ++i) {
      const double got = d[f].values[i], want = h[f].values[i];
      if (h[f].exact) {
        CHECK(got == want);
      } else {
        const double diff = std::abs(got - want) / std::max(1.0, std::abs(want));
        worst = std::max(worst, diff);
        CHECK(diff <= tol);
      }
    }
  }
  return worst;
}

template <class T, int Order>
using HostMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>;

/// A device copy of `m` in `layout`.
template <class T>
DeviceMatrix<T> device_copy(const Eigen::MatrixXd& m, Layout layout) {
  if (layout == Layout::RowMajor) return DeviceMatrix<T>(HostMat<T, Eigen::RowMajor>(m.cast<T>()));
  return DeviceMatrix<T>(HostMat<T, Eigen::ColMajor>(m.cast<T>()));
}

}  // namespace detail

/// `steps` steps of the host optimizer Opt (W in Eigen storage order HostOrder) and of the device optimizer
/// make_device(options) returns, for each of `layouts`, from the same W0 (randn seed 11) and gradients
/// (`gradient`, randn seeds 100 + k by default). before_step(device_optimizer) runs before each device step
/// (the CUDA suite poisons the engine's scratch there). See the file comment for what is checked.
template <class Opt, int HostOrder, class MakeDevice, class BeforeStep>
DeviceDifferences compare_device_with_host(Index m, Index n, int steps, const typename Opt::Options& options,
                                           const std::vector<Layout>& layouts, MakeDevice&& make_device,
                                           BeforeStep&& before_step, const GradientFn& gradient = {}) {
  using T = typename Opt::Scalar;
  using Host = detail::HostMat<T, HostOrder>;
  CAPTURE(m);
  CAPTURE(n);
  const Host w0 = randn<Host>(m, n, 11);
  Host w = w0;
  Opt host(options);
  auto hs = host.make_state(w);
  std::vector<Eigen::MatrixXd> g, w_after;
  std::vector<double> lr_after;
  std::vector<typename Opt::State> state_after;
  for (int k = 0; k < steps; ++k) {
    const Eigen::MatrixXd wd = w.template cast<double>();
    g.push_back(gradient ? Eigen::MatrixXd(gradient(k, wd).template cast<T>().template cast<double>())
                         : Eigen::MatrixXd(randn<Host>(m, n, 100 + unsigned(k)).template cast<double>()));
    host.step(w, Host(g.back().template cast<T>()), hs);
    w_after.push_back(w.template cast<double>());
    lr_after.push_back(double(host.effective_lr(hs)));
    state_after.push_back(hs);
  }
  const Eigen::MatrixXd w0d = w0.template cast<double>();
  constexpr bool is_float = std::is_same_v<T, float>;
  const double tol_w = is_float ? 1e-6 : 1e-13, tol_update = is_float ? 2e-4 : 1e-10;
  // State values read from D (the cap's projection u^T D v, the trust ratio) carry the tolerance of the
  // effective lr: Jordan NS5 amplifies float rounding ~200x on rank-1 inputs (1 x n), and a host on OpenBLAS
  // at -O0 differed from the device by 2.0e-5 there.
  const double tol_lr = is_float ? 1e-4 : 1e-12, tol_state = is_float ? 1e-4 : 1e-11;
  DeviceDifferences worst;
  for (const Layout layout : layouts) {
    CAPTURE(int(layout));
    auto dev = make_device(options);
    DeviceMatrix<T> dw = detail::device_copy<T>(w0d, layout);
    CHECK(dw.layout() == layout);
    auto ds = dev.make_state(dw);
    for (int k = 0; k < steps; ++k) {
      CAPTURE(k);
      const DeviceMatrix<T> dg = detail::device_copy<T>(g[std::size_t(k)], layout);
      before_step(dev);
      dev.step(dw, dg, ds);
      const Eigen::MatrixXd got = to_host(dw).template cast<double>();
      REQUIRE(got.allFinite());
      const Eigen::MatrixXd& w_want = w_after[std::size_t(k)];
      const double err = rel_error(got, w_want);
      worst.w = std::max(worst.w, err);
      // In float the two sides round W once per step each, and a GPU sums in another order (tree reductions,
      // cuBLAS): the update differs by W's rounding, (k + 1) eps |W|, besides tol_update of itself, and W by
      // tol_update of the update besides tol_w (the first GPU run: MoonlightMuon's lr 1e-3 update, 1e-4 of W,
      // differed by 4.3e-4 of itself; a 20 x 20000 W by 5.8e-6 of itself).
      const double update = (w_want - w0d).norm(), w_norm = w_want.norm();
      const double rounding = is_float ? double(k + 1) * double(std::numeric_limits<T>::epsilon()) * w_norm : 0.0;
      CHECK(err <= tol_w + (is_float && w_norm > 0 ? tol_update * update / w_norm : 0.0));
      CHECK((got - w_want).norm() <= tol_update * (update > 0 ? update : 1.0) + rounding);  // rel_error's rule
      CHECK(ds.steps == k + 1);
      const typename Opt::State& want = state_after[std::size_t(k)];
      CHECK(ds.steps == want.steps);
      // The same rule (inf for an m x 0 Muon shape); a trust ratio reads norms, summed in another order.
      const double lr_dev = double(dev.effective_lr(ds)), lr_host = lr_after[std::size_t(k)];
      if (std::isfinite(lr_host))
        CHECK(lr_dev == doctest::Approx(lr_host).epsilon(tol_lr));
      else
        CHECK(lr_dev == lr_host);
      // A device-resident field (Dion's M) is in W's storage order: compared where that is the host's order (the
      // other order is checked through W, and by tests/device_variant_cases.hpp's golden data).
      const bool host_order = layout == (HostOrder == Eigen::RowMajor ? Layout::RowMajor : Layout::ColMajor);
      if (ds.moment_sizes.empty() || host_order)
        worst.state =
            std::max(worst.state, detail::check_state_fields(ds.host_precondition(), want.precondition, tol_state));
      worst.state = std::max(worst.state, detail::check_state_fields(ds.scaling, want.scaling, tol_state));
    }
    if constexpr (Opt::MomentumType::has_buffer) {
      std::vector<T> v(ds.momentum.size());
      matopt::detail::copy_n(ds.momentum.begin(), ds.momentum.size(), v.data());
      using RowMap = Eigen::Map<const detail::HostMat<T, Eigen::RowMajor>>;
      using ColMap = Eigen::Map<const detail::HostMat<T, Eigen::ColMajor>>;
      const Eigen::MatrixXd dv = layout == Layout::RowMajor
                                     ? Eigen::MatrixXd(RowMap(v.data(), m, n).template cast<double>())
                                     : Eigen::MatrixXd(ColMap(v.data(), m, n).template cast<double>());
      CHECK(rel_error(dv, Eigen::Map<const Host>(hs.momentum.data(), m, n)) <= 1e-6);
    }
  }
  return worst;
}

/// compare_device_with_host on a test backend B (the shared cases' Backend: B::optimizer<Opt>(options),
/// B::before_step(device_optimizer)) for each of `shapes`, three steps: the host on row-major storage, the
/// device on both storage orders.
template <class B, class Opt>
DeviceDifferences compare_on(const typename Opt::Options& options, const std::vector<std::pair<Index, Index>>& shapes,
                             const GradientFn& gradient = {}) {
  DeviceDifferences worst;
  for (const auto& [m, n] : shapes)
    worst.merge(compare_device_with_host<Opt, Eigen::RowMajor>(
        m, n, 3, options, {Layout::RowMajor, Layout::ColMajor},
        [](const typename Opt::Options& o) { return B::template optimizer<Opt>(o); },
        [](auto& dev) { B::before_step(dev); }, gradient));
  return worst;
}

}  // namespace matopt::test

// SPDX-License-Identifier: MIT
// DeviceAdamW (backend/device_adamw.hpp) against the host AdamW: the same W and moments after every step,
// float and double, both storage orders, odd shapes; the non-finite policies; bad input changes nothing;
// checkpoints move between the host and device optimizers. DeviceLion (backend/device_lion.hpp) against Lion's
// update written out here in double (arXiv 2302.06675 Alg. 2), the non-finite policies and checkpoints.

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>


#include <matopt/backend/device_adamw.hpp>
#include <matopt/backend/device_lion.hpp>
#include <matopt/matopt.hpp>
#include <matopt/serialization/checkpoint.hpp>

#include "device_compare.hpp"
#include "test_support.hpp"

namespace {

using matopt::Index;
using matopt::Layout;

/// A device moment buffer (W's storage order) as the m x n matrix it holds, through the library's to_host.
template <class T>
Eigen::MatrixXd moments(const thrust::device_vector<T>& v, Index m, Index n, Layout layout) {
  return matopt::to_host(matopt::DeviceMatrixView<const T>{thrust::raw_pointer_cast(v.data()), m, n, layout})
      .template cast<double>();
}
template <class T>
Eigen::MatrixXd moments(const Eigen::Matrix<T, Eigen::Dynamic, 1>& v, Index m, Index n) {  // row-major host W
  return Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(v.data(), m, n)
      .template cast<double>();
}

}  // namespace

TEST_CASE_TEMPLATE("thrust backend: DeviceAdamW equals the host AdamW", T, float, double) {
  using Host = matopt::AdamW<T>;
  using HostMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-13;
  typename Host::Options o;
  o.lr = T(1e-2);
  o.weight_decay = T(0.1);
  double worst = 0;
  for (const auto& shape : std::vector<std::pair<Index, Index>>{{5, 7}, {7, 5}, {1, 6}, {6, 1}, {0, 4}, {16, 16}}) {
    const Index m = shape.first, n = shape.second;
    CAPTURE(m);
    CAPTURE(n);
    for (const Layout layout : {Layout::RowMajor, Layout::ColMajor}) {
      CAPTURE(int(layout));
      HostMat w = matopt::test::randn<HostMat>(m, n, 11);
      Host host(o);
      auto hs = host.make_state(w);
      matopt::DeviceAdamW<T> dev(o);
      auto dw = matopt::test::detail::device_copy<T>(w.template cast<double>(), layout);
      auto ds = dev.make_state(dw);
      for (unsigned k = 0; k < 4; ++k) {
        CAPTURE(k);
        const HostMat g = matopt::test::randn<HostMat>(m, n, 100 + k);
        host.step(w, g, hs);
        dev.step(dw, matopt::test::detail::device_copy<T>(g.template cast<double>(), layout), ds);
        const double err = matopt::test::rel_error(matopt::to_host(dw), w);
        worst = std::max(worst, err);
        CHECK(err <= tol);
        CHECK(ds.steps == hs.steps);
        CHECK(matopt::test::rel_error(moments(ds.m, m, n, layout), moments(hs.m, m, n)) <= tol);
        CHECK(matopt::test::rel_error(moments(ds.v, m, n, layout), moments(hs.v, m, n)) <= tol);
      }
    }
  }
  CHECK(matopt::DeviceAdamW<T>::identity() == Host::identity());
  MESSAGE("DeviceAdamW: max relative W difference ", worst);
}

TEST_CASE("thrust backend: DeviceAdamW's non-finite policies and bad input, as the host's") {
  using T = float;
  using HostMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Index m = 4, n = 6;
  const HostMat w0 = matopt::test::randn<HostMat>(m, n, 1);
  HostMat g = matopt::test::randn<HostMat>(m, n, 2);
  g(1, 2) = std::numeric_limits<T>::quiet_NaN();
  g(3, 0) = std::numeric_limits<T>::infinity();
  const matopt::DeviceMatrix<T> dg(g);
  matopt::AdamW<T>::Options o;
  o.weight_decay = T(0.05);

  SUBCASE("throw: error, W and state unchanged") {
    matopt::DeviceAdamW<T> dev(o);
    matopt::DeviceMatrix<T> dw(w0);
    auto s = dev.make_state(dw);
    CHECK_THROWS_WITH_AS(dev.step(dw, dg, s), doctest::Contains("non-finite"), std::invalid_argument);
    CHECK(matopt::to_host(dw) == w0.cast<T>());
    CHECK(s.steps == 0);
    CHECK(moments(s.m, m, n, Layout::RowMajor).isZero(0));
  }
  SUBCASE("skip: counted, nothing else changes") {
    o.non_finite = matopt::NonFinite::Skip;
    matopt::DeviceAdamW<T> dev(o);
    matopt::DeviceMatrix<T> dw(w0);
    auto s = dev.make_state(dw);
    dev.step(dw, dg, s);
    CHECK(s.skipped == 1);
    CHECK(s.steps == 0);
    CHECK(matopt::to_host(dw) == w0.cast<T>());
  }
  SUBCASE("zero: the host's zeroed step") {
    o.non_finite = matopt::NonFinite::Zero;
    matopt::AdamW<T> host(o);
    HostMat w = w0;
    auto hs = host.make_state(w);
    host.step(w, g, hs);
    matopt::DeviceAdamW<T> dev(o);
    matopt::DeviceMatrix<T> dw(w0);
    auto s = dev.make_state(dw);
    dev.step(dw, dg, s);
    CHECK(s.zeroed == 1);
    CHECK(s.steps == 1);
    CHECK(hs.zeroed == 1);
    CHECK(matopt::to_host(dw).allFinite());
    CHECK(matopt::test::rel_error(matopt::to_host(dw), w) <= 1e-6);
  }
  SUBCASE("bad input names the parameter and shapes; W and state unchanged") {
    matopt::DeviceAdamW<T> dev(o);
    matopt::DeviceMatrix<T> dw(w0);
    auto s = dev.make_state(dw);
    const matopt::DeviceMatrix<T> wide(HostMat(matopt::test::randn<HostMat>(m, n + 1, 3)));
    CHECK_THROWS_WITH_AS(dev.step(dw, wide, s), doctest::Contains("G is 4x7 but W is 4x6"), std::invalid_argument);
    const matopt::DeviceMatrix<T> col{Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>(g)};
    CHECK_THROWS_WITH_AS(dev.step(dw, col, s), doctest::Contains("column-major"), std::invalid_argument);
    matopt::DeviceMatrix<T> other(matopt::test::randn<HostMat>(n, m, 4));
    CHECK_THROWS_WITH_AS(dev.step(other, matopt::DeviceMatrix<T>(HostMat(matopt::test::randn<HostMat>(n, m, 5))), s),
                         doctest::Contains("state was made for a 4x6"), std::invalid_argument);
    dev.options().lr = T(-1);
    const matopt::DeviceMatrix<T> finite(HostMat(matopt::test::randn<HostMat>(m, n, 6)));
    CHECK_THROWS_WITH_AS(dev.step(dw, finite, s), doctest::Contains("lr"), std::invalid_argument);
    dev.options().lr = T(1e-3);
    dev.options().beta2 = T(1.5);
    CHECK_THROWS_WITH_AS(dev.step(dw, finite, s), doctest::Contains("beta2"), std::invalid_argument);
    CHECK(matopt::to_host(dw) == w0.cast<T>());
    CHECK(s.steps == 0);
    CHECK_THROWS_AS(matopt::DeviceAdamW<T>(matopt::AdamW<T>::Options{T(0)}), std::invalid_argument);
    const matopt::DeviceMatrixView<const T> null_view{nullptr, 2, 3, Layout::RowMajor};
    CHECK_THROWS_WITH_AS(dev.make_state(null_view), doctest::Contains("null data"), std::invalid_argument);
  }
}

TEST_CASE("thrust backend: DeviceAdamW checkpoints move between the host and device optimizers") {
  using T = double;
  using HostMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Index m = 3, n = 8;
  matopt::AdamW<T> host;
  HostMat w = matopt::test::randn<HostMat>(m, n, 1);
  std::vector<matopt::AdamW<T>::State> hs{host.make_state(w)};
  for (unsigned k = 0; k < 3; ++k) host.step(w, HostMat(matopt::test::randn<HostMat>(m, n, 10 + k)), hs[0]);
  std::stringstream file;
  matopt::save_checkpoint(file, host, hs);

  matopt::DeviceAdamW<T> dev;
  matopt::DeviceMatrix<T> dw(w);
  std::vector<matopt::DeviceAdamW<T>::State> ds{dev.make_state(dw)};
  matopt::load_checkpoint(file, dev, ds);
  CHECK(ds[0].steps == 3);
  CHECK(moments(ds[0].m, m, n, Layout::RowMajor) == moments(hs[0].m, m, n));
  CHECK(moments(ds[0].v, m, n, Layout::RowMajor) == moments(hs[0].v, m, n));
  const HostMat g = matopt::test::randn<HostMat>(m, n, 20);
  host.step(w, g, hs[0]);
  dev.step(dw, matopt::DeviceMatrix<T>(g), ds[0]);
  CHECK(matopt::test::rel_error(matopt::to_host(dw), w) <= 1e-13);

  std::stringstream back;
  matopt::save_checkpoint(back, dev, ds);
  std::vector<matopt::AdamW<T>::State> restored{host.make_state(w)};
  matopt::load_checkpoint(back, host, restored);
  CHECK(restored[0].steps == 4);
  CHECK(moments(restored[0].m, m, n) == moments(ds[0].m, m, n, Layout::RowMajor));
  std::string bytes = back.str();
  bytes[bytes.size() - 5] ^= 0x21;
  std::stringstream corrupted(bytes);
  const Eigen::MatrixXd before = moments(ds[0].v, m, n, Layout::RowMajor);
  CHECK_THROWS_AS(matopt::load_checkpoint(corrupted, dev, ds), matopt::CheckpointError);
  CHECK(ds[0].steps == 4);
  CHECK(moments(ds[0].v, m, n, Layout::RowMajor) == before);
}

TEST_CASE_TEMPLATE("thrust backend: DeviceLion follows Lion's update (written out in double)", T, float, double) {
  using HostMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  typename matopt::Lion<T>::Options o;
  o.lr = T(1e-2);
  o.beta1 = T(0.9);
  o.beta2 = T(0.99);
  o.weight_decay = T(0.1);
  for (const auto& shape : std::vector<std::pair<Index, Index>>{{5, 7}, {7, 5}, {1, 6}, {6, 1}, {0, 4}, {16, 16}}) {
    const Index m = shape.first, n = shape.second;
    CAPTURE(m);
    CAPTURE(n);
    for (const Layout layout : {Layout::RowMajor, Layout::ColMajor}) {
      CAPTURE(int(layout));
      const HostMat w0 = matopt::test::randn<HostMat>(m, n, 11);
      // W <- W (1 - lr lambda) - lr sign(b1 m + (1 - b1) g);  m <- b2 m + (1 - b2) g, with m_0 = 0.
      Eigen::ArrayXXd w = w0.template cast<double>(), mom = Eigen::ArrayXXd::Zero(m, n);
      const double lr = double(o.lr), b1 = double(o.beta1), b2 = double(o.beta2), wd = double(o.weight_decay);
      matopt::DeviceLion<T> dev(o);
      auto dw = matopt::test::detail::device_copy<T>(w0.template cast<double>(), layout);
      auto ds = dev.make_state(dw);
      for (unsigned k = 0; k < 4; ++k) {
        CAPTURE(k);
        const HostMat g = matopt::test::randn<HostMat>(m, n, 100 + k);
        const Eigen::ArrayXXd gd = g.template cast<double>().array();
        w = w * (1 - lr * wd) - lr * (b1 * mom + (1 - b1) * gd).sign();
        mom = b2 * mom + (1 - b2) * gd;
        dev.step(dw, matopt::test::detail::device_copy<T>(g.template cast<double>(), layout), ds);
        CHECK(matopt::test::rel_error(matopt::to_host(dw), Eigen::MatrixXd(w.matrix())) <= tol);
        CHECK(matopt::test::rel_error(moments(ds.m, m, n, layout), Eigen::MatrixXd(mom.matrix())) <= tol);
        CHECK(ds.steps == k + 1);
      }
    }
  }
  CHECK(matopt::DeviceLion<T>::identity() == matopt::Lion<T>::identity());
}

namespace {
/// A user's element-wise rule with two buffers, declared as docs/extending.md says and nothing more (no device
/// code): m <- beta m + g;  s <- s + g^2;  W <- W (1 - lr lambda) - lr m / (sqrt(s) + eps).
struct MomentumAdagrad {
  static constexpr const char* name = "test::MomentumAdagrad";
  template <class T>
  struct Options {
    T lr = T(0.05);
    T beta = T(0.9);
    T eps = T(1e-8);
    T weight_decay = T(0);
    matopt::NonFinite non_finite = matopt::NonFinite::Throw;
  };
  template <class Vec>
  struct Buffers {
    Vec m, s;
    template <class F>
    void each(F&& f) {
      f("m", m);
      f("s", s);
    }
    MATOPT_EXEC_CHECK_DISABLE
    template <class F>
    MATOPT_HOST_DEVICE void with(F&& f) {
      f(m, s);
    }
  };
  template <class Vec, class Fail>
  static void check_loaded(const Buffers<Vec>&, Fail&&) {}
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("beta", o.beta, matopt::checks::UnitInterval{}, "momentum");
    d("eps", o.eps, matopt::checks::Positive{}, "epsilon");
  }
  template <class T>
  struct Coefficients {
    T lr, beta, eps, keep;
    bool decay;
  };
  template <class T>
  static Coefficients<T> coefficients(const Options<T>& o, std::int64_t) {
    return {o.lr, o.beta, o.eps, T(1) - o.lr * o.weight_decay, o.weight_decay != T(0)};
  }
  MATOPT_EXEC_CHECK_DISABLE
  template <class W, class G, class T, class M, class S>
  MATOPT_HOST_DEVICE static void element(W&& w, const G& g, const Coefficients<T>& k, M&& m, S&& s) {
    using std::sqrt;
    m = k.beta * m + g;
    s = s + g * g;
    if (k.decay) w *= k.keep;
    w -= k.lr * m / (sqrt(s) + k.eps);
  }
};
}  // namespace

TEST_CASE_TEMPLATE("thrust backend: a user's element-wise rule steps on host and Thrust as written out in double",
                   T, float, double) {
  using HostMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Host = matopt::ElementwiseOptimizer<T, MomentumAdagrad>;
  const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-14;
  typename Host::Options o;
  o.weight_decay = T(0.1);
  o.non_finite = matopt::NonFinite::Zero;
  for (const auto& shape : std::vector<std::pair<Index, Index>>{{5, 7}, {7, 5}, {6, 6}, {1, 6}, {0, 4}}) {
    const Index m = shape.first, n = shape.second;
    CAPTURE(m);
    CAPTURE(n);
    for (const Layout layout : {Layout::RowMajor, Layout::ColMajor}) {
      CAPTURE(int(layout));
      HostMat w = matopt::test::randn<HostMat>(m, n, 21);
      Eigen::ArrayXXd wd = w.template cast<double>().array(), mom = Eigen::ArrayXXd::Zero(m, n), sq = mom;
      const double lr = double(o.lr), beta = double(o.beta), eps = double(o.eps), lambda = double(o.weight_decay);
      Host host(o);
      auto hs = host.make_state(w);
      // The same rule on the host on a column-major block of a larger matrix (lines further apart than their length).
      using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
      ColMat big = matopt::test::randn<ColMat>(m + 2, n + 3, 22);
      big.block(1, 2, m, n) = w;
      auto hbs = host.make_state(big.block(1, 2, m, n));
      matopt::DeviceElementwise<T, MomentumAdagrad> dev(o);
      auto dw = matopt::test::detail::device_copy<T>(w.template cast<double>(), layout);
      auto ds = dev.make_state(dw);
      for (unsigned k = 0; k < 3; ++k) {
        CAPTURE(k);
        HostMat g = matopt::test::randn<HostMat>(m, n, 200 + k);
        if (k == 1 && g.size() > 0) g(0, 0) = std::numeric_limits<T>::quiet_NaN();  // zeroed (NonFinite::Zero)
        Eigen::ArrayXXd gd = g.template cast<double>().array();
        if (k == 1 && g.size() > 0) gd(0, 0) = 0;
        mom = beta * mom + gd;
        sq = sq + gd * gd;
        wd = wd * (1 - lr * lambda) - lr * mom / (sq.sqrt() + eps);
        host.step(w, g, hs);
        host.step(big.block(1, 2, m, n), g, hbs);
        dev.step(dw, matopt::test::detail::device_copy<T>(g.template cast<double>(), layout), ds);
        const Eigen::MatrixXd want = wd.matrix();
        CHECK(matopt::test::rel_error(w, want) <= tol);
        CHECK(matopt::test::rel_error(big.block(1, 2, m, n), want) <= tol);
        CHECK(matopt::test::rel_error(matopt::to_host(dw), want) <= tol);
        CHECK(matopt::test::rel_error(moments(ds.s, m, n, layout), Eigen::MatrixXd(sq.matrix())) <= tol);
        CHECK(matopt::test::rel_error(moments(hs.m, m, n), Eigen::MatrixXd(mom.matrix())) <= tol);
        CHECK(ds.steps == hs.steps);
      }
      CHECK(hs.zeroed == (m * n > 0 ? 1 : 0));
      CHECK(ds.zeroed == hs.zeroed);
    }
  }
  CHECK(Host::option_keys() == "lr, beta, eps, weight_decay, non_finite");
}

TEST_CASE("thrust backend: DeviceLion's non-finite policies, bad input and checkpoints, as the host Lion's") {
  using T = double;
  using HostMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Index m = 4, n = 6;
  const HostMat w0 = matopt::test::randn<HostMat>(m, n, 1);
  HostMat g = matopt::test::randn<HostMat>(m, n, 2);
  g(1, 2) = std::numeric_limits<T>::quiet_NaN();
  const matopt::DeviceMatrix<T> dg(g);
  matopt::Lion<T>::Options o;
  o.weight_decay = T(0.5);
  {
    matopt::DeviceLion<T> dev(o);
    matopt::DeviceMatrix<T> dw(w0);
    auto s = dev.make_state(dw);
    CHECK_THROWS_WITH_AS(dev.step(dw, dg, s), doctest::Contains("non-finite"), std::invalid_argument);
    const matopt::DeviceMatrix<T> wide(HostMat(matopt::test::randn<HostMat>(m, n + 1, 3)));
    CHECK_THROWS_WITH_AS(dev.step(dw, wide, s), doctest::Contains("G is 4x7 but W is 4x6"), std::invalid_argument);
    dev.options().beta1 = T(2);
    CHECK_THROWS_WITH_AS(dev.step(dw, matopt::DeviceMatrix<T>(w0), s), doctest::Contains("beta1"),
                         std::invalid_argument);
    CHECK(matopt::to_host(dw) == w0);
    CHECK(s.steps == 0);
    o.non_finite = matopt::NonFinite::Skip;
    matopt::DeviceLion<T> skip(o);
    skip.step(dw, dg, s);
    CHECK(s.skipped == 1);
    CHECK(matopt::to_host(dw) == w0);
  }
  // Zero: the step of G with its NaN replaced by 0 (that entry moves by the decay alone: sign(0) = 0).
  o.non_finite = matopt::NonFinite::Zero;
  matopt::DeviceLion<T> dev(o);
  matopt::DeviceMatrix<T> dw(w0);
  std::vector<matopt::DeviceLion<T>::State> ds{dev.make_state(dw)};
  dev.step(dw, dg, ds[0]);
  CHECK(ds[0].zeroed == 1);
  CHECK(matopt::to_host(dw)(1, 2) == w0(1, 2) * (T(1) - o.lr * o.weight_decay));
  // Device -> host -> device: the host Lion continues the device's trajectory, and the device the host's.
  matopt::Lion<T> host(o);
  HostMat w = matopt::to_host(dw);
  std::vector<matopt::Lion<T>::State> hs{host.make_state(w)};
  std::stringstream file;
  matopt::save_checkpoint(file, dev, ds);
  matopt::load_checkpoint(file, host, hs);
  CHECK(hs[0].steps == 1);
  CHECK(moments(hs[0].m, m, n) == moments(ds[0].m, m, n, Layout::RowMajor));
  const HostMat g2 = matopt::test::randn<HostMat>(m, n, 7);
  host.step(w, g2, hs[0]);
  dev.step(dw, matopt::DeviceMatrix<T>(g2), ds[0]);
  CHECK(matopt::test::rel_error(matopt::to_host(dw), w) <= 1e-15);
  std::stringstream back;
  matopt::save_checkpoint(back, host, hs);
  matopt::load_checkpoint(back, dev, ds);
  CHECK(ds[0].steps == 2);
  CHECK(moments(ds[0].m, m, n, Layout::RowMajor) == moments(hs[0].m, m, n));
}

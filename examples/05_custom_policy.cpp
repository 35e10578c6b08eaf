// SPDX-License-Identifier: MIT
// A preconditioner of one's own, written once against the engine operations and stepped on the host (Eigen /
// BLAS) and on Thrust's device system (OpenMP here; CUDA with nvcc) in the same program
// (docs/extending.md#a-policy-written-once-for-every-engine).
//
// RmsMatch: D = sqrt(min(m, n)) U / max(||U||_F, eps), the momentum rescaled to the Frobenius norm of an
// orthogonal matrix, which is what Muon's update has, at Theta(mn): a baseline that separates the size of Muon's
// update from its direction. The program checks one host step against the closed form
// W1 = W0 - lr sqrt(min(m, n)) G / ||G||_F (plain momentum from zero: U = G), then ten steps on the host and on
// Thrust against each other, in float and double, row- and column-major, tall, wide and square, and a bad rms_eps
// refused on both with W unchanged; it exits 1 on a mismatch. CTest runs it (example.custom_policy).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <thrust/device_vector.h>

#include <matopt/backend/device_optimizer.hpp>
#include <matopt/backend/thrust.hpp>
#include <matopt/matopt.hpp>

namespace {

/// The policy: its options and the common members, then `run`, the transformation, once for every engine.
struct RmsMatch {
  struct Options {
    double eps = 1e-12;  // the norm floor (key rms_eps)
  };
  static constexpr const char* name() { return "RmsMatch"; }
  static double cost(matopt::Index m, matopt::Index n) { return matopt::elementwise_cost(m, n); }
  /// Each option once: its key, field, check and doc (text setting, validation and key lists come from it).
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("rms_eps", o.eps, matopt::checks::Positive{}, "the norm floor");
  }

  /// U <- sqrt(min(m, n)) U / max(||U||_F, eps), in place, with the engine's overflow-safe norm and its scale.
  template <class Engine, class M>
  static void run(Engine& e, M& u, const Options& o, matopt::Index m, matopt::Index n) {
    using T = typename Engine::template scalar_t<M>;
    const T norm = std::max(e.norm(u), T(o.eps));
    e.scale(u, std::sqrt(T(std::min(m, n))) / norm);
  }
};

template <class T>
using Opt = matopt::Optimizer<T, matopt::OnEngine<RmsMatch>, matopt::Momentum<matopt::Sum, matopt::Plain>,
                              matopt::Static<matopt::shape::Unit>>;

template <class T, int Order>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>;

/// ||a - b||_F / ||b||_F.
template <class A, class B>
double rel(const A& a, const B& b) {
  return (a.template cast<double>() - b.template cast<double>()).norm() / b.template cast<double>().norm();
}

template <class T, int Order>
bool check(matopt::Index m, matopt::Index n) {
  const double tol = std::is_same_v<T, float> ? 5e-7 : 1e-15;  // measured: 3.4e-8 and 7e-17
  typename Opt<T>::Options options;
  options.lr = T(0.05);
  options.weight_decay = T(0);
  std::srand(unsigned(m * 31 + n));
  const Mat<T, Order> w0 = Mat<T, Order>::Random(m, n);

  // One host step against the closed form (in double).
  Opt<T> host(options);
  Mat<T, Order> w = w0;
  const Mat<T, Order> g = Mat<T, Order>::Random(m, n);
  auto hs = host.make_state(w);
  host.step(w, g, hs);
  const Eigen::MatrixXd gd = g.template cast<double>();
  const Eigen::MatrixXd expected =
      w0.template cast<double>() - 0.05 * std::sqrt(double(std::min(m, n))) * gd / gd.norm();
  const double closed = rel(w, expected);

  // Ten steps on the host and on Thrust, from the same start with the same gradients.
  w = w0;
  hs = host.make_state(w);
  thrust::device_vector<T> wd(w0.data(), w0.data() + w0.size()), gd_buf(std::size_t(m * n));
  const matopt::Layout layout = Order == Eigen::RowMajor ? matopt::Layout::RowMajor : matopt::Layout::ColMajor;
  const matopt::DeviceMatrixView<T> wv{thrust::raw_pointer_cast(wd.data()), m, n, layout};
  const matopt::DeviceMatrixView<const T> gv{thrust::raw_pointer_cast(gd_buf.data()), m, n, layout};
  matopt::DeviceOptimizer<Opt<T>, matopt::ThrustEngine> device(options);
  auto ds = device.make_state(wv);
  for (int k = 0; k < 10; ++k) {
    const Mat<T, Order> gk = Mat<T, Order>::Random(m, n);
    thrust::copy(gk.data(), gk.data() + gk.size(), gd_buf.begin());
    host.step(w, gk, hs);
    device.step(wv, gv, ds);
  }
  const double agree = rel(matopt::to_host(wv), w);

  // A bad rms_eps is refused at the step on both engines, naming the key, with W unchanged.
  bool refused = true;
  const Mat<T, Order> w_before = w, wd_before = matopt::to_host(wv).template cast<T>();
  host.options().precondition.eps = 0;
  device.options().precondition.eps = 0;
  for (int engine = 0; engine < 2; ++engine) {
    try {
      if (engine == 0) host.step(w, w_before, hs);
      else device.step(wv, gv, ds);
      refused = false;
    } catch (const std::invalid_argument& e) {
      refused = refused && std::string(e.what()).find("rms_eps must be finite and > 0") != std::string::npos;
    }
  }
  refused = refused && w == w_before && matopt::to_host(wv).template cast<T>() == wd_before;
  const bool ok = closed <= tol && agree <= tol && refused;
  std::printf("%-6s %-12s %4ldx%-4ld  host vs closed form %.2e   Thrust vs host after 10 steps %.2e  "
              "rms_eps = 0 refused, W unchanged: %s  %s\n",
              std::is_same_v<T, float> ? "float" : "double", Order == Eigen::RowMajor ? "row-major" : "column-major",
              long(m), long(n), closed, agree, refused ? "yes" : "NO", ok ? "ok" : "MISMATCH");
  return ok;
}

template <class T>
bool check_all() {
  bool ok = true;
  for (auto [m, n] : {std::pair<matopt::Index, matopt::Index>{48, 32}, {32, 48}, {40, 40}}) {
    ok = check<T, Eigen::RowMajor>(m, n) && ok;
    ok = check<T, Eigen::ColMajor>(m, n) && ok;
  }
  return ok;
}

}  // namespace

int main() {
  std::printf("RmsMatch, written once (RmsMatch::run), on the host engine and on Thrust (%s)\n",
              matopt::ThrustEngine::name());
  const bool ok = check_all<float>() & check_all<double>();
  return ok ? 0 : 1;
}

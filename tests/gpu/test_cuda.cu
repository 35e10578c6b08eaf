// SPDX-License-Identifier: MIT
// The CUDA backend (issue 4) against the Eigen backend. Needs an NVIDIA GPU to run (CTest label gpu; built
// whenever nvcc is found; scripts/gpu-check.sh builds and runs it on a GPU machine).
//
// - the cases shared with the Thrust suite, on cuda::Engine (tests/device_step_cases.hpp): every preset (float
//   and double) and the compositions (float) against the host, both storage orders, odd shapes (1 x n, n x 1,
//   empty, and shapes that take each row-kernel path: warp, block and long rows, two-pass along and across),
//   through tests/device_compare.hpp (W, the update, the policies' states, the momentum); extreme magnitudes;
//   non-finite gradient policies; bad input leaves W unchanged; and (tests/device_cases.hpp) ExactPolar,
//   checkpoints moved between host and device, spectral diagnostics of device matrices, telemetry; the peers'
//   variants against the PyTorch golden data (tests/device_variant_cases.hpp: NorMuon, AdaMuon, NAMO, PolarGrad,
//   Turbo-Muon, row blocks, cautious decay);
// - SpectralCap (the cap firing and not) and Adaptive (every = 1, 2; a switch to Exact) against the host;
// - Newton–Schulz in FP32, TF32 and BF16 against the host NS in double, per-precision tolerances;
// - orthogonalize_batched against a loop of single orthogonalize calls;
// - engine scratch poisoned (NaN) before every run, and outputs poisoned before they are written;
// - norms and finiteness checks at extreme magnitudes; CUDA and cuBLAS failures become cuda::Error; step
//   allocates no device memory.
//
// Tolerances of the Newton–Schulz products, relative Frobenius error of D against the host in double:
//   FP32 1e-4 (as tests/test_orthogonalize.cpp for float); TF32 (10 explicit mantissa bits, unit roundoff
//   u = 2^-11 = 4.9e-4) 1.5e-2; BF16 (7 explicit bits, u = 2^-8 = 3.9e-3) 0.1. Each product rounds its
//   operands (relative error ~u per product) and five NS steps amplify earlier errors by |p'(s)| <= 3.4 per
//   step (Jordan's quintic; ~1-1.7 on converged singular values), about 10-15 u at the end: 0.1 is ~26 u for
//   BF16 and 1.5e-2 ~30 u for TF32. A wrong block, transpose or triangle gives errors of order 1.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/device_vector.h>

#include <matopt/backend/cuda.cuh>
#include <matopt/backend/device_adamw.hpp>
#include <matopt/matopt.hpp>
#include <matopt/serialization/checkpoint.hpp>

#include "device_compare.hpp"
#include "test_support.hpp"

namespace {

using matopt::Index;
using matopt::Layout;
using matopt::test::rel_error;
namespace mc = matopt::cuda;

template <class T, int Order>
using HostMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>;

template <class T>
T* raw(thrust::device_vector<T>& v) {
  return thrust::raw_pointer_cast(v.data());
}

/// Fills device memory with 0xFF bytes: NaN in fp32, fp64 and bf16.
template <class T>
void poison(thrust::device_vector<T>& v) {
  if (!v.empty()) MATOPT_CUDA_CHECK(cudaMemset(raw(v), 0xFF, v.size() * sizeof(T)));
}

/// `count` m x n matrices (count * m rows of u, block b = matrix b) on the device in `layout`.
template <class T>
thrust::device_vector<T> to_device(const Eigen::MatrixXd& u, Index count, Layout layout) {
  const Index m = u.rows() / (count > 0 ? count : 1), n = u.cols();
  std::vector<T> h(std::size_t(u.size()));
  for (Index b = 0; b < count; ++b)
    for (Index i = 0; i < m; ++i)
      for (Index j = 0; j < n; ++j)
        h[std::size_t(b * m * n + (layout == Layout::RowMajor ? i * n + j : i + j * m))] = T(u(b * m + i, j));
  return thrust::device_vector<T>(h.begin(), h.end());
}
/// Matrix b (m x n, `layout`) of device storage v, as a double host matrix.
template <class T>
Eigen::MatrixXd from_device(const thrust::device_vector<T>& v, Index b, Index m, Index n, Layout layout) {
  std::vector<T> h(std::size_t(m * n));
  thrust::copy(v.begin() + b * m * n, v.begin() + (b + 1) * m * n, h.begin());
  Eigen::MatrixXd out(m, n);
  for (Index i = 0; i < m; ++i)
    for (Index j = 0; j < n; ++j)
      out(i, j) = double(h[std::size_t(layout == Layout::RowMajor ? i * n + j : i + j * m)]);
  return out;
}

}  // namespace

// ---- Optimizers against the host --------------------------------------------------------------------------

namespace matopt::test {
/// The backend of the shared device cases (tests/device_cases.hpp, tests/device_step_cases.hpp): FP32
/// products, the engine's scratch poisoned before every step. The host reference runs once, on row-major
/// Eigen matrices (tests/device_compare.hpp); the device runs on both storage orders.
struct Backend {
  using Engine = cuda::Engine;
  template <class Opt>
  static cuda::Optimizer<Opt> optimizer(const typename Opt::Options& o) {
    return cuda::Optimizer<Opt>(o, cuda::Engine(cuda::Precision::FP32));
  }
  template <class Dev>
  static void before_step(Dev& dev) {
    dev.engine().poison_scratch();
  }
  /// The Thrust suite's odd shapes, plus shapes that take each row-kernel path of the engine: rows of <= 256
  /// (a warp per row), <= 4096 (a block, registers), <= 8192 (1024 threads), longer (two-pass along: 3 and
  /// 20 rows), and their transposes (column-major rows: two-pass across).
  static const std::vector<std::pair<Index, Index>>& shapes() {
    static const std::vector<std::pair<Index, Index>> s = {
        {5, 7},  {7, 5},   {1, 6},     {6, 1},     {0, 4},     {4, 0},    {16, 16},  {9, 40},
        {40, 9}, {24, 33}, {300, 300}, {64, 5000}, {5000, 64}, {3, 9000}, {9000, 3}, {20, 20000}};
    return s;
  }
};
}  // namespace matopt::test

#define MATOPT_BACKEND "cuda backend"
#include "device_cases.hpp"
// float only for the compositions: the kernels are the presets' (double is covered there); one more type
// would double the host instantiations, the bulk of this file's compile time.
#define MATOPT_COMPOSITION_TYPES float
#include "device_step_cases.hpp"
#include "device_variant_cases.hpp"

using matopt::test::cases::compare_all_shapes;

TEST_CASE("cuda backend: NorMuon on unequal row blocks reserves each block's row scratch (1024 x 1024, 768/128/128)") {
  // The engine's row-norm scratch is not monotone in the rows: the 768-row block's column-major D needs more than the
  // whole 1024 x 1024 matrix's (DeviceOptimizer::reserve reserves each block's shape).
  matopt::NorMuon<float>::Options o;
  o.precondition.split_sizes = {768, 128, 128};
  matopt::test::compare_on<matopt::test::Backend, matopt::NorMuon<float>>(o, {{1024, 1024}});
}

TEST_CASE("cuda backend: Muon with TF32 and BF16 products stays close to the host, and is not FP32") {
  // The update W - W0 carries the NS error (tolerance as for NS below); W itself moves by lr * s * D. The reduced
  // precisions must also be measurably less accurate than FP32 on the same inputs: an engine that silently ran
  // FP32 for them would pass the tolerance alone (FP32's error here is about 1e-6; TF32's unit roundoff 4.9e-4,
  // BF16's 3.9e-3).
  for (const auto& shape : {std::pair<Index, Index>{64, 96}, std::pair<Index, Index>{1024, 1024}}) {
    const Index m = shape.first, n = shape.second;
    CAPTURE(m);
    using Opt = matopt::Muon<float>;
    const HostMat<float, Eigen::RowMajor> w0 = matopt::test::randn<HostMat<float, Eigen::RowMajor>>(m, n, 5);
    const HostMat<float, Eigen::RowMajor> g = matopt::test::randn<HostMat<float, Eigen::RowMajor>>(m, n, 6);
    HostMat<float, Eigen::RowMajor> w = w0;
    Opt host;
    auto hs = host.make_state(w);
    host.step(w, g, hs);
    const auto error = [&](mc::Precision p) {
      mc::Optimizer<Opt> dev({}, mc::Engine(p));
      matopt::DeviceMatrix<float> dw(w0);
      const matopt::DeviceMatrix<float> dg(g);
      auto ds = dev.make_state(dw);
      dev.engine().poison_scratch();
      dev.step(dw, dg, ds);
      const Eigen::MatrixXd got = matopt::to_host(dw).cast<double>();
      return rel_error(got - w0.cast<double>(), (w - w0).cast<double>());
    };
    const double fp32 = error(mc::Precision::FP32);
    for (const mc::Precision p : {mc::Precision::TF32, mc::Precision::BF16}) {
      CAPTURE(mc::precision_name(p));
      const double e = error(p);
      MESSAGE(mc::precision_name(p), " ", m, "x", n, ": relative error ", e, " (FP32 ", fp32, ")");
      CHECK(e <= (p == mc::Precision::BF16 ? 0.1 : 1.5e-2));
      CHECK(e >= 10 * fp32);
    }
  }
}

// ---- SpectralCap and Adaptive ----------------------------------------------------------------------------------

namespace {

using matopt::test::along_w;  // gradients of tests/device_compare.hpp
using matopt::test::rank_one_after_first;

/// Adaptive's shapes: the Thrust suite's, and larger ones whose Gram (k x k, copied to the host) stays moderate.
template <class Opt>
matopt::test::DeviceDifferences compare_adaptive_shapes(typename Opt::Options options,
                                                        const matopt::test::GradientFn& gradient = {}) {
  return matopt::test::compare_on<matopt::test::Backend, Opt>(
      options,
      {{5, 7}, {7, 5}, {1, 6}, {6, 1}, {0, 4}, {4, 0}, {16, 16}, {9, 40}, {40, 9}, {24, 33}, {300, 300}, {64, 1000},
       {1000, 64}},
      gradient);
}

}  // namespace

// float (the shapes of every kernel path) and one double composition, as the compositions above.
TEST_CASE("cuda backend: SpectralCap equals the host (Muon-like and RMNP-like, Static and TrustRatio)") {
  using namespace matopt;
  using T = float;
  using CappedMuon = Optimizer<T, Orthogonalize<>, Momentum<Ema, Nesterov>, SpectralCap<Static<>>>;
  using CappedRmnp = Optimizer<T, RowNormalize, Momentum<Sum, Nesterov>, SpectralCap<Static<shape::MuonOriginal>>>;
  using CappedOrScale = Optimizer<T, Orthogonalize<NewtonSchulz<schedules::PolarExpress>>, Momentum<Sum, Nesterov>,
                                  SpectralCap<TrustRatio<trust::OrScale, shape::Unit>>>;
  test::DeviceDifferences worst;
  SUBCASE("random gradients") {
    worst.merge(compare_all_shapes<CappedMuon>());
    worst.merge(compare_all_shapes<CappedRmnp>());
    worst.merge(compare_all_shapes<CappedOrScale>());
  }
  SUBCASE("the cap fires (c < 0)") {
    worst.merge(compare_all_shapes<CappedMuon>({}, along_w(-1)));
    worst.merge(compare_all_shapes<CappedRmnp>({}, along_w(-1)));
  }
  SUBCASE("the cap does not fire: c > 0, or sigma1 below the threshold") {
    worst.merge(compare_all_shapes<CappedMuon>({}, along_w(+1)));
    typename CappedOrScale::Options o;
    o.scaling.threshold = 1e9;
    worst.merge(compare_all_shapes<CappedOrScale>(o, along_w(-1)));
  }
  SUBCASE("TF32 products: the power iteration stays in fp32") {
    // W - W0 carries the NS error (TF32), W the fp32 power iteration's; compared as the TF32 Muon test does.
    for (const Index m : {Index(64), Index(96)}) {
      const Index n = 160 - m;
      const HostMat<T, Eigen::RowMajor> w0 = matopt::test::randn<HostMat<T, Eigen::RowMajor>>(m, n, 5);
      const HostMat<T, Eigen::RowMajor> g = -w0;
      HostMat<T, Eigen::RowMajor> w = w0;
      CappedMuon host;
      auto hs = host.make_state(w);
      host.step(w, g, hs);
      mc::Optimizer<CappedMuon> dev({}, mc::Engine(mc::Precision::TF32));
      matopt::DeviceMatrix<T> dw(w0);
      auto ds = dev.make_state(dw);
      dev.engine().poison_scratch();
      dev.step(dw, matopt::DeviceMatrix<T>(g), ds);
      CHECK(ds.scaling.capped == hs.scaling.capped);
      CHECK(double(ds.scaling.sigma) == doctest::Approx(double(hs.scaling.sigma)).epsilon(1e-5));
      CHECK(rel_error(matopt::to_host(dw).cast<double>() - w0.cast<double>(), (w - w0).cast<double>()) <= 1.5e-2);
    }
  }
  SUBCASE("double") {
    using Opt = Optimizer<double, Orthogonalize<>, Momentum<Ema, Nesterov>, SpectralCap<TrustRatio<trust::Lars,
                                                                                                    shape::Unit>>>;
    worst.merge(compare_all_shapes<Opt>({}, along_w(-1)));
  }
  MESSAGE("SpectralCap: max relative W difference ", worst.w, ", max state-field difference ", worst.state);
}

TEST_CASE("cuda backend: Adaptive equals the host (RowNormalize or ColNormalize against Orthogonalize)") {
  using namespace matopt;
  using T = float;
  using RowAdaptive = Optimizer<T, Adaptive<RowNormalize, Orthogonalize<>>, Momentum<Sum, Nesterov>,
                                Static<shape::MuonOriginal>>;
  using ColAdaptive = Optimizer<T, Adaptive<ColNormalize, Orthogonalize<NewtonSchulz<schedules::PolarExpress>>>,
                                Momentum<Ema, Nesterov>, Static<shape::TransposedMuonOriginal>>;
  test::DeviceDifferences worst;
  for (const int every : {1, 2}) {
    CAPTURE(every);
    typename RowAdaptive::Options ro;
    ro.precondition.every = every;
    typename ColAdaptive::Options co;
    co.precondition.every = every;
    worst.merge(compare_adaptive_shapes<RowAdaptive>(ro));
    worst.merge(compare_adaptive_shapes<ColAdaptive>(co));
    worst.merge(compare_adaptive_shapes<RowAdaptive>(ro, rank_one_after_first));  // switches to Exact
    worst.merge(compare_adaptive_shapes<ColAdaptive>(co, rank_one_after_first));
  }
  using DoubleAdaptive = Optimizer<double, Adaptive<RowNormalize, Orthogonalize<>>, Momentum<Ema, Nesterov>,
                                   SpectralCap<Static<>>>;
  typename DoubleAdaptive::Options o;
  o.precondition.every = 2;
  worst.merge(compare_adaptive_shapes<DoubleAdaptive>(o, rank_one_after_first));
  MESSAGE("Adaptive: max relative W difference ", worst.w, ", max state-field difference ", worst.state);
}

TEST_CASE("cuda backend: SpectralCap and Adaptive steps allocate no device memory") {
  using Opt = matopt::Optimizer<float, matopt::Adaptive<matopt::RowNormalize, matopt::Orthogonalize<>>,
                                matopt::Momentum<matopt::Ema, matopt::Nesterov>, matopt::SpectralCap<matopt::Static<>>>;
  const Index m = 384, n = 640;
  Opt::Options o;
  o.precondition.every = 1;
  mc::Optimizer<Opt> dev(o);
  matopt::DeviceMatrix<float> w1(matopt::test::randn<HostMat<float, Eigen::RowMajor>>(m, n, 1)), w2 = w1;
  const matopt::DeviceMatrix<float> g(matopt::test::randn<HostMat<float, Eigen::RowMajor>>(m, n, 2));
  auto s1 = dev.make_state(w1);
  dev.step(w1, g, s1);  // loads the kernels
  auto s2 = dev.make_state(w2);
  const std::size_t scratch = dev.engine().scratch_bytes(), workspace = dev.workspace_bytes();
  MATOPT_CUDA_CHECK(cudaDeviceSynchronize());
  std::size_t free0 = 0, free1 = 0, total = 0;
  MATOPT_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  for (int k = 0; k < 3; ++k) dev.step(w2, g, s2);
  MATOPT_CUDA_CHECK(cudaDeviceSynchronize());
  MATOPT_CUDA_CHECK(cudaMemGetInfo(&free1, &total));
  CHECK(free1 == free0);
  CHECK(dev.engine().scratch_bytes() == scratch);
  CHECK(dev.workspace_bytes() == workspace);
  CHECK(s2.precondition.calls == 3);
  CHECK(s2.scaling.warm);
}

// ---- Newton–Schulz ------------------------------------------------------------------------------------------

namespace {

/// Against NS in double. The first GPU run (H200, CUDA 13.0) measured 1.6e-5 (FP32), 0.011 (TF32) and 0.18 (BF16,
/// Polar Express on a 50 x 1 vector; 0.10 for Gram NS on 64 x 64); bfloat16 NS in PyTorch on the CPU, all products in
/// bf16 as the Muon reference runs it, differs from NS in double by 0.03-0.13 on the same shapes.
double ns_tolerance(mc::Precision p) {
  switch (p) {
    case mc::Precision::FP32:
      return 1e-4;
    case mc::Precision::TF32:
      return 1.5e-2;
    case mc::Precision::BF16:
      return 0.25;
  }
  return 0;
}

/// Shapes of the NS tests: square, wide and tall, Gram (s >= 4 r), vectors, and r = 1024 (BF16's blocked
/// lower-triangle product: r >= 1024, r % 16 == 0) next to r = 300 (one full GEMM).
const std::vector<std::pair<Index, Index>> ns_shapes = {{64, 64},     {48, 200}, {200, 48}, {256, 256}, {300, 500},
                                                        {1024, 1536}, {1, 50},   {50, 1},   {7, 3}};

template <class Method>
void ns_against_host(std::vector<mc::Engine>& engines, std::vector<double>& worst) {
  const typename Method::Options o{};
  const typename matopt::Orthogonalize<Method>::Options host_options{};  // the same NS options, no row blocks
  for (const auto& shape : ns_shapes) {
    const Index m = shape.first, n = shape.second;
    CAPTURE(m);
    CAPTURE(n);
    const Eigen::MatrixXd u = matopt::test::randn(m, n, unsigned(7 * m + n));
    const Eigen::MatrixXd ref = matopt::test::precondition<matopt::Orthogonalize<Method>, double>(u, host_options);
    for (std::size_t k = 0; k < engines.size(); ++k) {
      mc::Engine& e = engines[k];
      CAPTURE(mc::precision_name(e.precision()));
      for (const Layout layout : {Layout::RowMajor, Layout::ColMajor}) {
        CAPTURE(int(layout));
        thrust::device_vector<float> du = to_device<float>(u, 1, layout);
        thrust::device_vector<float> out(du.size());
        poison(out);
        e.poison_scratch();
        mc::orthogonalize<Method>(e, raw(du), raw(out), m, n, o, layout);
        const Eigen::MatrixXd got = from_device(out, 0, m, n, layout);
        REQUIRE(got.allFinite());
        const double err = rel_error(got, ref);
        worst[k] = std::max(worst[k], err);
        CHECK(err <= ns_tolerance(e.precision()));
      }
    }
    // double: FP64 cuBLAS against the host in double
    mc::Engine e64;
    thrust::device_vector<double> du = to_device<double>(u, 1, Layout::RowMajor);
    thrust::device_vector<double> out(du.size());
    poison(out);
    mc::orthogonalize<Method>(e64, raw(du), raw(out), m, n, o);
    CHECK(rel_error(from_device(out, 0, m, n, Layout::RowMajor), ref) <= 1e-10);
  }
}

}  // namespace

TEST_CASE("cuda backend: Newton-Schulz in FP32, TF32 and BF16 against the host NS in double") {
  std::vector<mc::Engine> engines;
  for (const mc::Precision p : {mc::Precision::FP32, mc::Precision::TF32, mc::Precision::BF16}) engines.emplace_back(p);
  std::vector<double> worst(engines.size(), 0.0);
  SUBCASE("Jordan NS5 (plain; Gram from s >= 4 r)") { ns_against_host<matopt::NewtonSchulz<>>(engines, worst); }
  SUBCASE("Polar Express") { ns_against_host<matopt::NewtonSchulz<matopt::schedules::PolarExpress>>(engines, worst); }
  SUBCASE("Gram NS, forced") { ns_against_host<matopt::GramNewtonSchulz<>>(engines, worst); }
  for (std::size_t k = 0; k < engines.size(); ++k)
    MESSAGE("NS ", mc::precision_name(engines[k].precision()), ": worst relative error against the host in double ",
            worst[k], " (tolerance ", ns_tolerance(engines[k].precision()), ")");
}

TEST_CASE("cuda backend: ns_dtype = bfloat16 runs the call's products in BF16 and restores the engine's precision") {
  const Index m = 48, n = 80;
  const Eigen::MatrixXd u = matopt::test::randn(m, n, 17);
  thrust::device_vector<float> du = to_device<float>(u, 1, Layout::RowMajor), by_option(du.size()),
                                by_engine(du.size());
  mc::Engine fp32(mc::Precision::FP32), bf16(mc::Precision::BF16);
  matopt::NewtonSchulz<>::Options o;
  o.dtype = matopt::NsDtype::BFloat16;
  poison(by_option);
  poison(by_engine);
  mc::orthogonalize(fp32, raw(du), raw(by_option), m, n, o);
  CHECK(fp32.precision() == mc::Precision::FP32);
  mc::orthogonalize(bf16, raw(du), raw(by_engine), m, n);
  CHECK(from_device(by_option, 0, m, n, Layout::RowMajor) == from_device(by_engine, 0, m, n, Layout::RowMajor));
  // double has no BF16 path on this engine: refused, nothing written
  thrust::device_vector<double> d64 = to_device<double>(u, 1, Layout::RowMajor), out64(d64.size());
  poison(out64);
  const std::vector<double> before(out64.begin(), out64.end());
  CHECK_THROWS_WITH_AS(mc::orthogonalize(fp32, raw(d64), raw(out64), m, n, o),
                       doctest::Contains("ns_dtype = bfloat16 on the CUDA engine takes float"), std::invalid_argument);
  const std::vector<double> after(out64.begin(), out64.end());
  CHECK(std::memcmp(after.data(), before.data(), after.size() * sizeof(double)) == 0);  // poison is NaN: bytes
}

TEST_CASE("cuda backend: orthogonalize_batched equals a loop of orthogonalize") {
  struct Case {
    Index count, m, n;
    Layout layout;
  };
  const std::vector<Case> cases = {{5, 24, 40, Layout::RowMajor},  {3, 40, 24, Layout::ColMajor},
                                   {4, 8, 64, Layout::RowMajor},   {1, 16, 16, Layout::ColMajor},
                                   {6, 1, 9, Layout::RowMajor},    {2, 9, 1, Layout::ColMajor},
                                   {2, 256, 256, Layout::RowMajor}};
  SUBCASE("float: FP32 and BF16 products, both storage orders, wide, tall, Gram, vectors") {
    for (const mc::Precision p : {mc::Precision::FP32, mc::Precision::BF16}) {
      CAPTURE(mc::precision_name(p));
      mc::Engine e(p);
      for (const Case& c : cases) {
        CAPTURE(c.count);
        CAPTURE(c.m);
        CAPTURE(c.n);
        CAPTURE(int(c.layout));
        const Eigen::MatrixXd u = matopt::test::randn(c.count * c.m, c.n, unsigned(c.count + 3 * c.m + c.n));
        thrust::device_vector<float> du = to_device<float>(u, c.count, c.layout);
        thrust::device_vector<float> batched(du.size()), loop(du.size());
        poison(batched);
        poison(loop);
        e.poison_scratch();
        mc::orthogonalize_batched(e, raw(du), raw(batched), c.count, c.m, c.n, {}, c.layout);
        for (Index b = 0; b < c.count; ++b)
          mc::orthogonalize(e, raw(du) + b * c.m * c.n, raw(loop) + b * c.m * c.n, c.m, c.n, {}, c.layout);
        for (Index b = 0; b < c.count; ++b) {
          CAPTURE(b);
          const Eigen::MatrixXd gb = from_device(batched, b, c.m, c.n, c.layout),
                                gl = from_device(loop, b, c.m, c.n, c.layout);
          REQUIRE(gb.allFinite());
          // FP32: the batched A A^T is a full GEMM where the loop runs SYRK; BF16: the same, after bf16 rounding.
          CHECK(rel_error(gb, gl) <= (p == mc::Precision::FP32 ? 1e-4 : 5e-2));
          const Eigen::MatrixXd ref = matopt::test::precondition<matopt::Orthogonalize<matopt::NewtonSchulz<>>, double>(
              u.middleRows(b * c.m, c.m));
          CHECK(rel_error(gb, ref) <= ns_tolerance(p));
        }
      }
    }
  }
  SUBCASE("double, FP64 products") {
    mc::Engine e;
    const Eigen::MatrixXd u = matopt::test::randn(4 * 12, 30, 9);
    thrust::device_vector<double> du = to_device<double>(u, 4, Layout::RowMajor), batched(du.size()), loop(du.size());
    poison(batched);
    mc::orthogonalize_batched(e, raw(du), raw(batched), 4, 12, 30);
    for (Index b = 0; b < 4; ++b) mc::orthogonalize(e, raw(du) + b * 360, raw(loop) + b * 360, 12, 30);
    for (Index b = 0; b < 4; ++b)
      CHECK(rel_error(from_device(batched, b, 12, 30, Layout::RowMajor),
                      from_device(loop, b, 12, 30, Layout::RowMajor)) <= 1e-12);
  }
  SUBCASE("empty batches and shapes do nothing; bad arguments throw std::invalid_argument") {
    mc::Engine e;
    thrust::device_vector<float> x(8, 1.0f);
    mc::orthogonalize_batched(e, raw(x), raw(x), 0, 2, 4);
    mc::orthogonalize_batched(e, raw(x), raw(x), 3, 0, 4);
    CHECK(thrust::count(x.begin(), x.end(), 1.0f) == 8);
    CHECK_THROWS_AS(mc::orthogonalize_batched(e, raw(x), raw(x), -1, 2, 4), std::invalid_argument);
    CHECK_THROWS_AS((mc::orthogonalize_batched<matopt::NewtonSchulz<>, float>(e, nullptr, raw(x), 1, 2, 4)),
                    std::invalid_argument);
    matopt::NewtonSchulz<>::Options bad;
    bad.schedule.steps = 0;
    CHECK_THROWS_WITH_AS(mc::orthogonalize_batched(e, raw(x), raw(x), 1, 2, 4, bad), doctest::Contains("steps"),
                         std::invalid_argument);
  }
}

// ---- Engine operations, robustness, errors -------------------------------------------------------------------

TEST_CASE_TEMPLATE("cuda engine: norms and finiteness at extreme magnitudes", T, float, double) {
  mc::Engine e;
  const double tiny = std::is_same_v<T, float> ? 1e-30 : 1e-200, huge = std::is_same_v<T, float> ? 1e30 : 1e200;
  for (const Index size : {Index(1), Index(7), Index(1000), Index(300000)}) {
    for (const double magnitude : {tiny, 1.0, huge, 0.0}) {
      CAPTURE(size);
      CAPTURE(magnitude);
      const Eigen::Matrix<T, Eigen::Dynamic, 1> x =
          (matopt::test::randn(size, 1, unsigned(size)) * magnitude).template cast<T>();
      thrust::device_vector<T> dx(x.data(), x.data() + size);
      e.poison_scratch();
      const T got = e.norm(matopt::detail::col_major(static_cast<const T*>(raw(dx)), size, 1));
      const T want = matopt::detail::robust_norm(x);
      REQUIRE(std::isfinite(got));
      CHECK(double(got) == doctest::Approx(double(want)).epsilon(std::is_same_v<T, float> ? 1e-5 : 1e-12));
      CHECK(e.all_finite(matopt::detail::col_major(static_cast<const T*>(raw(dx)), size, 1)));
      // a non-dense handle: every other element of a size/2 x 2 column-major matrix with leading dimension 2 * rows
      if (size >= 4) {
        const Index rows = size / 4;
        const matopt::detail::Strided<const T> sub{raw(dx), rows, 2, 1, 2 * rows};
        Eigen::Matrix<T, Eigen::Dynamic, 1> h(2 * rows);
        h << x.head(rows), x.segment(2 * rows, rows);
        CHECK(double(e.norm(sub)) == doctest::Approx(double(matopt::detail::robust_norm(h))).epsilon(1e-5));
      }
    }
  }
  thrust::device_vector<T> v(1000, T(1));
  const auto h = matopt::detail::col_major(static_cast<const T*>(raw(v)), 1000, 1);
  v[999] = std::numeric_limits<T>::infinity();
  CHECK_FALSE(e.all_finite(h));
  CHECK(std::isinf(e.norm(h)));
  v[0] = std::numeric_limits<T>::quiet_NaN();
  CHECK_FALSE(e.all_finite(h));
  CHECK(std::isnan(e.norm(h)));
  CHECK(e.all_finite(matopt::detail::col_major(static_cast<const T*>(raw(v)), 0, 5)));
  CHECK(e.norm(matopt::detail::col_major(static_cast<const T*>(raw(v)), 0, 5)) == T(0));
}

namespace {
__global__ void empty_kernel() {}
}  // namespace

TEST_CASE("cuda backend: CUDA and cuBLAS failures become matopt::cuda::Error with the call and its place") {
  mc::Engine e;
  SUBCASE("a failed cudaMalloc (scratch for an impossible shape)") {
    try {
      e.reserve(Index(1) << 31, Index(1) << 31);
      FAIL("reserve did not throw");
    } catch (const mc::Error& err) {
      CHECK(err.code() == int(cudaErrorMemoryAllocation));
      CHECK_FALSE(err.is_cublas());
      CHECK(std::string(err.what()).find("cudaMalloc") != std::string::npos);
      CHECK(std::string(err.what()).find("buffer.cuh:") != std::string::npos);
    }
    // non-sticky: the engine still works
    thrust::device_vector<float> x(3, 2.0f);
    CHECK(e.norm(matopt::detail::col_major(static_cast<const float*>(raw(x)), 3, 1)) ==
          doctest::Approx(std::sqrt(12.0)));
  }
  SUBCASE("a bad kernel launch") {
    empty_kernel<<<1, 4096>>>();  // more threads per block than any GPU allows
    CHECK_THROWS_WITH_AS(MATOPT_CUDA_CHECK_LAUNCH("empty_kernel"), doctest::Contains("launch of empty_kernel"),
                         mc::Error);
  }
  SUBCASE("a cuBLAS status") {
    const float one = 1.0f;
    try {
      MATOPT_CUDA_CHECK(
          cublasSgemm(e.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, -1, 1, 1, &one, nullptr, 1, nullptr, 1, &one, nullptr, 1));
      FAIL("cublasSgemm did not fail");
    } catch (const mc::Error& err) {
      CHECK(err.is_cublas());
      CHECK(err.code() == int(CUBLAS_STATUS_INVALID_VALUE));
      CHECK(std::string(err.what()).find("cublasSgemm") != std::string::npos);
    }
  }
  SUBCASE("an operation beyond the reserved scratch is a logic error, not an allocation") {
    mc::Engine bf(mc::Precision::BF16);  // nothing reserved
    thrust::device_vector<float> a(64 * 64), c(64 * 64);
    auto ah = matopt::detail::col_major(raw(a), 64, 64), ch = matopt::detail::col_major(raw(c), 64, 64);
    CHECK_THROWS_AS(bf.gemm(1.0f, ah, ah, 0.0f, ch), std::logic_error);
  }
}

TEST_CASE("cuda backend: step allocates no device memory once kernels are loaded, scratch sized by make_state") {
  for (const mc::Precision p : {mc::Precision::FP32, mc::Precision::BF16}) {
    CAPTURE(mc::precision_name(p));
    using Opt = matopt::Muon<float>;
    const Index m = 384, n = 640;
    mc::Optimizer<Opt> muon({}, mc::Engine(p));
    mc::Optimizer<matopt::RMNP<float>> rmnp;
    matopt::DeviceMatrix<float> w1(matopt::test::randn<HostMat<float, Eigen::RowMajor>>(m, n, 1)), w2 = w1;
    const matopt::DeviceMatrix<float> g(matopt::test::randn<HostMat<float, Eigen::RowMajor>>(m, n, 2));
    auto s1 = muon.make_state(w1);
    auto r1 = rmnp.make_state(w1);
    muon.step(w1, g, s1);  // loads the kernels (lazy module loading allocates device memory for code)
    rmnp.step(w1, g, r1);
    auto s2 = muon.make_state(w2);
    auto r2 = rmnp.make_state(w2);
    const std::size_t scratch = muon.engine().scratch_bytes(), workspace = muon.workspace_bytes();
    MATOPT_CUDA_CHECK(cudaDeviceSynchronize());
    std::size_t free0 = 0, free1 = 0, total = 0;
    MATOPT_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    for (int k = 0; k < 3; ++k) {
      muon.step(w2, g, s2);
      rmnp.step(w2, g, r2);
    }
    MATOPT_CUDA_CHECK(cudaDeviceSynchronize());
    MATOPT_CUDA_CHECK(cudaMemGetInfo(&free1, &total));
    CHECK(free1 == free0);
    CHECK(muon.engine().scratch_bytes() == scratch);
    CHECK(muon.workspace_bytes() == workspace);
  }
}

TEST_CASE("cuda backend: an engine on the caller's non-blocking stream, with no synchronization by the caller") {
  // A stream that is not ordered with the legacy default stream, where Thrust's own copies and fills run: every
  // host-side copy the library makes (make_state, checkpoints, to_host) and DeviceAdamW on that stream must be
  // ordered with the steps queued there without any cudaDeviceSynchronize / cudaStreamSynchronize here.
  cudaStream_t stream = nullptr;
  MATOPT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    using Opt = matopt::RMNP<float>;
    using Mat = HostMat<float, Eigen::RowMajor>;
    const Mat w0 = matopt::test::randn<Mat>(333, 700, 3);
    std::vector<Mat> g;
    for (unsigned k = 0; k < 4; ++k) g.push_back(matopt::test::randn<Mat>(333, 700, 4 + k));
    const Mat b0 = matopt::test::randn<Mat>(1, 700, 9);
    Mat w = w0, b = b0;
    Opt host;
    auto hs = host.make_state(w);
    matopt::AdamW<float> host_adamw;
    auto hb = host_adamw.make_state(b);
    for (unsigned k = 0; k < 4; ++k) {
      host.step(w, g[k], hs);
      host_adamw.step(b, Mat(g[k].topRows(1)), hb);
    }

    mc::Engine moved(stream);
    mc::Optimizer<Opt> dev({}, std::move(moved));
    CHECK(dev.engine().stream() == stream);
    matopt::DeviceAdamW<float> adamw({}, stream);
    matopt::DeviceMatrix<float> dw(w0), db(b0);
    auto ds = dev.make_state(dw);
    auto dbs = adamw.make_state(db);
    std::stringstream file;
    for (unsigned k = 0; k < 4; ++k) {
      const matopt::DeviceMatrix<float> dg(g[k]), dgb(Mat(g[k].topRows(1)));
      dev.step(dw, dg, ds);
      adamw.step(db, dgb, dbs);
      if (k == 1) {  // save after two steps queued on the stream, load into fresh states, go on from those
        std::vector<decltype(ds)> states{ds};
        matopt::save_checkpoint(file, dev, states);
        auto fresh = dev.make_state(dw);
        std::vector<decltype(ds)> loaded{fresh};
        matopt::load_checkpoint(file, dev, loaded);
        ds = loaded[0];
      }
    }
    CHECK(rel_error(matopt::to_host(dw), w) <= 1e-6);
    CHECK(rel_error(matopt::to_host(db), b) <= 1e-6);
    CHECK(ds.steps == 4);
  }
  MATOPT_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("cuda backend: the BF16 product A A^T in four blocks (n >= 8192) against the host in double") {
  // cuBLAS has no bf16 SYRK: the engine forms the lower triangle from nb(nb + 1)/2 block GEMMs, 4 blocks from
  // n = 8192 (engine.cuh). Sampled entries of every block pair against double sums of the same (bf16-rounded
  // and unrounded) inputs; the bf16 error must be measurably larger than FP32's (an engine that ran FP32 would
  // pass the tolerance alone).
  const Index n = 8192, k = 256;
  CHECK(mc::detail::bf16_syrk_blocks(n) == 4);
  const Eigen::MatrixXf a = matopt::test::randn<Eigen::MatrixXf>(n, k, 21);  // column-major n x k
  thrust::device_vector<float> da(a.data(), a.data() + a.size());
  const auto gram = [&](mc::Precision p) {
    mc::Engine e(p);
    e.reserve(n, n);
    thrust::device_vector<float> c(std::size_t(n * n));
    poison(c);
    matopt::detail::Strided<float> as = matopt::detail::col_major(raw(da), n, k),
                                    cs = matopt::detail::col_major(raw(c), n, n);
    e.syrk_lower(1.0f, as, 0.0f, cs);
    e.synchronize();
    return c;
  };
  const thrust::device_vector<float> c16 = gram(mc::Precision::BF16), c32 = gram(mc::Precision::FP32);
  // Rows and columns sampled in each of the 4 blocks (2048 each): the diagonal and off-diagonal block GEMMs.
  std::vector<Index> sample;
  for (Index blk = 0; blk < 4; ++blk)
    for (Index off : {Index(0), Index(1), Index(1000), Index(2047)}) sample.push_back(blk * 2048 + off);
  double err16 = 0, err32 = 0, norm = 0;
  for (Index i : sample)
    for (Index j : sample) {
      if (j > i) continue;
      const double want = a.row(i).cast<double>().dot(a.row(j).cast<double>());
      const float got16 = c16[std::size_t(i + j * n)], got32 = c32[std::size_t(i + j * n)];
      REQUIRE(std::isfinite(got16));
      err16 += (got16 - want) * (got16 - want);
      err32 += (got32 - want) * (got32 - want);
      norm += want * want;
    }
  err16 = std::sqrt(err16 / norm);
  err32 = std::sqrt(err32 / norm);
  MESSAGE("A A^T, n = 8192, k = 256, sampled entries: bf16 relative error ", err16, ", fp32 ", err32);
  CHECK(err16 <= 2e-2);  // bf16 rounding of the operands (u = 3.9e-3), fp32 accumulation
  CHECK(err16 >= 10 * err32);
}

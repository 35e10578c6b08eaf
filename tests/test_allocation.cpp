// SPDX-License-Identifier: MIT
// Zero heap allocation inside step after make_state (performance.md target 5), for every preset (by name: the
// facade runs the same Optimizer::step code, compiled once in matopt::runtime), both storage orders, the
// compositions, the batched step, the facade and the hybrid container. Counts every malloc of the process
// (Eigen's aligned allocations, operator new, a BLAS engine's) while steps run. Small shapes: above ~128 KiB
// Eigen's own GEMM packs into heap buffers (the BLAS engine does not).
// A separate executable: it replaces malloc/free.
#include <atomic>
#include <cstdlib>
#include <limits>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <matopt/matopt.hpp>

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);
}

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
void count() {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* malloc(std::size_t n) {
  count();
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t s) {
  count();
  return __libc_calloc(n, s);
}
void* realloc(void* p, std::size_t n) {
  count();
  return __libc_realloc(p, n);
}
int posix_memalign(void** p, std::size_t a, std::size_t n) {
  count();
  *p = __libc_memalign(a, n);
  return *p ? 0 : 12;
}
void* aligned_alloc(std::size_t a, std::size_t n) {
  count();
  return __libc_memalign(a, n);
}
void free(void* p) { __libc_free(p); }
}

namespace {
/// Allocations made by f().
template <class F>
long allocations_in(F&& f) {
  allocations = 0;
  counting = true;
  f();
  counting = false;
  return allocations.load();
}

template <class Opt, class Mat>
void check_no_allocation(Opt opt, Eigen::Index m, Eigen::Index n) {
  Mat w = Mat::Random(m, n), g = Mat::Random(m, n);
  auto state = opt.make_state(w);
  opt.step(w, g, state);  // warm-up: a thread pool may be created by the first parallel region
  CHECK(allocations_in([&] {
          for (int k = 0; k < 3; ++k) opt.step(w, g, state);
        }) == 0);
}

const std::vector<std::pair<Eigen::Index, Eigen::Index>>& shapes() {
  static const std::vector<std::pair<Eigen::Index, Eigen::Index>> s = {{24, 56}, {56, 24}, {40, 40}, {8, 64}, {1, 33}};
  return s;
}

template <class Opt>
void check_preset() {
  using T = typename Opt::Scalar;
  for (const auto& mn : shapes()) {
    const auto m = mn.first;
    const auto n = mn.second;
    CAPTURE(m);
    CAPTURE(n);
    check_no_allocation<Opt, matopt::RowMatrix<T>>(Opt{}, m, n);
    check_no_allocation<Opt, matopt::ColMatrix<T>>(Opt{}, m, n);
  }
}

/// A preset built by name: the same Optimizer::step as the typed preset, compiled once in matopt::runtime (so that
/// this file does not instantiate every preset's step again: it took 128 s of g++ -O1 that way).
template <class T, class Mat>
void check_named(const char* name, Eigen::Index m, Eigen::Index n) {
  auto opt = matopt::make_optimizer<T>(name);
  Mat w = Mat::Random(m, n), g = Mat::Random(m, n);
  auto state = opt.make_state(matopt::view(w));
  const auto gv = matopt::view(std::as_const(g));
  opt.step(matopt::view(w), gv, state);  // warm-up: a thread pool may be created by the first parallel region
  CHECK(allocations_in([&] {
          for (int k = 0; k < 3; ++k) opt.step(matopt::view(w), gv, state);
        }) == 0);
}
template <class T>
void check_named(const char* name) {
  CAPTURE(name);
  for (const auto& mn : shapes()) {
    const auto m = mn.first;
    const auto n = mn.second;
    CAPTURE(m);
    CAPTURE(n);
    check_named<T, matopt::RowMatrix<T>>(name, m, n);
    check_named<T, matopt::ColMatrix<T>>(name, m, n);
  }
}
}  // namespace

TEST_CASE("the counter sees allocations") {
  CHECK(allocations_in([] {
          std::vector<int> v(100);
          Eigen::MatrixXf m(50, 50);
          (void)v;
          (void)m;
        }) >= 2);
}

TEST_CASE_TEMPLATE("step allocates nothing after make_state", T, float, double) {
  // Every preset but PolarGrad (an exact SVD) and Dion (a Householder QR), which allocate (design.md).
  for (const char* name : {"muon", "moonlight_muon", "rmnp", "colnorm", "orscale", "normuon", "adamuon", "namo",
                           "turbo_muon", "adamw", "lion"})
    check_named<T>(name);
  using Gram = matopt::Optimizer<T, matopt::Orthogonalize<matopt::GramNewtonSchulz<>>, matopt::Momentum<matopt::Sum>,
                                 matopt::Static<>>;
  check_preset<Gram>();
}

TEST_CASE("batched step, facade and hybrid allocate nothing after set-up") {
  using Mat = matopt::RowMatrix<float>;
  std::vector<Mat> w(6, Mat::Random(32, 48)), g(6, Mat::Random(32, 48));
  matopt::Muon<float> muon;
  std::vector<matopt::Muon<float>::State> states;
  std::vector<matopt::MatrixView<float>> wv;
  std::vector<matopt::MatrixView<const float>> gv;
  for (std::size_t i = 0; i < w.size(); ++i) {
    states.push_back(muon.make_state(w[i]));
    wv.push_back(matopt::view(w[i]));
    gv.push_back(matopt::view(std::as_const(g[i])));
  }
  muon.step(wv, gv, states);
  CHECK(allocations_in([&] { muon.step(wv, gv, states); }) == 0);

  auto any = matopt::make_optimizer<float>("rmnp");
  auto s = any.make_state(matopt::view(w[0]));
  any.step(matopt::view(w[0]), matopt::view(std::as_const(g[0])), s);
  CHECK(allocations_in([&] { any.step(matopt::view(w[0]), matopt::view(std::as_const(g[0])), s); }) == 0);

  matopt::HybridOptimizer<float> hybrid(matopt::make_optimizer<float>("muon"));
  Eigen::VectorXf b = Eigen::VectorXf::Zero(32), gb = Eigen::VectorXf::Ones(32);
  hybrid.add("w", matopt::view(w[1]));
  hybrid.add("b", matopt::view(b));
  const std::vector<matopt::MatrixView<const float>> grads{matopt::view(std::as_const(g[1])),
                                                           matopt::view(std::as_const(gb))};
  hybrid.step(grads);
  CHECK(allocations_in([&] { hybrid.step(grads); }) == 0);
}

TEST_CASE_TEMPLATE("no allocation either: compositions, skipped and zeroed steps, telemetry, tiled shapes", T, float,
                   double) {
  using namespace matopt;
  using Mat = RowMatrix<T>;
  using Capped = Optimizer<T, Orthogonalize<>, Momentum<Ema, Nesterov>, SpectralCap<Static<>>>;
  using Switching = Optimizer<T, Adaptive<>, Momentum<Sum, Nesterov>, Static<>>;
  using LarsSgd = Optimizer<T, RowNormalize, Momentum<Sum, Nesterov>, TrustRatio<trust::Lars, shape::Unit>>;
  check_preset<Capped>();
  typename Switching::Options every;
  every.precondition.every = 100;  // between its dominance checks (a check evaluates U for its Gram: design.md)
  check_no_allocation<Switching, Mat>(Switching(every), 40, 24);
  typename MuonAutoSteps<T>::Options planned;
  planned.precondition.plan_every = 100;  // between its plans (a plan forms U's Gram and its eigenvalues)
  check_no_allocation<MuonAutoSteps<T>, Mat>(MuonAutoSteps<T>(planned), 40, 24);
  check_preset<LarsSgd>();

  // A skipped and a zeroed step (a NaN in G), and a step with a telemetry report.
  Mat w = Mat::Random(24, 40), g = Mat::Random(24, 40);
  Mat bad = g;
  bad(3, 5) = std::numeric_limits<T>::quiet_NaN();
  for (const NonFinite policy : {NonFinite::Skip, NonFinite::Zero}) {
    Muon<T> opt;
    opt.options().non_finite = policy;
    auto st = opt.make_state(w);
    opt.step(w, bad, st);
    CHECK(allocations_in([&] { opt.step(w, bad, st); }) == 0);
  }
  Muon<T> reported;
  long reports = 0;
  reported.set_telemetry({1, [&](const StepReport<T>&) { ++reports; }});
  auto st = reported.make_state(w);
  reported.step(w, g, st);
  CHECK(allocations_in([&] { reported.step(w, g, st); }) == 0);
  CHECK(reports == 2);

  // Large shapes (above the Eigen engine's 256-tile). Eigen's own GEMM packs its blocks into heap buffers there
  // (README, design.md), so this runs under the BLAS engine only, and with OpenBLAS's products on one thread:
  // Debian's OpenBLAS 0.3.21 (pthreads) mallocs its threads' job array in every threaded level-3 call (measured
  // here: 15 allocations per Muon step at 300x280 with 2 threads, none with 1).
  if (detail::kEngineThreads) {
    detail::SerialEngineScope serial;
    check_named<T, Mat>("muon", 300, 280);
    check_named<T, ColMatrix<T>>("muon", 280, 600);
    check_named<T, Mat>("orscale", 270, 300);
    check_named<T, Mat>("rmnp", 300, 280);
  }
}

TEST_CASE_TEMPLATE("a step takes a W or G that is no view as their copies, allocating the first time only", T, float,
                   double) {
  // Steps run on views of W and G (core/detail/driver.hpp): rows of W picked by an index list (an IndexedView), a G
  // computed on the fly and a G in the other storage order are copied into the optimizer's buffers, W written back.
  // The result is the plain matrices' step (checked against golden data elsewhere), bit for bit; the rows not picked
  // stay. Engine forms (Muon, NorMuon), the fused normalization (RMNP) and a host form (Identity's SGD).
  using namespace matopt;
  using Mat = ColMatrix<T>;
  const std::vector<int> rows{0, 2, 3, 5, 6, 8, 9, 11};
  const Mat g = Mat::Random(8, 5);
  const RowMatrix<T> g_rows = g;
  auto check = [&](auto opt, auto reference) {
    Mat big = Mat::Random(12, 5);
    const Mat before = big;
    auto picked = big(rows, Eigen::all);
    const Mat start = picked;
    Mat plain = start, plain_w = start;
    auto st = opt.make_state(plain);
    auto plain_st = reference.make_state(plain);
    opt.step(picked, T(2) * g, st);  // the first step grows the copies' buffers
    CHECK(allocations_in([&] {
            for (int k = 0; k < 2; ++k) opt.step(picked, T(2) * g, st);
          }) == 0);
    const Mat doubled = T(2) * g;
    for (int k = 0; k < 3; ++k) reference.step(plain, doubled, plain_st);
    CHECK(Mat(big(rows, Eigen::all)) == plain);
    for (int i : {1, 4, 7, 10}) CHECK(big.row(i) == before.row(i));
    // G row-major, W column-major: G copied in W's order.
    auto st2 = opt.make_state(plain_w);
    auto plain_st2 = reference.make_state(plain);
    plain = start;
    opt.step(plain_w, g_rows, st2);
    CHECK(allocations_in([&] { opt.step(plain_w, g_rows, st2); }) == 0);
    for (int k = 0; k < 2; ++k) reference.step(plain, g, plain_st2);
    CHECK(plain_w == plain);
  };
  check(Muon<T>{}, Muon<T>{});
  check(NorMuon<T>{}, NorMuon<T>{});
  check(RMNP<T>{}, RMNP<T>{});
  using Sgd = Optimizer<T, Identity, Momentum<Ema, Nesterov>, Static<>>;
  check(Sgd{}, Sgd{});
}

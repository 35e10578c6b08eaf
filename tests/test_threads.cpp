// SPDX-License-Identifier: MIT
// The engine as users build it: Newton–Schulz through the configured GEMM engine against plain Eigen code, and
// results that do not depend on the number of threads: bitwise the same W for 1, 2 and 3 OpenMP threads (3 is more
// than this machine's 2 cores, so rows split unevenly). Built with -O2 -march=native into matopt_native_tests (the
// configured GEMM engine, BLAS by default) and matopt_native_eigen_tests (Eigen's own products; there
// MATOPT_TEST_PRODUCTS_ONLY leaves out RMNP and ColNorm, whose row passes do not use the engine, and the
// HybridOptimizer case, whose batched calls are the batched step's) (tests/CMakeLists.txt). And sign(x) in this CPU's
// SIMD packets (SSE, AVX or AVX-512 by -march=native) against Eigen's scalar sign.
// Under the BLAS engine the threads varied are matopt's (row splits of the fused kernels, the batched step, row
// blocks stepped in parallel);
// OpenBLAS's own threads inside its products are not matopt's to choose and are left as configured.
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <matopt/matopt.hpp>

#include "test_support.hpp"

using namespace matopt;
using namespace matopt::test;

TEST_CASE_TEMPLATE("Newton–Schulz through the engine matches plain Eigen code", T, float, double) {
  // The engine's products (BLAS, or Eigen's tiled symmetric ones; Gram NS from max/min >= 4) against Jordan NS5
  // written plainly in double: A = X X^T, B = b A + c A^2, X = a X + B X.
  auto reference = [](Eigen::MatrixXd x) {
    const bool tall = x.rows() > x.cols();
    if (tall) x.transposeInPlace();
    x /= x.norm() + 1e-7;
    for (int k = 0; k < 5; ++k) {
      const Eigen::MatrixXd a = x * x.transpose();
      x = (3.4445 * x + (-4.7750 * a + 2.0315 * a * a) * x).eval();
    }
    if (tall) x.transposeInPlace();
    return x;
  };
  const std::vector<std::pair<Index, Index>> shapes{{256, 1000}, {300, 520}, {520, 300}, {40, 900}};
  for (const auto& mn : shapes) {
    CAPTURE(mn.first);
    CAPTURE(mn.second);
    const Eigen::MatrixXd u = randn(mn.first, mn.second, 3);
    const Eigen::MatrixXd want = reference(u);
    const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
    CHECK(rel_error(precondition<Orthogonalize<NewtonSchulz<>>, T>(RowMat<T>(u.cast<T>())), want) <= tol);
    CHECK(rel_error(precondition<Orthogonalize<NewtonSchulz<>>, T>(ColMat<T>(u.cast<T>())), want) <= tol);
  }
}

TEST_CASE_TEMPLATE("results are bitwise identical for 1, 2 and 3 threads", T, float, double) {
  auto run = [](auto opt, auto tag, Index m, Index n, int threads) {
    using M = decltype(tag);
    M w = randn<M>(m, n, 5);
    with_threads(threads, [&] {
      auto st = opt.make_state(w);
      for (unsigned k = 0; k < 2; ++k) opt.step(w, M(randn<M>(m, n, 30 + k)), st);
    });
    return w;
  };
  const auto same = [&](auto opt, auto tag, Index m, Index n) {
    const auto one = run(opt, tag, m, n, 1);
    CHECK(run(opt, tag, m, n, 2) == one);
    CHECK(run(opt, tag, m, n, 3) == one);
  };
  // 256 x 256 and 256 x 1000: one tile of the Eigen engine's symmetric products (kTile = 256), rows split between
  // threads; 420 x 270 and 270 x 700: two tiles.
  const std::vector<std::pair<Index, Index>> shapes{{256, 256}, {256, 1000}, {420, 270}, {270, 700}};
  for (const auto& mn : shapes) {
    const auto m = mn.first;
    const auto n = mn.second;
    CAPTURE(m);
    CAPTURE(n);
    same(Muon<T>{}, RowMat<T>(), m, n);
    same(Muon<T>{}, ColMat<T>(), m, n);
    same(OrScale<T>{}, ColMat<T>(), m, n);
    same(NorMuon<T>{}, RowMat<T>(), m, n);
    // Row blocks, each on one thread (parallel_blocks): per-head Muon and NorMuon, and unequal split sizes.
    Muon<T> heads;
    heads.options().precondition.heads = m % 4 == 0 ? 4 : 3;  // 270 rows: 3 heads
    same(heads, ColMat<T>(), m, n);
    NorMuon<T> normuon_heads;
    normuon_heads.options().precondition.heads = 2;
    same(normuon_heads, RowMat<T>(), m, n);
    Muon<T> split;
    split.options().precondition.split_sizes = {m / 2, m / 4, m - m / 2 - m / 4};
    same(split, RowMat<T>(), m, n);
#if !defined(MATOPT_TEST_PRODUCTS_ONLY)
    same(RMNP<T>{}, ColMat<T>(), m, n);
    same(RMNP<T>{}, RowMat<T>(), m, n);
    same(ColNorm<T>{}, RowMat<T>(), m, n);
#endif
  }
}

TEST_CASE_TEMPLATE("the batched step equals single steps bitwise, for 1, 2 and 3 threads", T, float, double) {
  // Shapes that run in the batched step's parallel part (256 x 256; 64 x 768 and 128 x 512: small products) and one
  // that does not (600 x 300), each on its own thread or one by one: the same W as stepping each alone.
  const std::vector<std::pair<Index, Index>> shapes{{64, 768}, {128, 512}, {256, 256}, {600, 300}, {768, 64}};
  auto run = [&](bool batched, int threads) {
    std::vector<RowMat<T>> w;
    for (std::size_t i = 0; i < shapes.size(); ++i)
      w.push_back(randn<RowMat<T>>(shapes[i].first, shapes[i].second, unsigned(5 + i)));
    with_threads(threads, [&] {
      Muon<T> opt;
      std::vector<typename Muon<T>::State> states;
      for (auto& x : w) states.push_back(opt.make_state(x));
      for (unsigned k = 0; k < 2; ++k) {
        std::vector<RowMat<T>> g;
        for (std::size_t i = 0; i < shapes.size(); ++i)
          g.push_back(randn<RowMat<T>>(shapes[i].first, shapes[i].second, unsigned(40 + 10 * k + i)));
        if (batched) {
          std::vector<MatrixView<T>> wv;
          std::vector<MatrixView<const T>> gv;
          for (std::size_t i = 0; i < w.size(); ++i) {
            wv.push_back(view(w[i]));
            gv.push_back(view(std::as_const(g[i])));
          }
          opt.step(wv, gv, states);
        } else {
          for (std::size_t i = 0; i < w.size(); ++i) opt.step(w[i], g[i], states[i]);
        }
      }
    });
    return w;
  };
  const auto alone = run(false, 2);
  for (const int threads : {1, 2, 3}) {
    CAPTURE(threads);
    const auto batched = run(true, threads);
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      CAPTURE(i);
      CHECK(batched[i] == alone[i]);
    }
  }
}

// The container's batched calls are the optimizers' batched step, which the case above runs on both engines: this
// case runs with the configured engine only (the Eigen-engine build leaves it out with the row passes).
#if !defined(MATOPT_TEST_PRODUCTS_ONLY)
TEST_CASE_TEMPLATE("HybridOptimizer's one batched call per route equals stepping each parameter alone, for 1, 2 and 3 "
                   "threads", T, float, double) {
  // The container steps its matrix-routed parameters in one batched call with each parameter's settings (its
  // group's lr scale, own lr or weight decay); the reference steps each parameter alone through a copy of the route's
  // optimizer whose options hold those settings (the container's former path). Step 2 has a NaN in one gradient
  // under NonFinite::Zero.
  const std::vector<std::pair<Index, Index>> shapes{{64, 192}, {192, 64}, {96, 96}, {600, 300}, {1, 96}, {96, 1}};
  struct Setting {
    std::size_t group;
    T lr, wd;
  };
  const T lr = Muon<T>{}.options().lr, adam_lr = AdamW<T>{}.options().lr;
  auto run = [&](bool container, int threads) {
    std::vector<RowMat<T>> w;
    for (std::size_t i = 0; i < shapes.size(); ++i)
      w.push_back(randn<RowMat<T>>(shapes[i].first, shapes[i].second, unsigned(7 + i)));
    with_threads(threads, [&] {
      HybridOptimizer<T> h{AnyOptimizer<T>(Muon<T>{})};
      h.options().non_finite = NonFinite::Zero;
      typename HybridOptimizer<T>::Group half{"half", T(0.5), T(0.1)};
      const std::size_t g_half = h.add_group(half);
      const std::size_t g_own = h.add_group({"own", T(1), std::nullopt});
      h.set_group_lr(g_own, T(0.01));
      const std::vector<std::size_t> group_of{0, g_half, g_own, g_half, 0, g_own};
      AnyOptimizer<T> muon{Muon<T>{}}, adamw{AdamW<T>{}};
      std::vector<typename AnyOptimizer<T>::State> states;
      for (std::size_t i = 0; i < w.size(); ++i) {
        h.add("p" + std::to_string(i), view(w[i]), Role::Auto, group_of[i]);
        const bool matrix = shapes[i].first > 1 && shapes[i].second > 1;
        states.push_back((matrix ? muon : adamw).make_state(view(std::as_const(w[i]))));
      }
      for (unsigned k = 0; k < 2; ++k) {
        std::vector<RowMat<T>> g;
        for (std::size_t i = 0; i < shapes.size(); ++i)
          g.push_back(randn<RowMat<T>>(shapes[i].first, shapes[i].second, unsigned(50 + 10 * k + i)));
        if (k == 1) g[2](3, 5) = std::numeric_limits<T>::quiet_NaN();
        std::vector<MatrixView<const T>> gv;
        for (const auto& x : g) gv.push_back(view(x));
        if (container) {
          h.step(gv);
        } else {
          for (std::size_t i = 0; i < w.size(); ++i) {
            const bool matrix = shapes[i].first > 1 && shapes[i].second > 1;
            AnyOptimizer<T>& opt = matrix ? muon : adamw;
            const T base = matrix ? lr : adam_lr;
            const std::size_t grp = group_of[i];
            opt.set_lr(grp == g_own ? T(0.01) : grp == g_half ? base * T(0.5) : base);
            opt.set_weight_decay(grp == g_half ? T(0.1) : T(0));
            opt.set_non_finite(NonFinite::Zero);
            opt.step(view(w[i]), gv[i], states[i]);
          }
        }
      }
    });
    return w;
  };
  const auto alone = run(false, 2);
  for (const int threads : {1, 2, 3}) {
    CAPTURE(threads);
    const auto batched = run(true, threads);
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      CAPTURE(i);
      CHECK(batched[i] == alone[i]);
      CHECK(batched[i].allFinite());
    }
  }
}
#endif

TEST_CASE_TEMPLATE("sign(x) of an Eigen expression in this CPU's SIMD packets equals Eigen's scalar sign bit for bit",
                   T, float, double) {
  using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
  using Lim = std::numeric_limits<T>;
  const T special[] = {T(0), -T(0), Lim::quiet_NaN(), -Lim::quiet_NaN(), Lim::infinity(), -Lim::infinity(),
                       Lim::denorm_min(), -Lim::denorm_min(), Lim::min(), Lim::max(), T(-1)};
  // Eigen's own sign() is scalar code (no packet form in Eigen 3.4): the independent reference, NaN kept.
  const auto same = [](const Array& a, const Array& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(T) * std::size_t(a.size())) == 0;
  };
  // Lengths around every packet width (2 to 16 entries) with tails; each special value at several offsets.
  for (const Index n : {1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 100}) {
    CAPTURE(n);
    Array x = Array::Random(n), y = Array::Random(n);
    for (Index i = 0; i < n; i += 3) x[i] = special[std::size_t(i / 3) % std::size(special)];
    const Array got = matopt::detail::sign_of(x), want = x.sign();
    CHECK(same(got, want));
    const Array got_sum = matopt::detail::sign_of(T(2) * x + y), want_sum = (T(2) * x + y).sign();
    CHECK(same(got_sum, want_sum));
    for (Index i = 0; i < n; ++i) {  // and the scalar form, which device code uses
      const T s = matopt::detail::sign_of(x[i]);
      CHECK(std::memcmp(&s, &want[i], sizeof(T)) == 0);
    }
  }
  // A matrix expression in either storage order, as Sign's direction(U) takes it.
  const RowMat<T> a = matopt::test::randn<RowMat<T>>(5, 7, 3);
  const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> b = a;
  const RowMat<T> sa = matopt::Sign::direction(T(0.5) * a), ra = (T(0.5) * a).cwiseSign();
  const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> sb = matopt::Sign::direction(b), rb = b.cwiseSign();
  CHECK(std::memcmp(sa.data(), ra.data(), sizeof(T) * 35) == 0);
  CHECK(std::memcmp(sb.data(), rb.data(), sizeof(T) * 35) == 0);
}

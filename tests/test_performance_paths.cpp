// SPDX-License-Identifier: MIT
// The optimized paths against the reference path: symmetric Newton–Schulz (tiled, parallel), the fused
// one-pass normalization kernels and the batched step give the same numbers as straightforward Eigen
// code (thread-count determinism: test_threads.cpp).
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <matopt/matopt.hpp>

#include "test_support.hpp"

using namespace matopt;
using namespace matopt::test;

namespace {
/// Jordan NS5 written plainly (the reference path): A = X X^T, B = b A + c A A, X = a X + B X.
template <class T>
Eigen::Matrix<T, -1, -1> reference_ns(Eigen::Matrix<T, -1, -1> x) {
  const bool tall = x.rows() > x.cols();
  if (tall) x.transposeInPlace();
  x /= x.norm() + T(1e-7);
  for (int k = 0; k < 5; ++k) {
    const Eigen::Matrix<T, -1, -1> a = x * x.transpose();
    const Eigen::Matrix<T, -1, -1> b = T(-4.7750) * a + T(2.0315) * a * a;
    x = (T(3.4445) * x + b * x).eval();
  }
  if (tall) x.transposeInPlace();
  return x;
}

}  // namespace

TEST_CASE_TEMPLATE("tiled symmetric Newton–Schulz matches the plain reference", T, float, double) {
  // Shapes spanning several tiles (kTile = 256), tall and wide. At -O0 (CI's sanitizer stage, after the optimized
  // stage 1 checked every shape) one two-tile shape in float keeps the tiled products under ASan: the full set
  // took 101 s there.
#if defined(__OPTIMIZE__)
  const std::vector<std::pair<Index, Index>> shapes{{300, 520}, {520, 300}, {40, 900}};
#else
  if (std::is_same_v<T, double>) return;
  const std::vector<std::pair<Index, Index>> shapes{{258, 270}};
#endif
  for (const auto& mn : shapes) {
    const auto m = mn.first;
    const auto n = mn.second;
    CAPTURE(m);
    CAPTURE(n);
    const Eigen::Matrix<T, -1, -1> u = randn(m, n, 3).template cast<T>();
    using P = Orthogonalize<NewtonSchulz<>>;
    P::Options o;
    o.variant = NsVariant::Plain;
    CHECK(rel_error(precondition<P, T>(u, o), reference_ns<T>(u)) <= (std::is_same_v<T, float> ? 1e-5 : 1e-12));
  }
}

TEST_CASE_TEMPLATE("fused normalization steps match a plain reference, on whole matrices and on blocks", T, float,
                   double) {
  // The reference, written plainly (RMNP and ColNorm: Sum momentum with Nesterov, beta 0.95, lr 0.02, no decay):
  // V <- beta V + G, U = G + beta V, each line (rows; ColNorm: columns) of U divided by max(||line||, 1e-12), and
  // W <- W - lr s D with s = max(1, m/n)^(1/2) (ColNorm: max(1, n/m)^(1/2)). The one-pass kernel runs on the whole
  // matrix and, in place, on a block of a larger one (lines further apart than their length).
  auto compare = [](auto opt, bool columns, Index m, Index n, auto tag) {
    using M = decltype(tag);
    using Plain = Eigen::Matrix<T, -1, -1>;
    M big = randn<M>(m + 3, n + 2, 1);
    M w = big.block(1, 1, m, n);
    Plain ref_w = w, ref_v = Plain::Zero(m, n);
    auto whole_state = opt.make_state(w);
    auto block_state = opt.make_state(big.block(1, 1, m, n));
    const T beta = T(0.95), lr = T(0.02);
    const T s = T(std::sqrt(std::max(1.0, columns ? double(n) / double(m) : double(m) / double(n))));
    for (unsigned k = 0; k < 3; ++k) {
      const M g = randn<M>(m, n, 20 + k);
      opt.step(w, g, whole_state);
      opt.step(big.block(1, 1, m, n), g, block_state);
      ref_v = beta * ref_v + Plain(g);
      Plain u = Plain(g) + beta * ref_v;
      if (columns) u.transposeInPlace();
      for (Index i = 0; i < u.rows(); ++i) u.row(i) /= std::max(u.row(i).norm(), T(1e-12));
      if (columns) u.transposeInPlace();
      ref_w -= lr * s * u;
    }
    CHECK(rel_error(w, ref_w) <= tol<T>());
    CHECK(rel_error(M(big.block(1, 1, m, n)), ref_w) <= tol<T>());
    CHECK(rel_error(Plain(Eigen::Map<const M>(whole_state.momentum.data(), m, n)), ref_v) <= tol<T>());
    CHECK(rel_error(Plain(Eigen::Map<const M>(block_state.momentum.data(), m, n)), ref_v) <= tol<T>());
    CHECK(block_state.momentum == whole_state.momentum);  // one kernel, the block's lines further apart
    big.block(1, 1, m, n).setZero();  // nothing outside the block moved
    M outside = randn<M>(m + 3, n + 2, 1);
    outside.block(1, 1, m, n).setZero();
    CHECK(big == outside);
  };
  for (const auto& mn : {std::pair<Index, Index>{70, 333}, {333, 70}, {64, 64}, {1, 50}, {50, 1}}) {
    const auto m = mn.first;
    const auto n = mn.second;
    CAPTURE(m);
    CAPTURE(n);
    compare(RMNP<T>{}, false, m, n, RowMat<T>());
    compare(RMNP<T>{}, false, m, n, ColMat<T>());
    compare(ColNorm<T>{}, true, m, n, RowMat<T>());
    compare(ColNorm<T>{}, true, m, n, ColMat<T>());
  }
}

TEST_CASE_TEMPLATE("a strided vector W and a broadcast G step as their plain copies", T, float, double) {
  // A row of a column-major matrix and a diagonal are vectors of stride > 1 (Eigen's evaluator still calls them
  // linear): they step as copies, written back. A G mapped with outer stride 0 (every column the same vector) is
  // read as the matrix it stands for. Bit for bit the plain matrices' step; the rest of the matrix unchanged.
  using Mat = Eigen::Matrix<T, -1, -1>;
  using Row = Eigen::Matrix<T, 1, -1>;
  auto check = [](auto opt) {
    Mat big = randn(5, 6, 7).template cast<T>();
    const Mat before = big;
    const Row g = randn(1, 6, 8).template cast<T>();
    Row plain = big.row(2);
    auto st = opt.make_state(plain);
    auto plain_st = opt.make_state(plain);
    for (int k = 0; k < 2; ++k) {
      opt.step(big.row(2), g, st);
      opt.step(plain, g, plain_st);
    }
    CHECK(Row(big.row(2)) == plain);
    for (int i : {0, 1, 3, 4}) CHECK(big.row(i) == before.row(i));
    Eigen::Matrix<T, -1, 1> diag = big.diagonal();
    auto dst = opt.make_state(diag);
    auto diag_st = opt.make_state(diag);
    const Eigen::Matrix<T, -1, 1> gd = randn(5, 1, 9).template cast<T>();
    opt.step(big.diagonal(), gd, dst);
    opt.step(diag, gd, diag_st);
    CHECK(Eigen::Matrix<T, -1, 1>(big.diagonal()) == diag);
    CHECK(big(0, 1) == before(0, 1));
    Mat w = randn(4, 3, 10).template cast<T>(), w_plain = w;
    const Eigen::Matrix<T, -1, 1> column = randn(4, 1, 11).template cast<T>();
    const Eigen::Map<const Mat, 0, Eigen::OuterStride<>> broadcast(column.data(), 4, 3, Eigen::OuterStride<>(0));
    const Mat g_plain = broadcast;
    auto bst = opt.make_state(w);
    auto plain_bst = opt.make_state(w_plain);
    opt.step(w, broadcast, bst);
    opt.step(w_plain, g_plain, plain_bst);
    CHECK(w == w_plain);
  };
  check(Muon<T>{});
  check(RMNP<T>{});
  check(Optimizer<T, Identity, Momentum<Ema, Nesterov>, Static<>>{});
}

TEST_CASE_TEMPLATE("a single row or column inside a larger matrix takes the one-pass step of its plain copy", T, float,
                   double) {
  // A 1 x n block of a row-major matrix (lines 48 apart, not n) and an m x 1 block of a column-major one (48 apart,
  // not m) are dense views: RMNP's and ColNorm's one-pass step runs on them in place, the pass (along or across the storage
  // order) chosen as for their plain copies. Bit for bit the copies' steps; the rest of the matrix unchanged.
  using RowMajor = Eigen::Matrix<T, -1, -1, Eigen::RowMajor>;
  using ColMajor = Eigen::Matrix<T, -1, -1>;
  auto check = [](auto opt) {
    RowMajor big_r = randn(5, 48, 7).template cast<T>();
    ColMajor big_c = randn(48, 5, 8).template cast<T>();
    const RowMajor before_r = big_r;
    const ColMajor before_c = big_c;
    const Eigen::Matrix<T, 1, -1> g_row = randn(1, 40, 9).template cast<T>();
    const Eigen::Matrix<T, -1, 1> g_col = randn(40, 1, 10).template cast<T>();
    Eigen::Matrix<T, 1, -1> row = big_r.block(2, 1, 1, 40);
    Eigen::Matrix<T, -1, 1> col = big_c.block(1, 2, 40, 1);
    auto s_row = opt.make_state(row), s_row_plain = opt.make_state(row);
    auto s_col = opt.make_state(col), s_col_plain = opt.make_state(col);
    for (int k = 0; k < 2; ++k) {
      opt.step(big_r.block(2, 1, 1, 40), g_row, s_row);
      opt.step(row, g_row, s_row_plain);
      opt.step(big_c.block(1, 2, 40, 1), g_col, s_col);
      opt.step(col, g_col, s_col_plain);
    }
    CHECK(Eigen::Matrix<T, 1, -1>(big_r.block(2, 1, 1, 40)) == row);
    CHECK(Eigen::Matrix<T, -1, 1>(big_c.block(1, 2, 40, 1)) == col);
    CHECK(row != Eigen::Matrix<T, 1, -1>(before_r.block(2, 1, 1, 40)));  // it stepped
    big_r.block(2, 1, 1, 40) = before_r.block(2, 1, 1, 40);
    big_c.block(1, 2, 40, 1) = before_c.block(1, 2, 40, 1);
    CHECK(big_r == before_r);
    CHECK(big_c == before_c);
  };
  check(RMNP<T>{});
  check(ColNorm<T>{});
}

TEST_CASE_TEMPLATE("a one-row or one-column G whose entries are apart along W's lines steps as its plain copy", T,
                   float, double) {
  // A 1 x n block of a column-major matrix (entries 7 apart) and an n x 1 block of a row-major one are in either
  // storage order as far as their shape goes, but their entries do not lie next to each other along a plain row (or
  // column) W: they are read as the values they hold (copied first), bit for bit the step with G's plain copy: RMNP's
  // and ColNorm's one-pass step, Muon's engine form, SGD's element-wise pass.
  auto check = [](auto opt) {
    const Eigen::Matrix<T, -1, -1> g_cols = randn(7, 40, 3).template cast<T>();
    const Eigen::Matrix<T, -1, -1, Eigen::RowMajor> g_rows = randn(40, 7, 4).template cast<T>();
    Eigen::Matrix<T, 1, -1> row = randn(1, 40, 5).template cast<T>(), row_plain = row;
    const Eigen::Matrix<T, 1, -1> g_row = g_cols.block(2, 0, 1, 40);
    Eigen::Matrix<T, -1, 1> col = randn(40, 1, 6).template cast<T>(), col_plain = col;
    const Eigen::Matrix<T, -1, 1> g_col = g_rows.block(0, 3, 40, 1);
    auto s_row = opt.make_state(row), s_row_plain = opt.make_state(row);
    auto s_col = opt.make_state(col), s_col_plain = opt.make_state(col);
    for (int k = 0; k < 2; ++k) {
      opt.step(row, g_cols.block(2, 0, 1, 40), s_row);
      opt.step(row_plain, g_row, s_row_plain);
      opt.step(col, g_rows.block(0, 3, 40, 1), s_col);
      opt.step(col_plain, g_col, s_col_plain);
    }
    CHECK(row == row_plain);
    CHECK(col == col_plain);
  };
  check(RMNP<T>{});
  check(ColNorm<T>{});
  check(Muon<T>{});
  check(Optimizer<T, Identity, Momentum<Ema, Nesterov>, Static<>>{});
}

TEST_CASE_TEMPLATE("batched step equals stepping each parameter alone, for 1 and 2 threads", T, float, double) {
  // Small (one per thread) and large (tiled) matrices mixed, both layouts. At -O0 (the sanitizer stage) float only
  // (double took 47 s there).
#if !defined(__OPTIMIZE__)
  if (std::is_same_v<T, double>) return;
#endif
  const std::vector<std::pair<Index, Index>> shapes{{64, 96}, {300, 260}, {96, 64}, {48, 48}, {7, 200}};
  auto batched = [&](int threads) {
    std::vector<RowMat<T>> w;
    std::vector<RowMat<T>> g;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      w.push_back(randn<RowMat<T>>(shapes[i].first, shapes[i].second, unsigned(i)));
      g.push_back(randn<RowMat<T>>(shapes[i].first, shapes[i].second, unsigned(100 + i)));
    }
    with_threads(threads, [&] {
      Muon<T> opt;
      std::vector<typename Muon<T>::State> states;
      std::vector<MatrixView<T>> wv;
      std::vector<MatrixView<const T>> gv;
      for (std::size_t i = 0; i < w.size(); ++i) {
        states.push_back(opt.make_state(w[i]));
        wv.push_back(view(w[i]));
        gv.push_back(view(std::as_const(g[i])));
      }
      opt.step(wv, gv, states);
      opt.step(wv, gv, states);
    });
    return w;
  };
  const auto one = batched(1), two = batched(2);
  Muon<T> alone;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    RowMat<T> w = randn<RowMat<T>>(shapes[i].first, shapes[i].second, unsigned(i));
    const RowMat<T> g = randn<RowMat<T>>(shapes[i].first, shapes[i].second, unsigned(100 + i));
    auto st = alone.make_state(w);
    {
      // Under the BLAS engine the batch runs its small matrices with OpenBLAS on one thread (whose
      // products may round differently from threaded ones): stepped alone the same way, they agree bitwise.
      std::optional<detail::SerialEngineScope> serial;
      if (detail::kEngineThreads && std::max(shapes[i].first, shapes[i].second) <= detail::kTile) serial.emplace();
      alone.step(w, g, st);
      alone.step(w, g, st);
    }
    CHECK(one[i] == w);
    CHECK(two[i] == w);
  }
  // Bad input anywhere in the batch changes nothing: every W and every field of every state (OrScale after a
  // step: momentum, calibration, last trust ratio) are compared, as a checkpoint writes them.
  OrScale<T> opt;
  RowMat<T> w0 = randn<RowMat<T>>(8, 8, 1), w1 = randn<RowMat<T>>(8, 8, 2);
  const RowMat<T> g0 = randn<RowMat<T>>(8, 8, 3), g1 = randn<RowMat<T>>(8, 8, 4), g_wide = RowMat<T>::Ones(8, 9);
  std::vector<typename OrScale<T>::State> states{opt.make_state(w0), opt.make_state(w1)};
  opt.step({view(w0), view(w1)}, {view(g0), view(g1)}, states);
  auto bytes = [&] {
    detail::Writer wr;
    for (const auto& st : states) wr.state(st);
    return wr.data();
  };
  const RowMat<T> w0_before = w0, w1_before = w1;
  const std::string before = bytes();
  CHECK_THROWS_WITH_AS(opt.step({view(w0), view(w1)}, {view(g0), view(g_wide)}, states),
                       doctest::Contains("G is 8x9 but W is 8x8"), std::invalid_argument);
  RowMat<T> g_nan = g1;
  g_nan(7, 7) = std::numeric_limits<T>::quiet_NaN();
  CHECK_THROWS_WITH_AS(opt.step({view(w0), view(w1)}, {view(g0), view(g_nan)}, states),
                       doctest::Contains("non-finite"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(opt.step({view(w0)}, {view(g0), view(g1)}, states),
                       doctest::Contains("1 parameters, 2 gradients and 2 states"), std::invalid_argument);
  CHECK(w0 == w0_before);
  CHECK(w1 == w1_before);
  CHECK(bytes() == before);
}

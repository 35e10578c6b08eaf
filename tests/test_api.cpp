// SPDX-License-Identifier: MIT
// The public contract (architecture.md): options, validation and bad input (nothing changes on a throw),
// odd shapes, storage orders and Eigen argument kinds, the run-time facade and the hybrid container.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <matopt/matopt.hpp>

#include "test_support.hpp"

using namespace matopt;
using namespace matopt::test;

namespace {
/// Runs check(opt_type_tag) for every matrix preset.
template <class T, class F>
void for_each_preset(F&& f) {
  f(Muon<T>{});
  f(MoonlightMuon<T>{});
  f(RMNP<T>{});
  f(ColNorm<T>{});
  f(OrScale<T>{});
}
}  // namespace

TEST_CASE("the contract of architecture.md compiles and steps") {
  std::vector<float> wbuf(6 * 4, 0.1f), gbuf(6 * 4, 0.2f);
  matopt::Muon<float>::Options o;
  o.lr = 0.02f;
  o.momentum = 0.95f;
  o.nesterov = true;
  o.weight_decay = 0.0f;
  matopt::Muon<float> opt(o);
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<RowMat> W(wbuf.data(), 6, 4), G(gbuf.data(), 6, 4);
  auto state = opt.make_state(W);
  opt.step(W, G, state);
  opt.options().lr = 0.01f;  // schedules mutate options between steps
  opt.step(W, G, state);
  CHECK(W.allFinite());
  CHECK(state.steps == 2);
  CHECK(wbuf[0] != 0.1f);
}

TEST_CASE_TEMPLATE("bad hyperparameters throw naming the parameter", T, float, double) {
  auto bad = [](auto opt, auto mutate, const char* what) {
    using Opt = decltype(opt);
    typename Opt::Options o;
    mutate(o);
    CHECK_THROWS_WITH_AS(Opt{o}, doctest::Contains(what), std::invalid_argument);
  };
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  for_each_preset<T>([&](auto opt) {
    using O = typename decltype(opt)::Options;
    bad(opt, [](O& o) { o.lr = T(0); }, "lr must be finite and > 0 (got 0)");
    bad(opt, [](O& o) { o.lr = T(-1); }, "lr must be finite and > 0");
    bad(opt, [&](O& o) { o.lr = nan; }, "lr must be finite");
    bad(opt, [&](O& o) { o.lr = inf; }, "lr must be finite");
    bad(opt, [](O& o) { o.momentum = T(1); }, "momentum must be in [0, 1) (got 1)");
    bad(opt, [](O& o) { o.momentum = T(-0.1); }, "momentum must be in [0, 1)");
    bad(opt, [](O& o) { o.weight_decay = T(-1); }, "weight_decay must be finite and >= 0");
    bad(opt, [&](O& o) { o.weight_decay = nan; }, "weight_decay");
  });
  bad(Muon<T>{}, [](auto& o) { o.precondition.schedule.steps = 0; }, "ns_steps must be >= 1");
  bad(RMNP<T>{}, [](auto& o) { o.precondition.eps = 0; }, "norm_eps must be finite and > 0");
  bad(OrScale<T>{}, [](auto& o) { o.scaling.clip_min = 2; }, "clip_min must be <= clip_max");
  bad(AdamW<T>{}, [](auto& o) { o.beta2 = T(1); }, "beta2 must be in [0, 1)");
  bad(AdamW<T>{}, [](auto& o) { o.eps = T(0); }, "eps must be finite and > 0");
  using Fn = Optimizer<T, RowNormalize, Momentum<Sum>, Static<shape::Function>>;
  CHECK_THROWS_WITH_AS(Fn{}, doctest::Contains("shape::Function has no function set"), std::invalid_argument);
}

namespace {
/// Every field of a state (momentum, counters and the policies' own state), as a checkpoint writes it.
template <class S>
std::string state_bytes(const S& s) {
  detail::Writer w;
  w.state(s);
  return w.data();
}
template <class T>
using CappedMuon = Optimizer<T, Orthogonalize<>, Momentum<Ema, Nesterov>, SpectralCap<Static<>>>;
template <class T>
using AdaptiveRmnp = Optimizer<T, Adaptive<>, Momentum<Sum, Nesterov>, Static<>>;
}  // namespace

TEST_CASE_TEMPLATE("bad input at step throws and changes nothing", T, float, double) {
  // Every preset, the stateful compositions (OrScale's ratio and calibration, SpectralCap's vectors, Adaptive's
  // counters, NorMuon's second moment, AutoSteps' plan) and AdamW: W and every field of the state are compared.
  auto check = [](auto opt) {
    using M = Eigen::Matrix<T, -1, -1>;
    CAPTURE(opt.name());
    M w = randn(6, 4, 1).cast<T>();
    auto st = opt.make_state(w);
    opt.step(w, M(randn(6, 4, 2).cast<T>()), st);
    opt.step(w, M(randn(6, 4, 3).cast<T>()), st);  // warm states: calibrated ratio, cap vectors set
    const M w_before = w;
    const std::string st_before = state_bytes(st);
    auto unchanged = [&] {
      CHECK(w == w_before);
      CHECK(state_bytes(st) == st_before);
    };
    CHECK_THROWS_WITH_AS(opt.step(w, M(M::Ones(4, 6)), st), doctest::Contains("G is 4x6 but W is 6x4"),
                         std::invalid_argument);
    unchanged();
    M other = M::Ones(5, 4);
    CHECK_THROWS_WITH_AS(opt.step(other, M(M::Ones(5, 4)), st),
                         doctest::Contains("state was made for a 6x4 parameter but W is 5x4"), std::invalid_argument);
    unchanged();
    RowMat<T> w_row = w;
    CHECK_THROWS_WITH_AS(opt.step(w_row, RowMat<T>(RowMat<T>::Ones(6, 4)), st),
                         doctest::Contains("state was made for a column-major W but W is row-major"),
                         std::invalid_argument);
    unchanged();
    for (T bad : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity()}) {
      M g = M::Ones(6, 4);
      g(3, 2) = bad;
      CHECK_THROWS_WITH_AS(opt.step(w, g, st), doctest::Contains("G (6x4) contains a non-finite value"),
                           std::invalid_argument);
      unchanged();
    }
    opt.options().lr = T(-1);  // options are mutable, and checked at each step
    CHECK_THROWS_WITH_AS(opt.step(w, M(M::Ones(6, 4)), st), doctest::Contains("lr must be finite and > 0"),
                         std::invalid_argument);
    unchanged();
  };
  for_each_preset<T>(check);
  check(AdamW<T>{});
  if constexpr (std::is_same_v<T, float>) {  // the stateful compositions in one type (each costs CI compile time)
    check(NorMuon<T>{});
    check(MuonAutoSteps<T>{});
    check(CappedMuon<T>{});
    typename AdaptiveRmnp<T>::Options adaptive;
    adaptive.precondition.every = 1;
    check(AdaptiveRmnp<T>(adaptive));
  }
}

TEST_CASE_TEMPLATE("odd shapes: 1xn, nx1, empty, zero gradients, zero rows give finite results", T, float,
                   double) {
  for_each_preset<T>([](auto opt) {
    using M = Eigen::Matrix<T, -1, -1>;
    CAPTURE(opt.name());
    for (const auto& mn : {std::pair<Index, Index>{1, 7}, {7, 1}, {1, 1}, {0, 5}, {5, 0}, {0, 0}, {33, 5}, {5, 33}}) {
      const auto m = mn.first;
      const auto n = mn.second;
      CAPTURE(m);
      CAPTURE(n);
      M w = M::Ones(m, n);
      auto st = opt.make_state(w);
      opt.step(w, M(M::Zero(m, n)), st);  // zero gradient
      CHECK(w.allFinite());
      M g = randn(m, n, 3).template cast<T>();
      if (m > 2 && n > 0) g.row(1).setZero();  // (a row of a 5x0 matrix would offset a null pointer)
      if (n > 2 && m > 0) g.col(2).setZero();
      opt.step(w, g, st);
      CHECK(w.allFinite());
      CHECK(st.steps == 2);
    }
  });
}

TEST_CASE_TEMPLATE("every preset gives the same numbers for row- and column-major storage", T, float, double) {
  for_each_preset<T>([](auto opt_row) {
    auto opt_col = opt_row;
    CAPTURE(opt_row.name());
    for (const auto& mn : {std::pair<Index, Index>{9, 5}, {5, 9}}) {
      const auto m = mn.first;
      const auto n = mn.second;
      RowMat<T> wr = randn(m, n, 1).template cast<T>();
      ColMat<T> wc = wr;
      auto sr = opt_row.make_state(wr);
      auto sc = opt_col.make_state(wc);
      for (unsigned k = 0; k < 3; ++k) {
        const Eigen::MatrixXd g = randn(m, n, 10 + k);
        opt_row.step(wr, RowMat<T>(g.cast<T>()), sr);
        opt_col.step(wc, ColMat<T>(g.cast<T>()), sc);
      }
      CHECK(rel_error(wr, wc) <= tol<T>());
    }
  });
}

TEST_CASE("W may be a Map, a Ref or a Block of a larger matrix, G any expression") {
  Eigen::MatrixXd big = randn(10, 10, 1);
  const Eigen::MatrixXd start = big;
  Eigen::MatrixXd w = big.block(2, 3, 4, 5);
  const Eigen::MatrixXd g = randn(4, 5, 2);
  RMNP<double> a, b;
  auto sa = a.make_state(w);
  auto sb = b.make_state(big.block(2, 3, 4, 5));
  a.step(w, g, sa);
  b.step(big.block(2, 3, 4, 5), g, sb);
  CHECK(big.block(2, 3, 4, 5) == w);
  big.block(2, 3, 4, 5) = start.block(2, 3, 4, 5);
  CHECK(big == start);  // nothing outside the block moved
  Eigen::Ref<Eigen::MatrixXd> ref(w);
  a.step(ref, 2.0 * g, sa);
  CHECK(w.allFinite());
}

TEST_CASE("state and workspace sizes are reported") {
  // Large parameters (over kTile = 256 rows or columns) use only the shared workspace.
  Muon<float> muon;
  Eigen::MatrixXf w(300, 520), smaller(280, 300);
  auto st = muon.make_state(w);
  CHECK(st.bytes() == 300 * 520 * sizeof(float));
  const auto ws = muon.workspace_bytes();
  CHECK(ws == (2 * 300 * 520 + 2 * 300 * 300) * sizeof(float));  // X, Y (r x s), A, B (r x r)
  (void)muon.make_state(smaller);  // the shared workspace is sized by the largest parameter
  CHECK(muon.workspace_bytes() == ws);
  RMNP<float> rmnp;
  CHECK(rmnp.make_state(w).bytes() == 300 * 520 * sizeof(float));
  // Row scales, and the column-major fused step's partial sums of squares (16 blocks of 300).
  CHECK(rmnp.workspace_bytes() == (300 + 16 * 300) * sizeof(float));
}

TEST_CASE("facade: build presets by name with key/value options") {
  auto opt = make_optimizer<double>("muon", {{"lr", "0.05"}, {"momentum", "0.9"}, {"ns_steps", "6"}});
  CHECK(opt.name() == "matopt::Muon");
  CHECK(opt.lr() == 0.05);
  // The facade steps exactly like the typed preset.
  Muon<double>::Options o;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.precondition.schedule.steps = 6;
  Muon<double> typed(o);
  RowMat<double> w1 = randn(6, 9, 1), w2 = w1;
  const RowMat<double> g = randn(6, 9, 2);
  auto s1 = opt.make_state(view(w1));
  auto s2 = typed.make_state(w2);
  opt.step(view(w1), view(g), s1);
  typed.step(w2, g, s2);
  CHECK(w1 == w2);
  CHECK(opt.effective_lr(s1) == doctest::Approx(0.05));

  for (const char* name : {"muon", "moonlight_muon", "rmnp", "colnorm", "orscale", "adamw"}) {
    auto any = make_optimizer<float>(name);
    ColMat<float> w = ColMat<float>::Ones(4, 3);
    auto s = any.make_state(view(w));
    any.step(view(w), view(ColMat<float>(ColMat<float>::Ones(4, 3))), s);
    CHECK(w.allFinite());
  }
  auto pe = make_optimizer<double>("orscale", {{"ns_steps", "7"}, {"ns_schedule", "jordan"}});
  CHECK_NOTHROW(pe.set("calibrate", "true"));

  CHECK_THROWS_WITH_AS(make_optimizer<float>("sgd"), doctest::Contains("unknown optimizer 'sgd'"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_optimizer<float>("rmnp", {{"learning_rate", "1"}}),
                       doctest::Contains("unknown option 'learning_rate'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_optimizer<float>("rmnp", {{"lr", "fast"}}),
                       doctest::Contains("option 'lr': 'fast' is not a number"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_optimizer<float>("muon", {{"nesterov", "maybe"}}),
                       doctest::Contains("not a boolean"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_optimizer<float>("muon", {{"ns_schedule", "foo"}}),
                       doctest::Contains("unknown NS schedule 'foo'"), std::invalid_argument);
  // A bad value changes nothing.
  CHECK_THROWS_WITH_AS(opt.set("lr", "-3"), doctest::Contains("lr must be finite and > 0"), std::invalid_argument);
  CHECK(opt.lr() == 0.05);
  // A state made by another optimizer, or a layout mismatch, is refused.
  auto rmnp = make_optimizer<double>("rmnp");
  CHECK_THROWS_WITH_AS(rmnp.step(view(w1), view(g), s1), doctest::Contains("state was made by a different optimizer"),
                       std::invalid_argument);
  ColMat<double> gc = g;
  CHECK_THROWS_WITH_AS(opt.step(view(w1), view(gc), s1), doctest::Contains("G is column-major but W is row-major"),
                       std::invalid_argument);
}

TEST_CASE("facade: the preset table names every preset once, in order, and builds each by its name") {
  CHECK(optimizer_names ==
        "muon, moonlight_muon, rmnp, rmnp_reference, colnorm, orscale, normuon, adamuon, namo, polargrad, turbo_muon, "
        "dion, adamw, lion");
  const std::vector<std::pair<const char*, const char*>> presets{
      {"muon", "matopt::Muon"},           {"moonlight_muon", "matopt::MoonlightMuon"},
      {"rmnp", "matopt::RMNP"},           {"rmnp_reference", "matopt::RMNPReference"},
      {"colnorm", "matopt::ColNorm"},     {"orscale", "matopt::OrScale"},
      {"normuon", "matopt::NorMuon"},     {"adamuon", "matopt::AdaMuon"},
      {"namo", "matopt::NAMO"},           {"polargrad", "matopt::PolarGrad"},
      {"turbo_muon", "matopt::TurboMuon"}, {"dion", "matopt::Dion"},
      {"adamw", "matopt::AdamW"},         {"lion", "matopt::Lion"}};
  for (const auto& preset : presets) {
    CAPTURE(preset.first);
    CHECK(make_optimizer<float>(preset.first).name() == preset.second);
    CHECK(make_optimizer<double>(preset.first).name() == preset.second);
  }
  // A row selected by an option ("muon?ns_steps=auto") and the plain row of the same name.
  CHECK(make_optimizer<float>("muon", {{"ns_steps", "auto"}}).name() == "matopt::MuonAutoSteps");
  CHECK(make_optimizer<float>("muon", {{"ns_steps", "4"}}).name() == "matopt::Muon");
  // The table's defaults: dion's rmnp.py (lr 0.01, weight decay 0.01, no Nesterov).
  auto reference = make_optimizer<double>("rmnp_reference");
  CHECK(reference.lr() == 0.01);
  CHECK(reference.weight_decay() == 0.01);
  CHECK(RMNPReference<double>::Options{}.nesterov == false);
  CHECK(make_optimizer<double>("moonlight_muon").weight_decay() == 0.1);
  // The part of a name before '?' is not a name of its own, nor is the selector.
  CHECK_THROWS_WITH_AS(make_optimizer<float>("muon?ns_steps=auto"),
                       doctest::Contains(("(known: " + optimizer_names + ")").c_str()), std::invalid_argument);
}

TEST_CASE("facade: muon with ns_steps=auto is MuonAutoSteps, and a state's fields read by path") {
  auto opt = make_optimizer<double>("muon", {{"ns_steps", "auto"}, {"ns_plan_every", "3"}, {"ns_plan_quantile", "0.1"}});
  CHECK(opt.name() == "matopt::MuonAutoSteps");
  MuonAutoSteps<double>::Options o;
  o.precondition.plan_every = 3;
  o.precondition.plan_quantile = 0.1;
  MuonAutoSteps<double> typed(o);
  RowMat<double> w1 = randn(6, 9, 1), w2 = w1;
  auto s1 = opt.make_state(view(w1));
  auto s2 = typed.make_state(w2);
  for (unsigned k = 0; k < 4; ++k) {
    const RowMat<double> g = randn(6, 9, 10 + k);
    opt.step(view(w1), view(g), s1);
    typed.step(w2, g, s2);
  }
  CHECK(w1 == w2);
  // field(): the typed state's values, by their checkpoint paths.
  CHECK(s1.field("steps") == 4);
  CHECK(s1.field("layout") == double(static_cast<int>(Layout::RowMajor)));
  CHECK(s1.field("precondition.ns_steps") == double(s2.precondition.ns_steps));
  CHECK(s1.field("precondition.quantile") == s2.precondition.quantile);
  CHECK(s1.field("precondition.ns_work") == double(s2.precondition.ns_work));
  CHECK(s1.field("precondition.calls") == 4);
  CHECK_THROWS_WITH_AS(s1.field("precondition.r_min"),
                       doctest::Contains("no scalar field 'precondition.r_min' (fields: rows, cols, layout, steps"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(s1.field("momentum"), doctest::Contains("no scalar field 'momentum'"), std::invalid_argument);
  // Plain Muon takes ns_steps as a count only.
  CHECK_THROWS_WITH_AS(make_optimizer<float>("rmnp", {{"ns_steps", "auto"}}), doctest::Contains("unknown option"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_optimizer<float>("muon", {{"ns_steps", "auto"}, {"ns_plan_quantile", "2"}}),
                       doctest::Contains("ns_plan_quantile must be in (0, 1] (got 2"), std::invalid_argument);
}

TEST_CASE("hybrid: routing, groups and effective lr") {
  RowMat<float> w1 = randn(16, 8, 1).cast<float>(), w2 = randn(10, 16, 2).cast<float>();
  RowMat<float> emb = randn(20, 16, 3).cast<float>();
  Eigen::VectorXf b1 = Eigen::VectorXf::Zero(16);
  HybridOptimizer<float> opt(AnyOptimizer<float>(Muon<float>{}));
  const auto slow = opt.add_group({"slow", 0.5f, 0.01f});
  const auto i_emb = opt.add("embed", view(emb), Role::Embedding);
  const auto i_w1 = opt.add("fc1.weight", view(w1));
  const auto i_b1 = opt.add("fc1.bias", view(b1));
  const auto i_w2 = opt.add("head.weight", view(w2), Role::Head, slow);
  CHECK(opt.size() == 4);
  CHECK(opt.route(i_emb) == Route::AdamW);
  CHECK(opt.route(i_w1) == Route::Matrix);
  CHECK(opt.role(i_w1) == Role::Hidden);
  CHECK(opt.route(i_b1) == Route::AdamW);
  CHECK(opt.role(i_b1) == Role::Vector);
  CHECK(opt.route(i_w2) == Route::AdamW);
  CHECK(opt.effective_lr(i_w1) == doctest::Approx(0.02f * std::sqrt(2.0f)));
  CHECK(opt.effective_lr(i_b1) == doctest::Approx(3e-4f));
  CHECK(opt.effective_lr(i_w2) == doctest::Approx(0.5f * 3e-4f));

  // Stepping through the container equals stepping each optimizer by hand with the group's lr and decay.
  const RowMat<float> g_emb = randn(20, 16, 4).cast<float>(), g1 = randn(16, 8, 5).cast<float>();
  const RowMat<float> g2 = randn(10, 16, 6).cast<float>();
  const Eigen::VectorXf gb = randn<Eigen::MatrixXf>(16, 1, 7);
  RowMat<float> w1_ref = w1, w2_ref = w2;
  opt.step({view(g_emb), view(g1), view(gb), view(g2)});
  Muon<float> muon;
  auto s1 = muon.make_state(w1_ref);
  muon.step(w1_ref, g1, s1);
  CHECK(w1 == w1_ref);
  AdamW<float>::Options ao;
  ao.lr = 0.5f * 3e-4f;
  ao.weight_decay = 0.01f;
  AdamW<float> adam(ao);
  auto s2 = adam.make_state(w2_ref);
  adam.step(w2_ref, g2, s2);
  CHECK(w2 == w2_ref);
  CHECK(opt.adamw().lr() == doctest::Approx(3e-4f));  // group settings do not leak

  // Bad input changes nothing: a wrong count, a wrong shape, or one non-finite gradient among many. Compared:
  // every parameter's values and every state, the AdamW-routed ones included (the checkpoint's bytes).
  const std::string before = opt.checkpoint_bytes(/*parameters=*/true);
  CHECK_THROWS_WITH_AS(opt.step({view(g_emb)}), doctest::Contains("got 1 gradients for 4 parameters"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(opt.step({view(g_emb), view(g2), view(gb), view(g2)}),
                       doctest::Contains("gradient of 'fc1.weight' is 10x16 but the parameter is 16x8"),
                       std::invalid_argument);
  RowMat<float> g2_nan = g2;
  g2_nan(0, 0) = std::nanf("");
  CHECK_THROWS_WITH_AS(opt.step({view(g_emb), view(g1), view(gb), view(g2_nan)}),
                       doctest::Contains("gradient of 'head.weight' (10x16) contains a non-finite value"),
                       std::invalid_argument);
  const ColMat<float> g2_col = g2;
  CHECK_THROWS_WITH_AS(opt.step({view(g_emb), view(g1), view(gb), view(g2_col)}),
                       doctest::Contains("gradient of 'head.weight' is column-major but the parameter is row-major"),
                       std::invalid_argument);
  CHECK_THROWS_AS(opt.step({i_w1, i_w1}, {view(g1), view(g1)}), std::invalid_argument);  // an index twice
  CHECK_THROWS_AS(opt.step({i_w2, i_b1}, {view(g2_nan), view(gb)}), std::invalid_argument);
  CHECK(opt.checkpoint_bytes(/*parameters=*/true) == before);
  CHECK_THROWS_AS(opt.add("x", view(w1), Role::Auto, 9), std::invalid_argument);
  CHECK_THROWS_AS(opt.add_group({"bad", -1.0f, std::nullopt}), std::invalid_argument);

  // By flag, embeddings and heads go to the matrix optimizer.
  HybridOptimizer<float> all(make_optimizer<float>("rmnp"), make_optimizer<float>("adamw"), {false, false});
  CHECK(all.route(all.add("embed", view(emb), Role::Embedding)) == Route::Matrix);
  CHECK(all.route(all.add("head", view(w2), Role::Head)) == Route::Matrix);
}

namespace {
/// A scaling that also takes RowNormalize's key norm_eps (as its own eps): a composition giving one key two meanings.
struct StaticWithNormEps : Static<shape::Unit> {
  struct Options : Static<shape::Unit>::Options {
    double eps = 0;
  };
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("norm_eps", o.eps, checks::NonNegative{}, "a second meaning of norm_eps");
    Static<shape::Unit>::describe(o, d);
  }
};
}  // namespace

TEST_CASE("options: a key two stages accept is an error, and a key that does not apply is refused, changing nothing") {
  // Two meanings for one key: refused, naming both stages, the options unchanged.
  using Clash = Optimizer<double, RowNormalize, Momentum<Sum>, StaticWithNormEps>;
  Clash::Options o;
  CHECK_THROWS_WITH_AS(Clash::set_option(o, "norm_eps", "1e-6"),
                       "matopt::Optimizer: option 'norm_eps' is a key of both its preconditioner (RowNormalize) and "
                       "its scaling (Static): a composition must give each key one meaning",
                       std::invalid_argument);
  CHECK(o.precondition.eps == 1e-12);
  // Each stage's own keys still go to it.
  CHECK(Clash::set_option(o, "lr_rule", "sqrt_max"));
  CHECK(o.scaling.lr_rule == LrRule::SqrtMax);
  // No momentum policy: its keys do not apply (Dion's own momentum is mu), by the typed optimizer and the facade.
  using Plain = Optimizer<float, Identity, NoMomentum, Static<shape::Unit>>;
  Plain::Options p;
  for (const char* key : {"momentum", "nesterov"}) {
    CAPTURE(key);
    CHECK_THROWS_WITH_AS(Plain::set_option(p, key, "0.5"),
                         doctest::Contains(("option '" + std::string(key) + "' does not apply").c_str()),
                         std::invalid_argument);
  }
  CHECK(Plain::option_keys() == "lr, weight_decay, non_finite, lr_rule, extra_scale_factor, weight_decay_method, "
                                 "cautious_weight_decay");
  auto dion = make_optimizer<double>("dion");
  CHECK_THROWS_WITH_AS(dion.set("momentum", "0.9"),
                       "matopt::Dion: option 'momentum' does not apply: it steps without momentum (None)",
                       std::invalid_argument);
  CHECK(dion.option_keys().find("momentum") == std::string::npos);
  CHECK_NOTHROW(dion.set("mu", "0.9"));
}

namespace {
/// Options of every kind, each declared once (core/options.hpp), and a rule across two of them.
struct Described {
  struct Options {
    int rounds = 5;
    double eps = 1e-12;
    double fraction = 1.0;
    int level = 2;
    std::vector<Index> sizes;
    LrRule rule = LrRule::Preset;
    bool flag = false;
  };
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("rounds", o.rounds, checks::AtLeast{1}, "rounds");
    d("eps", o.eps, checks::Positive{}, "the floor");
    d("fraction", o.fraction, checks::Fraction{}, "a fraction");
    d("level", o.level, checks::InRange{1, 3}, "a level");
    d("sizes", o.sizes, checks::Any{}, "sizes");
    d("rule", o.rule, checks::one_of(lr_rule_names, "an lr rule"), "a rule");
    d("flag", o.flag, checks::Any{}, "a flag");
    d.rule([&o](std::string_view where) {
      if (o.flag && o.rounds > 3) detail::fail(where, "flag needs rounds <= 3 (got ", o.rounds, ")");
    });
  }
};
}  // namespace

TEST_CASE("options: one descriptor per option gives the setter, the checks, the key list and the values") {
  Described::Options o;
  CHECK(detail::option_keys<Described>() == "rounds, eps, fraction, level, sizes, rule, flag");
  // Text by the field's type, or by the check (an enum's names).
  CHECK(detail::set_option<Described>(o, "rounds", "3"));
  CHECK(detail::set_option<Described>(o, "eps", "1e-6"));
  CHECK(detail::set_option<Described>(o, "sizes", "4,2,2"));
  CHECK(detail::set_option<Described>(o, "rule", "sqrt_max"));
  CHECK(detail::set_option<Described>(o, "flag", "on"));
  CHECK(o.rounds == 3);
  CHECK(o.eps == 1e-6);
  CHECK(o.sizes == std::vector<Index>{4, 2, 2});
  CHECK(o.rule == LrRule::SqrtMax);
  CHECK(o.flag);
  CHECK_FALSE(detail::set_option<Described>(o, "round", "3"));  // unknown: false
  // Bad text names the key and the value, and changes nothing (a list only when every entry parses).
  CHECK_THROWS_WITH_AS(detail::set_option<Described>(o, "sizes", "4,x"),
                       "matopt options: option 'sizes': 'x' is not an integer", std::invalid_argument);
  CHECK(o.sizes == std::vector<Index>{4, 2, 2});
  CHECK_THROWS_WITH_AS(
      detail::set_option<Described>(o, "rule", "fast"),
      "matopt options: option 'rule': 'fast' is not an lr rule (preset, unit, muon_original, sqrt_max, sqrt_ratio)",
      std::invalid_argument);
  CHECK(o.rule == LrRule::SqrtMax);
  // Each check's message, with the key and the value; then the rule across options.
  CHECK_NOTHROW(detail::validate_options<Described>(o, "w"));
  auto refused = [](void (*change)(Described::Options&), const char* message) {
    Described::Options bad;
    change(bad);
    CHECK_THROWS_WITH_AS(detail::validate_options<Described>(bad, "w"), message, std::invalid_argument);
  };
  refused([](Described::Options& b) { b.rounds = 0; }, "w: rounds must be >= 1 (got 0)");
  refused([](Described::Options& b) { b.eps = 0; }, "w: eps must be finite and > 0 (got 0)");
  refused([](Described::Options& b) { b.fraction = 1.5; }, "w: fraction must be in (0, 1] (got 1.5)");
  refused([](Described::Options& b) { b.level = 4; }, "w: level must be in [1, 3] (got 4)");
  refused([](Described::Options& b) { b.flag = true; }, "w: flag needs rounds <= 3 (got 5)");
  // What each accepts and its value, as text that set_option reads back.
  const std::vector<OptionInfo> info = option_info<Described>(o);
  REQUIRE(info.size() == 7);
  CHECK(info[0].values == "integer >= 1");
  CHECK(info[0].value == "3");
  CHECK(info[1].values == "number > 0");
  CHECK(info[1].value == "1e-06");
  CHECK(info[2].values == "number in (0, 1]");
  CHECK(info[3].values == "integer in [1, 3]");
  CHECK(info[4].value == "4,2,2");
  CHECK(info[5].values == "preset, unit, muon_original, sqrt_max, sqrt_ratio");
  CHECK(info[5].value == "sqrt_max");
  CHECK(info[6].values == "boolean");
  CHECK(info[6].value == "true");
  CHECK(info[6].doc == std::string("a flag"));
}

TEST_CASE("options: every facade optimizer's option_info reads back through set, each key with one meaning") {
  // Every key set to the text of its own value changes nothing: the setter, the value text and the key list agree,
  // and no key is refused as two stages' (set_option would throw).
  const std::string& names = optimizer_names;
  for (std::size_t at = 0; at < names.size();) {
    const std::size_t end = std::min(names.find(", ", at), names.size());
    const std::string name = names.substr(at, end - at);
    at = end + 2;
    CAPTURE(name);
    AnyOptimizer<double> opt = make_optimizer<double>(name);
    const std::vector<OptionInfo> before = opt.option_info();
    std::string keys;
    for (const OptionInfo& o : before) {
      CAPTURE(o.key);
      (keys += keys.empty() ? "" : ", ") += o.key;
      CHECK_FALSE(o.values.empty());
      CHECK_FALSE(o.doc.empty());
      if (!o.value.empty() && o.key != "ns_schedule") CHECK_NOTHROW(opt.set(o.key, o.value));
    }
    CHECK(keys == opt.option_keys());
    const std::vector<OptionInfo> after = opt.option_info();
    REQUIRE(after.size() == before.size());
    for (std::size_t i = 0; i < after.size(); ++i) CHECK(after[i].value == before[i].value);
  }
  // The schedule's value is the published schedule the options hold, and none once a key changes it.
  AnyOptimizer<float> turbo = make_optimizer<float>("turbo_muon");
  auto value = [&](const char* key) {
    for (const OptionInfo& o : turbo.option_info())
      if (o.key == key) return o.value;
    return std::string("(missing)");
  };
  CHECK(value("ns_schedule") == "turbo");
  CHECK(value("ns_steps") == "4");
  turbo.set("ns_steps", "3");
  CHECK(value("ns_schedule").empty());
  turbo.set("ns_schedule", "jordan");
  CHECK(value("ns_schedule") == "jordan");
  CHECK(value("ns_steps") == "5");
}

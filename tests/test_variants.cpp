// SPDX-License-Identifier: MIT
// The peers' variants (issue 20; ../shared/design/variants.md): NorMuon, AdaMuon, NAMO, PolarGrad, Turbo-Muon, Dion, Lion, the
// cautious and lr-independent weight decay and the lr rules, against golden data from PyTorch
// (scripts/make_golden_variants.py, float64, written from variants.md): W after each of three steps within
// 1e-5 (float) / 1e-10 (double) relative Frobenius error, both storage orders, a tall, a wide and a square
// shape (the square one pins each m == n tie-break: AOL's orientation, NorMuon's longer axis, Dion's B = M).
// Then closed forms on 1 x n and n x 1, zero gradients and zero weights, and a checkpoint round trip of the
// second moments.
#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <matopt/facade/any_optimizer.hpp>
#include <matopt/hybrid/hybrid_optimizer.hpp>
#include <matopt/lion.hpp>
#include <matopt/presets.hpp>
#include <matopt/qk_clip.hpp>
#include <matopt/serialization/checkpoint.hpp>

#include "test_support.hpp"

using namespace matopt;
using namespace matopt::test;

namespace {
template <class T>
constexpr double golden_tol() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-10;
}

/// The golden shapes: tall 20 x 12, wide 12 x 28, square 16 x 16.
const std::vector<std::string> golden_shapes{"tall", "wide", "square"};

/// The golden script's row-block tables for a shape: HEADS, SPLITS and QKV_GROUPS (2 groups of these sizes).
struct GoldenBlocks {
  int heads;
  std::vector<Index> splits, qkv;
};
GoldenBlocks golden_blocks(const std::string& shape) {
  if (shape == "tall") return {4, {8, 6, 6}, {6, 2, 2}};
  if (shape == "wide") return {3, {6, 3, 3}, {4, 1, 1}};
  return {4, {8, 5, 3}, {4, 2, 2}};
}

/// Runs `opt` over the golden gradients of `shape` and compares W after each step with `<shape>/<name>/W<k>`.
template <class Opt, class Mat>
void check_golden(Opt opt, const std::string& shape, const std::string& name) {
  using T = typename Opt::Scalar;
  const Golden& gold = Golden::variants();
  const Eigen::MatrixXd w0 = gold[shape + "/W0"];
  Mat w = w0.cast<T>();
  auto state = opt.make_state(w);
  for (int k = 1; k <= 3; ++k) {
    const Mat g = gold[shape + "/G" + std::to_string(k)].cast<T>();
    opt.step(w, g, state);
    const Eigen::MatrixXd want = gold[shape + "/" + name + "/W" + std::to_string(k)];
    CAPTURE(k);
    CHECK(rel_error(w, want) <= golden_tol<T>());
    CHECK(rel_error((w.template cast<double>() - w0).eval(), (want - w0).eval()) <= 100 * golden_tol<T>());
  }
}

/// `configure(options)` sets the golden run's hyperparameters; every shape and storage order is checked.
template <template <class> class Preset, class T, class Configure>
void check_variant(const std::string& name, Configure configure) {
  Preset<T> opt;
  configure(opt.options());
  for (const std::string& shape : golden_shapes) {
    CAPTURE(shape);
    check_golden<Preset<T>, RowMat<T>>(opt, shape, name);
    check_golden<Preset<T>, ColMat<T>>(opt, shape, name);
  }
}
}  // namespace

/// Sets a golden run's lr and weight decay.
#define MATOPT_LR_WD(lr_, wd_)  \
  [](auto& o) {                 \
    using S = decltype(o.lr);   \
    o.lr = S(lr_);              \
    o.weight_decay = S(wd_);    \
  }

TEST_CASE_TEMPLATE("golden: RMNP as microsoft/dion runs it (rmnp.py defaults: no Nesterov, no lr scale)", T, float,
                   double) {
  // The preset's own defaults (lr 0.01, weight decay 0.01, momentum 0.95, plain momentum): nothing configured.
  check_variant<RMNPReference, T>("rmnp_reference", [](auto&) {});
  // By name through the facade, as a framework builds it.
  for (const std::string& shape : golden_shapes) {
    CAPTURE(shape);
    const Golden& gold = Golden::variants();
    RowMat<T> w = gold[shape + "/W0"].template cast<T>();
    auto opt = make_optimizer<T>("rmnp_reference");
    auto state = opt.make_state(view(w));
    for (int k = 1; k <= 3; ++k) {
      const RowMat<T> g = gold[shape + "/G" + std::to_string(k)].template cast<T>();
      opt.step(view(w), view(g), state);
      CHECK(rel_error(w, gold[shape + "/rmnp_reference/W" + std::to_string(k)]) <= golden_tol<T>());
    }
  }
}
TEST_CASE_TEMPLATE("golden: NorMuon (zichongli5/NorMuon normuon_update)", T, float, double) {
  check_variant<NorMuon, T>("normuon", MATOPT_LR_WD(0.02, 0.01));
}
TEST_CASE_TEMPLATE("golden: NorMuon with the longer-side axis (modded-nanogpt, NVIDIA)", T, float, double) {
  check_variant<NorMuon, T>("normuon_longer", [](auto& o) {
    MATOPT_LR_WD(0.02, 0.01)(o);
    o.precondition.moment.axis = moments::NorMuon::Axis::Longer;
  });
}
TEST_CASE_TEMPLATE("golden: AdaMuon (Chongjie-Si/AdaMuon)", T, float, double) {
  check_variant<AdaMuon, T>("adamuon", MATOPT_LR_WD(0.02, 0.01));
}
TEST_CASE_TEMPLATE("golden: NAMO (Emerging-Optimizers moment2_method=namo)", T, float, double) {
  check_variant<NAMO, T>("namo", MATOPT_LR_WD(1e-3, 0.01));
}
TEST_CASE_TEMPLATE("golden: PolarGrad (timlautk/polargrad, exact polar factor)", T, float, double) {
  check_variant<PolarGrad, T>("polargrad", MATOPT_LR_WD(0.02, 0.01));
}
TEST_CASE_TEMPLATE("golden: Turbo-Muon (thib-s/flash-newton-schulz, AOL and 4 NS steps)", T, float, double) {
  check_variant<TurboMuon, T>("turbo_muon", MATOPT_LR_WD(0.02, 0.01));
  // The Gram form of Newton-Schulz (Dao-AILab) with the AOL start: the same polynomial, to rounding.
  check_variant<TurboMuon, T>("turbo_muon", [](auto& o) {
    MATOPT_LR_WD(0.02, 0.01)(o);
    o.precondition.variant = NsVariant::Gram;
  });
  // Muon with ns_schedule = turbo through the facade is the same step.
  if constexpr (std::is_same_v<T, double>) {
    const Golden& gold = Golden::variants();
    auto any = make_optimizer<double>("muon", {{"ns_schedule", "turbo"}, {"weight_decay", "0.01"}});
    Eigen::MatrixXd w = gold["tall/W0"];
    auto st = any.make_state(view(std::as_const(w)));
    for (int k = 1; k <= 3; ++k) {
      const Eigen::MatrixXd g = gold["tall/G" + std::to_string(k)];
      any.step(view(w), view(g), st);
    }
    CHECK(rel_error(w, gold["tall/turbo_muon/W3"]) <= golden_tol<T>());
  }
}
TEST_CASE_TEMPLATE("golden: per-head and split-size orthogonalization (dion num_heads, split_sizes)", T, float,
                   double) {
  for (const std::string& shape : golden_shapes) {
    CAPTURE(shape);
    const GoldenBlocks blocks = golden_blocks(shape);
    Muon<T> heads;
    MATOPT_LR_WD(0.02, 0.01)(heads.options());
    heads.options().precondition.heads = blocks.heads;
    check_golden<Muon<T>, RowMat<T>>(heads, shape, "muon_heads");
    check_golden<Muon<T>, ColMat<T>>(heads, shape, "muon_heads");
    Muon<T> split;
    MATOPT_LR_WD(0.02, 0.01)(split.options());
    split.options().precondition.split_sizes = blocks.splits;
    split.options().scaling.lr_rule = LrRule::SqrtRatio;
    check_golden<Muon<T>, RowMat<T>>(split, shape, "muon_split");
    check_golden<Muon<T>, ColMat<T>>(split, shape, "muon_split");
    // Megatron's interleaved linear_qkv: 2 query groups of [q | k | v] rows, Q/K/V each gathered and NS'd once.
    Muon<T> qkv;
    MATOPT_LR_WD(0.02, 0.01)(qkv.options());
    qkv.options().precondition.split_sizes = blocks.qkv;
    qkv.options().precondition.split_groups = 2;
    check_golden<Muon<T>, RowMat<T>>(qkv, shape, "muon_qkv_groups");
    check_golden<Muon<T>, ColMat<T>>(qkv, shape, "muon_qkv_groups");
  }
  // Rows that do not split as asked, or a policy that cannot step blocks: an error naming it, W unchanged.
  Muon<T> bad;
  bad.options().precondition.heads = 3;
  ColMat<T> w = ColMat<T>::Random(8, 5);
  const ColMat<T> w0 = w;
  auto st = bad.make_state(w);
  CHECK_THROWS_WITH_AS(bad.step(w, ColMat<T>::Random(8, 5), st), doctest::Contains("heads = 3"), std::invalid_argument);
  bad.options().precondition.heads = 1;
  bad.options().precondition.split_sizes = {4, 3};
  CHECK_THROWS_WITH_AS(bad.step(w, ColMat<T>::Random(8, 5), st), doctest::Contains("split_sizes (4,3)"),
                       std::invalid_argument);
  bad.options().precondition.split_sizes = {2, 1};
  bad.options().precondition.split_groups = 3;
  CHECK_THROWS_WITH_AS(bad.step(w, ColMat<T>::Random(8, 5), st), doctest::Contains("split_groups = 3"),
                       std::invalid_argument);
  bad.options().precondition.split_sizes.clear();
  CHECK_THROWS_WITH_AS(Muon<T>::validate(bad.options(), "test"), doctest::Contains("split_groups (3) needs split_sizes"),
                       std::invalid_argument);
  // A per-head second moment is sized at make_state: other heads afterwards are refused, state unchanged.
  NorMuon<T> nm;
  nm.options().precondition.heads = 2;
  auto sn = nm.make_state(w);
  CHECK(sn.precondition.second_moment.size() == 2 * 5);  // max(4 rows, 5 cols) per head
  nm.options().precondition.heads = 4;
  CHECK_THROWS_WITH_AS(nm.step(w, ColMat<T>::Random(8, 5), sn), doctest::Contains("changed since make_state"),
                       std::invalid_argument);
  CHECK(w == w0);
  CHECK(sn.steps == 0);
  auto orscale = make_optimizer<T>("orscale", {{"heads", "2"}});
  auto so = orscale.make_state(view(std::as_const(w)));
  const ColMat<T> g = ColMat<T>::Random(8, 5);
  CHECK_THROWS_WITH_AS(orscale.step(view(w), view(g), so), doctest::Contains("scaling without per-parameter state"),
                       std::invalid_argument);
  CHECK(w == w0);
}
TEST_CASE_TEMPLATE("golden: NorMuon, AdaMuon and NAMO per head (dion NorMuon num_heads, modded-nanogpt paired heads)",
                   T, float, double) {
  // Each head a parameter of its own: its own second moment, Frobenius rescale (NorMuon), |G|_F (NAMO), scale.
  for (const std::string& shape : golden_shapes) {
    CAPTURE(shape);
    const int heads = golden_blocks(shape).heads;
    const auto run = [&](auto opt, const std::string& name, auto configure) {
      configure(opt.options());
      opt.options().precondition.heads = heads;
      check_golden<decltype(opt), RowMat<T>>(opt, shape, name);
      check_golden<decltype(opt), ColMat<T>>(opt, shape, name);
    };
    run(NorMuon<T>{}, "normuon_heads", MATOPT_LR_WD(0.02, 0.01));
    run(NorMuon<T>{}, "normuon_heads_longer", [](auto& o) {
      MATOPT_LR_WD(0.02, 0.01)(o);
      o.precondition.moment.axis = moments::NorMuon::Axis::Longer;
    });
    run(AdaMuon<T>{}, "adamuon_heads", MATOPT_LR_WD(0.02, 0.01));
    run(NAMO<T>{}, "namo_heads", MATOPT_LR_WD(1e-3, 0.01));
  }
}
namespace {
/// NorMuon (both axes), AdaMuon and NAMO on the row blocks `set_blocks(options, shape)` gives, against
/// `<shape>/<moment>_<suffix>`: each block a parameter of its own, with its own share of S, which starts after
/// the states of the blocks before it (unequal here, unlike heads: a wrong offset into S shows).
template <class T, class SetBlocks>
void check_block_moments(const std::string& suffix, SetBlocks set_blocks) {
  for (const std::string& shape : golden_shapes) {
    CAPTURE(shape);
    const auto run = [&](auto opt, const std::string& name, auto configure) {
      CAPTURE(name);
      configure(opt.options());
      set_blocks(opt.options().precondition, shape);
      check_golden<decltype(opt), RowMat<T>>(opt, shape, name);
      check_golden<decltype(opt), ColMat<T>>(opt, shape, name);
    };
    run(NorMuon<T>{}, "normuon_" + suffix, MATOPT_LR_WD(0.02, 0.01));
    run(NorMuon<T>{}, "normuon_" + suffix + "_longer", [](auto& o) {
      MATOPT_LR_WD(0.02, 0.01)(o);
      o.precondition.moment.axis = moments::NorMuon::Axis::Longer;
    });
    run(AdaMuon<T>{}, "adamuon_" + suffix, MATOPT_LR_WD(0.02, 0.01));
    run(NAMO<T>{}, "namo_" + suffix, MATOPT_LR_WD(1e-3, 0.01));
  }
}
}  // namespace

TEST_CASE_TEMPLATE("golden: NorMuon, AdaMuon and NAMO per block of unequal split sizes (dion split_sizes)", T, float,
                   double) {
  // Contiguous blocks (8, 6, 6) tall, (6, 3, 3) wide, (8, 5, 3) square: AdaMuon's shares of S 96, 72, 72 entries
  // on the tall shape; NAMO's |G_block|_F, |M_block|_F and S per block.
  check_block_moments<T>("split", [](auto& p, const std::string& shape) {
    p.split_sizes = golden_blocks(shape).splits;
  });
}
TEST_CASE_TEMPLATE("golden: NorMuon, AdaMuon and NAMO per Megatron QKV group (split_qkv, split_groups = 2)", T, float,
                   double) {
  // Block i = slice i of both groups (Q, K, V gathered in group order); NAMO's |G_block|_F over the interleaved
  // runs. The tall Q block is 12 x 12: the longer axis takes its rows (m >= n).
  check_block_moments<T>("qkv_groups", [](auto& p, const std::string& shape) {
    p.split_sizes = golden_blocks(shape).qkv;
    p.split_groups = 2;
  });
}
TEST_CASE_TEMPLATE("golden: Dion (microsoft/dion dion_reference.py, Householder QR), rank fractions 1 and 0.5", T,
                   float, double) {
  const Golden& gold = Golden::variants();
  for (const std::string& shape : golden_shapes) {  // square: B = M (m >= n), not M^T
    for (const auto& run_case : {std::pair<std::string, double>{"dion", 1.0}, {"dion_half", 0.5}}) {
      const std::string name = run_case.first;  // (no structured bindings: Clang 14 cannot capture them)
      const double fraction = run_case.second;
      CAPTURE(shape);
      CAPTURE(name);
      auto run = [&](auto w) {
        using Mat = decltype(w);
        Dion<T> opt;
        opt.options().precondition.rank_fraction = fraction;
        w = gold[shape + "/dion_data/W0"].cast<T>();
        auto st = opt.make_state(w);
        const Eigen::MatrixXd q0 = gold[shape + "/" + name + "/Q0"];
        REQUIRE(st.precondition.q.size() == q0.size());
        Eigen::Map<Eigen::Matrix<T, -1, -1>>(st.precondition.q.data(), q0.rows(), q0.cols()) = q0.cast<T>();
        for (int k = 1; k <= 3; ++k) {
          opt.step(w, Mat(gold[shape + "/dion_data/G" + std::to_string(k)].cast<T>()), st);
          CAPTURE(k);
          const Eigen::MatrixXd want = gold[shape + "/" + name + "/W" + std::to_string(k)];
          const Eigen::MatrixXd w0 = gold[shape + "/dion_data/W0"];
          CHECK(rel_error(w, want) <= golden_tol<T>());
          CHECK(rel_error((w.template cast<double>() - w0).eval(), (want - w0).eval()) <= 100 * golden_tol<T>());
        }
      };
      run(RowMat<T>());
      run(ColMat<T>());
    }
  }
}
TEST_CASE_TEMPLATE("golden: cautious weight decay (arXiv 2510.12402) on Muon and on RMNP's fused step", T, float,
                   double) {
  auto cautious = [](auto& o) {
    MATOPT_LR_WD(0.02, 0.1)(o);
    o.scaling.weight_decay_method = WeightDecay::Cautious;
  };
  check_variant<Muon, T>("muon_cautious", cautious);
  check_variant<RMNP, T>("rmnp_cautious", cautious);
}
TEST_CASE_TEMPLATE("golden: weight decay independent of lr, lr rules sqrt_max and sqrt_ratio", T, float, double) {
  check_variant<Muon, T>("muon_independent", [](auto& o) {
    MATOPT_LR_WD(0.02, 0.001)(o);
    o.scaling.weight_decay_method = WeightDecay::Independent;
  });
  check_variant<Muon, T>("muon_sqrt_max", [](auto& o) {
    MATOPT_LR_WD(0.02, 0.01)(o);
    o.scaling.lr_rule = LrRule::SqrtMax;
    o.scaling.extra_scale_factor = 0.2;
  });
  check_variant<RMNP, T>("rmnp_sqrt_ratio", [](auto& o) {
    MATOPT_LR_WD(0.02, 0.01)(o);
    o.scaling.lr_rule = LrRule::SqrtRatio;
  });
}

TEST_CASE_TEMPLATE("golden: Lion (google/automl lion_pytorch.py)", T, float, double) {
  const Golden& gold = Golden::variants();
  typename Lion<T>::Options o;
  o.lr = T(1e-2);
  o.weight_decay = T(0.1);
  const Lion<T> opt(o);
  for (const std::string name : {"vector", "matrix"}) {
    CAPTURE(name);
    const std::string p = "lion/" + name + "/";
    RowMat<T> w = gold[p + "W0"].cast<T>();
    Eigen::Matrix<T, -1, -1> wc = w;  // the other storage order
    auto st = opt.make_state(w);
    auto sc = opt.make_state(wc);
    for (int k = 1; k <= 3; ++k) {
      const RowMat<T> g = gold[p + "G" + std::to_string(k)].cast<T>();
      opt.step(w, g, st);
      opt.step(wc, Eigen::Matrix<T, -1, -1>(g), sc);
      CAPTURE(k);
      CHECK(rel_error(w, gold[p + "W" + std::to_string(k)]) <= golden_tol<T>());
      CHECK(rel_error(wc, gold[p + "W" + std::to_string(k)]) <= golden_tol<T>());
    }
  }
}

// ---- closed forms: one row, one column (variants.md; docs/optimizers.md) ----
namespace {
/// The scalar NS response rho of a normalized singular value 1 / (1 + eps / ||U||) after the schedule's steps,
/// iterated here on the scalar polynomial (not the library's matrix code).
double ns_response(const NsSchedule& s, double u_norm) {
  double x = u_norm / (s.safety * u_norm + s.eps);
  for (int k = 0; k < s.steps; ++k) {
    const NsCoefficients& c = s.at(k);
    x = c.a * x + c.b * x * x * x + c.c * x * x * x * x * x;
  }
  return x;
}

/// The closed forms leave out the eps added to sqrt(S) and to the norms (1e-10 / 1e-8 against values of
/// 0.005 and more here): up to about 1e-9 relative.
template <class T>
constexpr double closed_tol() {
  return std::is_same_v<T, float> ? 2e-6 : 1e-8;
}
}  // namespace

TEST_CASE_TEMPLATE("variants on 1 x n and n x 1: closed forms of the first step", T, float, double) {
  const double lr = 0.02, beta = 0.95;
  for (const bool wide : {true, false}) {
    const Index m = wide ? 1 : 9, n = wide ? 9 : 1;
    CAPTURE(m);
    Eigen::MatrixXd g0(m, n);
    for (Index i = 0; i < g0.size(); ++i) g0(i) = std::sin(1.0 + 0.7 * double(i)) + (i == 3 ? 0.0 : 0.05);
    const Eigen::MatrixXd w0 = Eigen::MatrixXd::Constant(m, n, 0.25);
    const Eigen::MatrixXd sign_g = g0.array().sign().matrix();
    const double len = double(std::max(m, n));
    auto first_step = [&](auto opt) {
      ColMat<T> w = w0.cast<T>();
      const ColMat<T> g = g0.cast<T>();
      auto st = opt.make_state(w);
      opt.step(w, g, st);
      return Eigen::MatrixXd(w.template cast<double>());
    };
    // EMA Nesterov: U = (1 - b^2) G; NS of a rank-1 U is rho U / ||U||.
    const double u_norm = (1 - beta * beta) * g0.norm();
    {
      const double rho = ns_response(schedules::Jordan::schedule(), u_norm);
      // NorMuon: one row is rescaled back to its own norm: D' = rho U/||U||, step lr max(1, m/n)^.5 D'.
      // One column: each row is one entry, D'_i = sign(U_i) / sqrt(1 - b2), then rescaled to ||D|| = rho:
      // D' = rho sign(U) / sqrt(n), and s = sqrt(m) makes the step lr rho sign(U).
      const Eigen::MatrixXd want =
          wide ? Eigen::MatrixXd(w0 - lr * rho * g0 / g0.norm()) : Eigen::MatrixXd(w0 - lr * rho * sign_g);
      CHECK(rel_error(first_step(NorMuon<T>{}), want) <= closed_tol<T>());
      // AdaMuon: D' = sign(D) / sqrt(1 - b2) elementwise, then RMS 0.2: the step is lr 0.2 sign(U), with decay.
      const Eigen::MatrixXd want_ada = w0 * (1 - lr * 0.01) - lr * 0.2 * sign_g;
      CHECK(rel_error(first_step(AdaMuon<T>{}), want_ada) <= closed_tol<T>());
    }
    {
      // NAMO (EMA without Nesterov): U = M = (1 - b) G, S = (1 - b2) ||G||^2, alpha = ||U|| / sqrt(S) = sqrt(0.05)
      // (eps 1e-8 aside); D = rho_you U/||U||; step lr sqrt(max(m, n)) alpha D with NAMO's lr 1e-3.
      const double u = (1 - beta) * g0.norm();
      const double rho = ns_response(schedules::You::schedule(), u);
      const double alpha = u / (std::sqrt(0.05) * g0.norm() + 1e-8);
      const Eigen::MatrixXd want = w0 - 1e-3 * std::sqrt(len) * alpha * rho * g0 / g0.norm();  // NAMO's lr 1e-3
      CHECK(rel_error(first_step(NAMO<T>{}), want) <= closed_tol<T>());
    }
    {
      // PolarGrad: polar(U) = U/||U||, nu = ||U||, so D' = U = (1 - b) G.
      const Eigen::MatrixXd want = w0 - lr * (1 - beta) * g0;
      CHECK(rel_error(first_step(PolarGrad<T>{}), want) <= closed_tol<T>());
    }
  }
}

TEST_CASE_TEMPLATE("variants: a zero gradient leaves W decayed only, a zero W moves and stays finite", T, float,
                   double) {
  auto run = [](auto opt, const ColMat<T>& w0, const ColMat<T>& g) {
    ColMat<T> w = w0;
    auto st = opt.make_state(w);
    for (int k = 0; k < 3; ++k) opt.step(w, g, st);
    return w;
  };
  auto all = [&](const ColMat<T>& w0, const ColMat<T>& g, auto&& check) {
    check(run(NorMuon<T>{}, w0, g), 0.0, "NorMuon");
    check(run(AdaMuon<T>{}, w0, g), 0.01, "AdaMuon");
    check(run(NAMO<T>{}, w0, g), 0.0, "NAMO");
    check(run(PolarGrad<T>{}, w0, g), 0.0, "PolarGrad");
    check(run(TurboMuon<T>{}, w0, g), 0.0, "TurboMuon");
    check(run(Dion<T>{}, w0, g), 0.01, "Dion");
  };
  for (const auto& mn : {std::pair<Index, Index>{7, 5}, {5, 7}, {1, 6}, {6, 1}}) {
    const Index m = mn.first, n = mn.second;
    CAPTURE(m);
    CAPTURE(n);
    const ColMat<T> w0 = ColMat<T>::Random(m, n), zero = ColMat<T>::Zero(m, n);
    // dion#24: 0/0 would give NaN here; each eps is added, so D' = 0 and only the decay acts.
    all(w0, zero, [&](const ColMat<T>& w, double wd, const char* name) {
      CAPTURE(name);
      const std::string who = name;
      const T keep = T(1) - T(who == "NAMO" ? 1e-3 : who == "Dion" ? 0.01 : 0.02) * T(wd);
      ColMat<T> want = w0;
      for (int k = 0; k < 3; ++k) want *= keep;
      CHECK(w == want);
    });
    const ColMat<T> g = ColMat<T>::Random(m, n);
    all(zero, g, [&](const ColMat<T>& w, double, const char* name) {
      CAPTURE(name);
      CHECK(w.allFinite());
      CHECK(w.norm() > T(0));
    });
  }
  // Lion on a zero gradient: sign(0) = 0, so W only decays.
  typename Lion<T>::Options o;
  o.weight_decay = T(0.1);
  Lion<T> lion(o);
  ColMat<T> w = ColMat<T>::Random(4, 3);
  const ColMat<T> w0 = w;
  auto st = lion.make_state(w);
  lion.step(w, ColMat<T>::Zero(4, 3), st);
  CHECK(w == ColMat<T>((T(1) - o.lr * o.weight_decay) * w0));
}

TEST_CASE("variants: every new preset resumes bitwise from a checkpoint, facade names and keys") {
  // Two steps, a checkpoint, then one more step from the live and from the loaded state: the same W, bit for bit.
  auto resume = [](auto opt) {
    using Opt = decltype(opt);
    using T = typename Opt::Scalar;
    RowMat<T> w = RowMat<T>::Random(6, 10);
    const RowMat<T> g1 = RowMat<T>::Random(6, 10), g2 = RowMat<T>::Random(6, 10);
    std::vector<typename Opt::State> states{opt.make_state(w)};
    opt.step(w, g1, states[0]);
    opt.step(w, g2, states[0]);
    std::stringstream file;
    save_checkpoint(file, opt, states);
    std::vector<typename Opt::State> loaded{opt.make_state(w)};
    load_checkpoint(file, opt, loaded);
    RowMat<T> w2 = w;
    opt.step(w, g1, states[0]);
    opt.step(w2, g1, loaded[0]);
    CHECK(w == w2);
  };
  resume(NorMuon<float>{});
  resume(AdaMuon<double>{});
  resume(NAMO<float>{});
  resume(PolarGrad<double>{});
  resume(Lion<float>{});
  resume(TurboMuon<float>{});
  resume(Dion<double>{});

  // The facade's names build the typed presets: same numbers on the same inputs.
  const Eigen::MatrixXd w0 = Eigen::MatrixXd::Random(8, 5), g = Eigen::MatrixXd::Random(8, 5);
  auto same = [&](AnyOptimizer<double> any, auto typed) {
    Eigen::MatrixXd a = w0, b = w0;
    auto sa = any.make_state(view(std::as_const(a)));
    auto sb = typed.make_state(b);
    for (int k = 0; k < 2; ++k) {
      any.step(view(a), view(g), sa);
      typed.step(b, g, sb);
    }
    CHECK(a == b);
  };
  NorMuon<double> nm;
  nm.options().precondition.moment.beta2 = 0.9;
  nm.options().precondition.moment.axis = moments::NorMuon::Axis::Longer;
  nm.options().scaling.lr_rule = LrRule::SqrtMax;
  nm.options().scaling.extra_scale_factor = 0.2;
  same(make_optimizer<double>("normuon", {{"beta2", "0.9"}, {"normuon_axis", "longer"}, {"lr_rule", "sqrt_max"},
                                          {"extra_scale_factor", "0.2"}}),
       nm);
  same(make_optimizer<double>("adamuon"), AdaMuon<double>{});
  same(make_optimizer<double>("namo"), NAMO<double>{});
  same(make_optimizer<double>("polargrad"), PolarGrad<double>{});
  same(make_optimizer<double>("turbo_muon"), TurboMuon<double>{});
  Muon<double> split;
  split.options().precondition.split_sizes = {4, 2, 2};
  same(make_optimizer<double>("muon", {{"split_sizes", "4,2,2"}}), split);
  Muon<double> heads;
  heads.options().precondition.heads = 4;
  same(make_optimizer<double>("muon", {{"heads", "4"}}), heads);
  Dion<double> dion;
  dion.options().precondition.rank_fraction = 0.5;
  same(make_optimizer<double>("dion", {{"rank_fraction", "0.5"}}), dion);
  Muon<double> cautious;
  cautious.options().weight_decay = 0.1;
  cautious.options().scaling.weight_decay_method = WeightDecay::Cautious;
  same(make_optimizer<double>("muon", {{"weight_decay", "0.1"}, {"cautious_weight_decay", "true"}}), cautious);
  same(make_optimizer<double>("lion", {{"lr", "0.001"}}), [] {
    Lion<double> l;
    l.options().lr = 0.001;
    return l;
  }());

  // Bad values name the option and change nothing.
  auto any = make_optimizer<float>("normuon");
  CHECK_THROWS_WITH_AS(any.set("normuon_axis", "cols"), doctest::Contains("normuon_axis"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(any.set("lr_rule", "spectral"), doctest::Contains("lr_rule"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(any.set("beta2", "1.5"), doctest::Contains("beta2"), std::invalid_argument);
  auto muon = make_optimizer<float>("muon");
  CHECK_THROWS_WITH_AS(muon.set("split_sizes", "4,x"), doctest::Contains("split_sizes"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(muon.set("heads", "0"), doctest::Contains("heads must be >= 1"), std::invalid_argument);
  muon.set("heads", "2");
  CHECK_THROWS_WITH_AS(muon.set("split_sizes", "1,1"), doctest::Contains("exclusive"), std::invalid_argument);
  CHECK(make_optimizer<float>("polargrad").option_keys().find(", ,") == std::string::npos);
  auto pg = make_optimizer<double>("polargrad", {{"heads", "2"}});
  Eigen::MatrixXd wp = Eigen::MatrixXd::Random(4, 3);
  const Eigen::MatrixXd wp0 = wp, gp = Eigen::MatrixXd::Random(4, 3);
  auto sp = pg.make_state(view(std::as_const(wp)));
  CHECK_THROWS_WITH_AS(pg.step(view(wp), view(gp), sp), doctest::Contains("heads"), std::invalid_argument);
  CHECK(wp == wp0);
  // Dion's rank is fixed at make_state: a changed rank_fraction is refused before anything is written.
  Dion<float> d;
  RowMat<float> wd = RowMat<float>::Random(6, 4);
  const RowMat<float> wd0 = wd, gd = RowMat<float>::Random(6, 4);
  auto sd = d.make_state(wd);
  d.options().precondition.rank_fraction = 0.5;
  CHECK_THROWS_WITH_AS(d.step(wd, gd, sd), doctest::Contains("rank_fraction"), std::invalid_argument);
  CHECK(wd == wd0);
  CHECK_THROWS_WITH_AS(make_optimizer<float>("orscale", {{"weight_decay_method", "independent"}}),
                       doctest::Contains("independent"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_optimizer<float>("orscale", {{"cautious_weight_decay", "true"}}),
                       doctest::Contains("cautious"), std::invalid_argument);
}

// ---- QK-clip (MuonClip) ----
namespace {
/// Each query head's largest logit q_i . k_j / sqrt(hd) over tokens X (rows), computed here from W_q, W_k.
std::vector<double> head_max_logits(const Eigen::MatrixXd& x, const Eigen::MatrixXd& wq, const Eigen::MatrixXd& wk,
                                    Index heads, Index kv_heads) {
  const Index hd = wq.rows() / heads;
  std::vector<double> s;
  for (Index h = 0; h < heads; ++h) {
    const Index g = h / (heads / kv_heads);
    const Eigen::MatrixXd q = x * wq.middleRows(h * hd, hd).transpose(), k = x * wk.middleRows(g * hd, hd).transpose();
    s.push_back((q * k.transpose()).maxCoeff() / std::sqrt(double(hd)));
  }
  return s;
}
}  // namespace

TEST_CASE("qk_clip: the clipped groups' largest logit becomes tau, the others are untouched (MHA and GQA)") {
  const Index d = 8, hd = 2, tokens = 5;
  const Eigen::MatrixXd x = Eigen::MatrixXd::Random(tokens, d);
  for (const Index kv : {Index(4), Index(2)}) {  // MHA (4 KV heads) and GQA (2 KV heads for 4 query heads)
    CAPTURE(kv);
    const Index heads = 4;
    Eigen::MatrixXd wq = Eigen::MatrixXd::Random(heads * hd, d), wk = Eigen::MatrixXd::Random(kv * hd, d);
    wq.middleRows(0, hd) *= 12.0;  // head 0 (and its group) far above tau
    const std::vector<double> before = head_max_logits(x, wq, wk, heads, kv);
    const double tau = 0.5 * before[0];
    // Groups: the largest logit of each group, before and after.
    auto group_max = [&](const std::vector<double>& s, Index g) {
      double v = s[std::size_t(g * (heads / kv))];
      for (Index h = g * (heads / kv); h < (g + 1) * (heads / kv); ++h) v = std::max(v, s[std::size_t(h)]);
      return v;
    };
    RowMat<double> q_row = wq;  // the other storage order for W_q
    const Eigen::MatrixXd wq0 = wq, wk0 = wk;
    QkClipOptions o;
    o.tau = tau;
    o.alpha = 0.3;
    Index expected = 0;
    for (Index g = 0; g < kv; ++g) expected += group_max(before, g) > tau ? 1 : 0;
    CHECK(qk_clip(wq, wk, before, kv, o) == expected);
    CHECK(expected >= 1);
    const std::vector<double> after = head_max_logits(x, wq, wk, heads, kv);
    for (Index g = 0; g < kv; ++g) {
      CAPTURE(g);
      if (group_max(before, g) > tau) {
        CHECK(group_max(after, g) == doctest::Approx(tau).epsilon(1e-12));
        // W_q took eta^alpha: every entry of the group's Q rows by the same factor.
        const double eta = tau / group_max(before, g);
        const Index rows = (heads / kv) * hd;
        CHECK(rel_error(wq.middleRows(g * rows, rows).eval(), (wq0.middleRows(g * rows, rows) * std::pow(eta, 0.3)).eval()) <= 1e-15);
      } else {
        for (Index h = g * (heads / kv); h < (g + 1) * (heads / kv); ++h) CHECK(after[std::size_t(h)] == before[std::size_t(h)]);
      }
    }
    Eigen::MatrixXd wk_row = wk0;
    qk_clip(q_row, wk_row, before, kv, o);
    CHECK(q_row == RowMat<double>(wq));
  }
  // Bad input names the problem and changes nothing.
  Eigen::MatrixXd wq = Eigen::MatrixXd::Random(8, 4), wk = Eigen::MatrixXd::Random(4, 4);
  const Eigen::MatrixXd wq0 = wq;
  CHECK_THROWS_WITH_AS(qk_clip(wq, wk, {1.0, 2.0, 3.0}, 1), doctest::Contains("W_q"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(qk_clip(wq, wk, {1.0, 2.0, 3.0, 4.0}, 3), doctest::Contains("kv_heads"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(qk_clip(wq, wk, {1e9, std::nan(""), 3.0, 4.0}, 2), doctest::Contains("max_logits[1]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(qk_clip(wq, wk, {1e9, 2.0, 3.0, 4.0}, 2, QkClipOptions{-1.0, 0.5}), doctest::Contains("tau"),
                       std::invalid_argument);
  CHECK(wq == wq0);
}

TEST_CASE("Lion as the hybrid container's second optimizer: a vector parameter steps as the golden Lion") {
  const Golden& gold = Golden::variants();
  Eigen::VectorXd bias = gold["lion/vector/W0"].transpose();
  Eigen::MatrixXd w = Eigen::MatrixXd::Random(6, 4);
  HybridOptimizer<double> opt(make_optimizer<double>("muon"),
                              make_optimizer<double>("lion", {{"lr", "0.01"}, {"weight_decay", "0.1"}}));
  const auto iw = opt.add("fc.weight", view(w));
  const auto ib = opt.add("fc.bias", view(bias));
  CHECK(opt.route(iw) == Route::Matrix);
  CHECK(opt.route(ib) == Route::AdamW);  // the non-matrix route, here Lion
  for (int k = 1; k <= 3; ++k) {
    const Eigen::VectorXd g = gold["lion/vector/G" + std::to_string(k)].transpose();
    const Eigen::MatrixXd gw = Eigen::MatrixXd::Random(6, 4);
    opt.step({view(gw), view(g)});
    CHECK(rel_error(bias, Eigen::VectorXd(gold["lion/vector/W" + std::to_string(k)].transpose())) <= 1e-12);
  }
}

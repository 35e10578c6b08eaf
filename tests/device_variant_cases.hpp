// SPDX-License-Identifier: MIT
#pragma once
// The peers' variants on a device engine (issue 20): NorMuon (both axes), AdaMuon, NAMO, PolarGrad, Turbo-Muon
// (plain and Gram NS), per-head and split row blocks (Megatron's interleaved QKV included), second moments per
// head, per block of unequal split sizes and per interleaved QKV group, cautious and lr-independent weight decay
// and the lr rules, against the golden data that tests/test_variants.cpp checks the host with
// (scripts/make_golden_variants.py, PyTorch float64, no matopt code): W after each of three steps within 1e-5
// (float) / 1e-10 (double) relative Frobenius error, both storage orders, a tall (20 x 12), a wide (12 x 28) and
// a square (16 x 16) shape (the square one pins the m == n tie-breaks: AOL's orientation, NorMuon's longer
// axis); Dion (rank fractions 1 and 0.5) on the same shapes. Then checkpoints of AdaMuon's device-resident second
// moment and of Dion's M and Q loaded into the host optimizer (and back), zero gradients on zero weights, and
// QK-clip on device matrices against its factors eta^alpha, eta^(1 - alpha) computed here.
// The including file defines MATOPT_BACKEND and matopt::test::Backend (tests/device_cases.hpp).

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <matopt/backend/device_qk_clip.hpp>
#include <matopt/matopt.hpp>
#include <matopt/serialization/checkpoint.hpp>

#include "test_support.hpp"

namespace matopt::test::variant_cases {

template <class T>
constexpr double tol() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-10;
}

/// Opt on the backend over the golden gradients of `shape`, W in `layout`; W after each step against
/// `<shape>/<name>/W<k>`.
template <class Opt>
void check(const typename Opt::Options& options, const std::string& shape, const std::string& name, Layout layout) {
  using T = typename Opt::Scalar;
  const Golden& gold = Golden::variants();
  const Eigen::MatrixXd w0 = gold[shape + "/W0"];
  auto opt = Backend::template optimizer<Opt>(options);
  DeviceMatrix<T> w(w0.rows(), w0.cols(), layout), g(w0.rows(), w0.cols(), layout);
  w.assign(w0.cast<T>());
  auto state = opt.make_state(w);
  for (int k = 1; k <= 3; ++k) {
    g.assign(gold[shape + "/G" + std::to_string(k)].cast<T>());
    Backend::before_step(opt);
    opt.step(w, g, state);
    const Eigen::MatrixXd want = gold[shape + "/" + name + "/W" + std::to_string(k)];
    const Eigen::MatrixXd got = to_host(w).template cast<double>();
    CAPTURE(k);
    CHECK(rel_error(got, want) <= tol<T>());
    CHECK(rel_error((got - w0).eval(), (want - w0).eval()) <= 100 * tol<T>());
  }
}

/// The golden script's row-block tables for a shape: HEADS, SPLITS and QKV_GROUPS (2 groups of these sizes).
struct Blocks {
  int heads;
  std::vector<Index> splits, qkv;
};
inline Blocks blocks_of(const std::string& shape) {
  if (shape == "tall") return {4, {8, 6, 6}, {6, 2, 2}};  // 20 x 12
  if (shape == "wide") return {3, {6, 3, 3}, {4, 1, 1}};  // 12 x 28
  return {4, {8, 5, 3}, {4, 2, 2}};                        // square, 16 x 16
}

/// Every shape and both storage orders; `configure(options, blocks)` sets the golden run's hyperparameters, with
/// the shape's row-block tables.
template <class Opt, class Configure>
void check_variant(const std::string& name, Configure configure) {
  for (const std::string shape : {"tall", "wide", "square"}) {
    typename Opt::Options o;
    configure(o, blocks_of(shape));
    for (const Layout layout : {Layout::RowMajor, Layout::ColMajor}) {
      CAPTURE(shape);
      const std::string order = matopt::detail::layout_name(layout);  // (a char* captures as its address)
      CAPTURE(order);
      check<Opt>(o, shape, name, layout);
    }
  }
}

/// The golden runs' lr and weight decay.
template <class O>
void lr_wd(O& o, double lr, double wd) {
  using S = decltype(o.lr);
  o.lr = S(lr);
  o.weight_decay = S(wd);
}

}  // namespace matopt::test::variant_cases

TEST_CASE_TEMPLATE(MATOPT_BACKEND ": second moments (NorMuon, AdaMuon, NAMO) equal the golden data", T, float,
                   double) {
  using namespace matopt;
  using test::variant_cases::check_variant;
  using test::variant_cases::lr_wd;
  SUBCASE("NorMuon") { check_variant<NorMuon<T>>("normuon", [](auto& o, const auto&) { lr_wd(o, 0.02, 0.01); }); }
  SUBCASE("NorMuon, longer-side axis") {
    check_variant<NorMuon<T>>("normuon_longer", [](auto& o, const auto&) {
      lr_wd(o, 0.02, 0.01);
      o.precondition.moment.axis = moments::NorMuon::Axis::Longer;
    });
  }
  SUBCASE("AdaMuon") { check_variant<AdaMuon<T>>("adamuon", [](auto& o, const auto&) { lr_wd(o, 0.02, 0.01); }); }
  SUBCASE("NAMO") { check_variant<NAMO<T>>("namo", [](auto& o, const auto&) { lr_wd(o, 1e-3, 0.01); }); }
  // Each block of rows a parameter of its own, on its share of S (after the shares of the blocks before it).
  const auto per_block = [](const std::string& suffix, auto set_blocks) {
    const auto with_lr = [set_blocks](double lr) {
      return [lr, set_blocks](auto& o, const test::variant_cases::Blocks& b) {
        lr_wd(o, lr, 0.01);
        set_blocks(o.precondition, b);
      };
    };
    check_variant<NorMuon<T>>("normuon_" + suffix, with_lr(0.02));
    check_variant<NorMuon<T>>("normuon_" + suffix + "_longer", [&](auto& o, const test::variant_cases::Blocks& b) {
      with_lr(0.02)(o, b);
      o.precondition.moment.axis = moments::NorMuon::Axis::Longer;
    });
    check_variant<AdaMuon<T>>("adamuon_" + suffix, with_lr(0.02));
    check_variant<NAMO<T>>("namo_" + suffix, with_lr(1e-3));
  };
  SUBCASE("per head: NorMuon (both axes), AdaMuon, NAMO") {
    per_block("heads", [](auto& p, const test::variant_cases::Blocks& b) { p.heads = b.heads; });
  }
  SUBCASE("per block of unequal split sizes: NorMuon (both axes), AdaMuon, NAMO") {
    per_block("split", [](auto& p, const test::variant_cases::Blocks& b) { p.split_sizes = b.splits; });
  }
  SUBCASE("per interleaved QKV group (split_groups = 2): NorMuon (both axes), AdaMuon, NAMO") {
    per_block("qkv_groups", [](auto& p, const test::variant_cases::Blocks& b) {
      p.split_sizes = b.qkv;
      p.split_groups = 2;
    });
  }
}

TEST_CASE_TEMPLATE(MATOPT_BACKEND ": PolarGrad, Turbo-Muon and row blocks equal the golden data", T, float, double) {
  using namespace matopt;
  using test::variant_cases::check_variant;
  using test::variant_cases::lr_wd;
  SUBCASE("PolarGrad (exact polar factor)") {
    check_variant<PolarGrad<T>>("polargrad", [](auto& o, const auto&) { lr_wd(o, 0.02, 0.01); });
  }
  SUBCASE("Turbo-Muon: AOL and 4 steps, plain and Gram Newton-Schulz") {
    check_variant<TurboMuon<T>>("turbo_muon", [](auto& o, const auto&) { lr_wd(o, 0.02, 0.01); });
    check_variant<TurboMuon<T>>("turbo_muon", [](auto& o, const auto&) {
      lr_wd(o, 0.02, 0.01);
      o.precondition.variant = NsVariant::Gram;
    });
  }
  SUBCASE("heads, split sizes, Megatron's interleaved QKV groups") {
    check_variant<Muon<T>>("muon_heads", [](auto& o, const auto& b) {
      lr_wd(o, 0.02, 0.01);
      o.precondition.heads = b.heads;
    });
    check_variant<Muon<T>>("muon_split", [](auto& o, const auto& b) {
      lr_wd(o, 0.02, 0.01);
      o.precondition.split_sizes = b.splits;
      o.scaling.lr_rule = LrRule::SqrtRatio;
    });
    check_variant<Muon<T>>("muon_qkv_groups", [](auto& o, const auto& b) {
      lr_wd(o, 0.02, 0.01);
      o.precondition.split_sizes = b.qkv;
      o.precondition.split_groups = 2;
    });
  }
}

TEST_CASE_TEMPLATE(MATOPT_BACKEND ": cautious and lr-independent weight decay, lr rules equal the golden data", T,
                   float, double) {
  using namespace matopt;
  using test::variant_cases::check_variant;
  using test::variant_cases::lr_wd;
  const auto cautious = [](auto& o, const auto&) {
    lr_wd(o, 0.02, 0.1);
    o.scaling.weight_decay_method = WeightDecay::Cautious;
  };
  SUBCASE("cautious on Muon") { check_variant<Muon<T>>("muon_cautious", cautious); }
  SUBCASE("cautious on RMNP (the fused one-pass step, masked)") {
    check_variant<RMNP<T>>("rmnp_cautious", cautious);
  }
  SUBCASE("independent of lr; sqrt_max with an extra factor; sqrt_ratio") {
    check_variant<Muon<T>>("muon_independent", [](auto& o, const auto&) {
      lr_wd(o, 0.02, 0.001);
      o.scaling.weight_decay_method = WeightDecay::Independent;
    });
    check_variant<Muon<T>>("muon_sqrt_max", [](auto& o, const auto&) {
      lr_wd(o, 0.02, 0.01);
      o.scaling.lr_rule = LrRule::SqrtMax;
      o.scaling.extra_scale_factor = 0.2;
    });
    check_variant<RMNP<T>>("rmnp_sqrt_ratio", [](auto& o, const auto&) {
      lr_wd(o, 0.02, 0.01);
      o.scaling.lr_rule = LrRule::SqrtRatio;
    });
  }
}

TEST_CASE_TEMPLATE(MATOPT_BACKEND ": Dion equals the golden data (microsoft/dion, rank fractions 1 and 0.5)", T, float,
                   double) {
  using namespace matopt;
  const test::Golden& gold = test::Golden::variants();
  for (const std::string shape : {"tall", "wide", "square"}) {  // square: B = M (m >= n), not M^T
    for (const auto& run_case : {std::pair<std::string, double>{"dion", 1.0}, {"dion_half", 0.5}}) {
      for (const Layout layout : {Layout::RowMajor, Layout::ColMajor}) {
        const std::string name = run_case.first, order = matopt::detail::layout_name(layout);
        CAPTURE(shape);
        CAPTURE(name);
        CAPTURE(order);
        typename Dion<T>::Options o;
        o.precondition.rank_fraction = run_case.second;
        auto dev = test::Backend::template optimizer<Dion<T>>(o);
        const Eigen::MatrixXd w0 = gold[shape + "/dion_data/W0"], q0 = gold[shape + "/" + name + "/Q0"];
        DeviceMatrix<T> w(w0.rows(), w0.cols(), layout), g(w0.rows(), w0.cols(), layout);
        w.assign(w0.cast<T>());
        auto st = dev.make_state(w);
        // M (zero) then Q in device memory, none in the host State; Q set to the golden run's start.
        REQUIRE(st.moment_sizes == std::vector<Index>{w0.size(), q0.size()});
        CHECK(st.precondition.momentum.size() == 0);
        CHECK(st.precondition.q.size() == 0);
        const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> q = q0.cast<T>();
        thrust::copy(q.data(), q.data() + q.size(), st.moment.begin() + w0.size());
        for (int k = 1; k <= 3; ++k) {
          g.assign(gold[shape + "/dion_data/G" + std::to_string(k)].cast<T>());
          test::Backend::before_step(dev);
          dev.step(w, g, st);
          const Eigen::MatrixXd want = gold[shape + "/" + name + "/W" + std::to_string(k)];
          const Eigen::MatrixXd got = to_host(w).template cast<double>();
          CAPTURE(k);
          CHECK(test::rel_error(got, want) <= test::variant_cases::tol<T>());
          CHECK(test::rel_error((got - w0).eval(), (want - w0).eval()) <= 100 * test::variant_cases::tol<T>());
        }
      }
    }
  }
}

TEST_CASE(MATOPT_BACKEND ": Dion's device M and Q move through checkpoints to the host and back") {
  using namespace matopt;
  using Opt = Dion<double>;
  const test::Golden& gold = test::Golden::variants();
  const Eigen::MatrixXd w0 = gold["wide/dion_data/W0"], q0 = gold["wide/dion_half/Q0"];
  Opt::Options o;
  o.precondition.rank_fraction = 0.5;
  auto dev = test::Backend::optimizer<Opt>(o);
  DeviceMatrix<double> w(w0.rows(), w0.cols(), Layout::RowMajor), g(w0.rows(), w0.cols(), Layout::RowMajor);
  w.assign(w0);
  std::vector<typename decltype(dev)::State> ds{dev.make_state(w)};
  thrust::copy(q0.data(), q0.data() + q0.size(), ds[0].moment.begin() + w0.size());
  g.assign(gold["wide/dion_data/G1"]);
  test::Backend::before_step(dev);
  dev.step(w, g, ds[0]);
  // Step 2 on the host from the device's checkpoint: the golden W2.
  Opt host(o);
  using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  RowMat hw = to_host(w);
  std::vector<Opt::State> hs{host.make_state(hw)};
  std::stringstream file;
  save_checkpoint(file, dev, ds);
  CHECK(ds[0].precondition.q.size() == 0);  // staged for the file only
  load_checkpoint(file, host, hs);
  CHECK(hs[0].steps == 1);
  CHECK(hs[0].precondition.momentum.size() == w0.size());
  CHECK(hs[0].precondition.q.size() == q0.size());
  CHECK(hs[0].precondition.momentum.cwiseAbs().maxCoeff() > 0.0);
  host.step(hw, RowMat(gold["wide/dion_data/G2"]), hs[0]);
  CHECK(test::rel_error(hw, gold["wide/dion_half/W2"]) <= 1e-10);
  // Step 3 on the device from the host's checkpoint.
  std::stringstream back;
  save_checkpoint(back, host, hs);
  w.assign(hw);
  load_checkpoint(back, dev, ds);
  CHECK(ds[0].steps == 2);
  CHECK(ds[0].precondition.momentum.size() == 0);
  g.assign(gold["wide/dion_data/G3"]);
  test::Backend::before_step(dev);
  dev.step(w, g, ds[0]);
  CHECK(test::rel_error(to_host(w), gold["wide/dion_half/W3"]) <= 1e-10);
  // A state that make_state did not make (no M or Q in device memory) refuses the file, unchanged.
  std::vector<typename decltype(dev)::State> fresh(1);
  std::stringstream again;
  save_checkpoint(again, host, hs);
  CHECK_THROWS_WITH_AS(load_checkpoint(again, dev, fresh), doctest::Contains("in the live state"), CheckpointError);
  CHECK(fresh[0].moment.empty());
  // A rank other than make_state's is refused before anything is written, as on the host.
  dev.options().precondition.rank_fraction = 1.0;
  const Eigen::MatrixXd before = to_host(w);
  CHECK_THROWS_WITH_AS(dev.step(w, g, ds[0]), doctest::Contains("rank_fraction"), std::invalid_argument);
  CHECK(to_host(w) == before);
  CHECK(ds[0].steps == 3);
}

TEST_CASE(MATOPT_BACKEND ": AdaMuon's device second moment moves through checkpoints to the host and back") {
  using namespace matopt;
  using Opt = AdaMuon<double>;
  const test::Golden& gold = test::Golden::variants();
  const Eigen::MatrixXd w0 = gold["tall/W0"];
  Opt::Options o;
  test::variant_cases::lr_wd(o, 0.02, 0.01);
  o.precondition.heads = 4;
  auto dev = test::Backend::optimizer<Opt>(o);
  DeviceMatrix<double> w(w0.rows(), w0.cols(), Layout::ColMajor), g(w0.rows(), w0.cols(), Layout::ColMajor);
  w.assign(w0);
  std::vector<typename decltype(dev)::State> ds{dev.make_state(w)};
  CHECK(ds[0].moment.size() == std::size_t(w0.size()));  // S in device memory, none in the host State
  CHECK(ds[0].precondition.second_moment.size() == 0);
  g.assign(gold["tall/G1"]);
  test::Backend::before_step(dev);
  dev.step(w, g, ds[0]);
  // Step 2 on the host from the device's checkpoint: the golden W2.
  Opt host(o);
  Eigen::MatrixXd hw = to_host(w);
  std::vector<Opt::State> hs{host.make_state(hw)};
  std::stringstream file;
  save_checkpoint(file, dev, ds);
  CHECK(ds[0].precondition.second_moment.size() == 0);  // staged for the file only
  load_checkpoint(file, host, hs);
  CHECK(hs[0].steps == 1);
  CHECK(hs[0].precondition.second_moment.size() == w0.size());
  CHECK(hs[0].precondition.second_moment.minCoeff() >= 0.0);
  CHECK(hs[0].precondition.second_moment.maxCoeff() > 0.0);
  host.step(hw, Eigen::MatrixXd(gold["tall/G2"]), hs[0]);
  CHECK(test::rel_error(hw, gold["tall/adamuon_heads/W2"]) <= 1e-10);
  // Step 3 on the device from the host's checkpoint.
  std::stringstream back;
  save_checkpoint(back, host, hs);
  w.assign(hw);
  load_checkpoint(back, dev, ds);
  CHECK(ds[0].steps == 2);
  CHECK(ds[0].precondition.second_moment.size() == 0);
  g.assign(gold["tall/G3"]);
  test::Backend::before_step(dev);
  dev.step(w, g, ds[0]);
  CHECK(test::rel_error(to_host(w), gold["tall/adamuon_heads/W3"]) <= 1e-10);
}

TEST_CASE_TEMPLATE(MATOPT_BACKEND ": the variants on zero gradients and zero weights stay finite and zero", T, float,
                   double) {
  using namespace matopt;
  // W = 0 and G = 0 for three steps: every direction is 0 (no 0/0, dion#24), so W stays exactly 0.
  const auto zero_steps = [](auto opt_tag, Index m, Index n, auto configure) {
    using Opt = decltype(opt_tag);
    typename Opt::Options o;
    configure(o);
    auto dev = test::Backend::template optimizer<Opt>(o);
    DeviceMatrix<T> w(m, n, Layout::RowMajor), g(m, n, Layout::RowMajor);
    w.assign(Eigen::Matrix<T, -1, -1>::Zero(m, n));
    g.assign(Eigen::Matrix<T, -1, -1>::Zero(m, n));
    auto st = dev.make_state(w);
    for (int k = 0; k < 3; ++k) dev.step(w, g, st);
    CHECK(to_host(w).isZero(0));
  };
  const auto none = [](auto&) {};
  for (const auto& shape : std::vector<std::pair<Index, Index>>{{6, 4}, {1, 5}, {5, 1}}) {
    CAPTURE(shape.first);
    CAPTURE(shape.second);
    zero_steps(NorMuon<T>{}, shape.first, shape.second, none);
    zero_steps(AdaMuon<T>{}, shape.first, shape.second, none);
    zero_steps(NAMO<T>{}, shape.first, shape.second, none);
    zero_steps(PolarGrad<T>{}, shape.first, shape.second, none);
    zero_steps(TurboMuon<T>{}, shape.first, shape.second, none);
    zero_steps(Dion<T>{}, shape.first, shape.second, none);
    zero_steps(Muon<T>{}, shape.first, shape.second, [](auto& o) {
      o.weight_decay = T(0.1);
      o.scaling.weight_decay_method = WeightDecay::Cautious;
    });
  }
}

TEST_CASE(MATOPT_BACKEND ": QK-clip scales each clipped group's W_q and W_k rows by eta^alpha and eta^(1 - alpha)") {
  using namespace matopt;
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;
  typename test::Backend::Engine engine;
  // GQA: 4 query heads of 3 rows in 2 groups (KV = 2), d_model 5; MHA: KV = 4. Group 0's largest logit 400
  // (eta = 1/4), group 1's 80 (below tau = 100: untouched).
  const std::vector<double> logits{400.0, 120.0, 60.0, 80.0};
  for (const Index kv : {Index(2), Index(4)}) {
    for (const Layout layout : {Layout::RowMajor, Layout::ColMajor}) {
      CAPTURE(kv);
      const std::string order = matopt::detail::layout_name(layout);  // (a char* captures as its address)
      CAPTURE(order);
      const Mat q0 = test::randn<Mat>(12, 5, 1), k0 = test::randn<Mat>(3 * kv, 5, 2);
      DeviceMatrix<double> q(12, 5, layout), k(3 * kv, 5, layout);
      q.assign(q0);
      k.assign(k0);
      QkClipOptions o;
      o.alpha = 0.25;
      Mat q_want = q0, k_want = k0;
      const Index per_group = 4 / kv;
      Index clipped = 0;
      for (Index grp = 0; grp < kv; ++grp) {
        double s = 0;
        for (Index h = grp * per_group; h < (grp + 1) * per_group; ++h) s = std::max(s, logits[std::size_t(h)]);
        if (s <= o.tau) continue;
        ++clipped;
        q_want.middleRows(grp * per_group * 3, per_group * 3) *= std::pow(o.tau / s, 0.25);
        k_want.middleRows(grp * 3, 3) *= std::pow(o.tau / s, 0.75);
      }
      CHECK(qk_clip(engine, q.view(), k.view(), logits, kv, o) == clipped);
      CHECK(test::rel_error(to_host(q), q_want) <= 1e-15);
      CHECK(test::rel_error(to_host(k), k_want) <= 1e-15);
      // Bad input: an error naming it, nothing scaled.
      CHECK_THROWS_WITH_AS(qk_clip(engine, q.view(), k.view(), {1e9, 1.0, 1.0}, 1, o), doctest::Contains("W_q"),
                           std::invalid_argument);
      CHECK_THROWS_WITH_AS(qk_clip(engine, q.view(), k.view(), {1e9, std::nan(""), 1.0, 1.0}, kv, o),
                           doctest::Contains("max_logits[1]"), std::invalid_argument);
      CHECK(test::rel_error(to_host(q), q_want) <= 1e-15);
    }
  }
}

TEST_CASE(MATOPT_BACKEND ": a scale lr s(m, n) that is not finite throws before a second moment or W changes") {
  using namespace matopt;
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
  // NorMuon on 16 x 4: s = sqrt(16 / 4) = 2, so lr = 3e38 gives lr s = 6e38 > FLT_MAX; per head (2 blocks of 8 x 4)
  // too. The host optimizer's check runs on the device step before the moment's S or W is written.
  for (const int heads : {1, 2}) {
    CAPTURE(heads);
    NorMuon<float>::Options o;
    o.lr = 3e38f;
    o.precondition.heads = heads;
    auto dev = test::Backend::optimizer<NorMuon<float>>(o);
    const Mat w0 = test::randn<Mat>(16, 4, 1);
    DeviceMatrix<float> w(16, 4, Layout::ColMajor), g(16, 4, Layout::ColMajor);
    w.assign(w0);
    g.assign(Mat(test::randn<Mat>(16, 4, 2)));
    auto st = dev.make_state(w);
    CHECK_THROWS_WITH_AS(dev.step(w, g, st), doctest::Contains("is not finite"), std::invalid_argument);
    CHECK(to_host(w) == w0);
    CHECK(st.steps == 0);
    CHECK(st.precondition.second_moment.isZero(0));
  }
}

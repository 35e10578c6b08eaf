// SPDX-License-Identifier: MIT
// The matrix presets, Newton–Schulz at matrix level and AdamW against golden data from PyTorch
// (scripts/make_golden.py, float64, sharing no code with the library): W after steps 1, 2 and 3 for both storage
// orders, float and double. The update W_k - W_0 is checked too, so the comparison is not dominated by W_0.
// Shapes: tall 20x12 and wide 12x28 (inputs stored); gram_tall 48x10 and gram_wide 10x44 (matopt picks Gram NS
// there), row 1x9, col 9x1, and tiles 270x300 (several 256-tiles of the Eigen engine), whose inputs come from a
// splitmix64 generator written here and in the script, and whose results are compared through stored sketches.
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <matopt/adamw.hpp>
#include <matopt/facade/any_optimizer.hpp>
#include <matopt/presets.hpp>

#include "test_support.hpp"

using namespace matopt;
using namespace matopt::test;

namespace {

// Relative Frobenius error allowed against the float64 reference, measured on these inputs (MATOPT_GOLDEN_REPORT=1
// prints every error) with a margin of at least 2.5: largest seen, W / update, for double 5.5e-16 / 1.7e-14 (the
// optimizers) and 4.5e-14 / 5.9e-14 (NS at matrix level, where W is the direction itself); for float 3.6e-7 /
// 1.9e-5 (Newton–Schulz presets: five iterations amplify rounding, and the update carries W0's float rounding)
// and 1.3e-7 / 7.1e-6 (RMNP, ColNorm), 1.9e-5 / 2.9e-5 for NS at matrix level (plain and Gram). A decoupled weight
// decay applied after the step instead of before it (an update error of lr * wd = 2e-4) fails the float checks as
// well as the double ones; a wrong NS eps (1e-7 against 1e-6) only the double ones.
struct Tolerance {
  double w, update;
};
enum class Kind { NewtonSchulz, Normalize, Direction };
template <class T>
Tolerance tolerance(Kind kind) {
  if constexpr (std::is_same_v<T, float>) {
    if (kind == Kind::Direction) return {5e-5, 1e-4};
    return kind == Kind::NewtonSchulz ? Tolerance{1e-6, 5e-5} : Tolerance{1e-6, 2e-5};
  }
  return kind == Kind::Direction ? Tolerance{2e-13, 2e-13} : Tolerance{1e-14, 1e-13};
}

/// splitmix64 (Steele, Lea and Flood 2014), as scripts/make_golden.py writes it: uniform doubles in [-1, 1) from
/// the top 53 bits, so both sides produce the same inputs exactly.
struct SplitMix64 {
  std::uint64_t x;
  std::uint64_t next() {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  Eigen::MatrixXd uniform(Index m, Index n) {
    Eigen::MatrixXd out(m, n);
    for (Index i = 0; i < m; ++i)
      for (Index j = 0; j < n; ++j) out(i, j) = double(next() >> 11) * 0x1.0p-53 * 2 - 1;
    return out;
  }
};

struct Inputs {
  Eigen::MatrixXd w0;
  std::array<Eigen::MatrixXd, 3> g;
  Eigen::VectorXd z, y;  // sketch vectors (tiles only)
  bool sketched = false;
};

const Inputs& inputs(const std::string& shape) {
  static std::map<std::string, Inputs> cache;
  auto it = cache.find(shape);
  if (it != cache.end()) return it->second;
  Inputs in;
  if (shape == "tall" || shape == "wide") {
    const Golden& gold = Golden::get();
    in.w0 = gold[shape + "/W0"];
    for (int k = 0; k < 3; ++k) in.g[std::size_t(k)] = gold[shape + "/G" + std::to_string(k + 1)];
  } else {
    const std::map<std::string, std::pair<Index, Index>> shapes = {
        {"gram_tall", {48, 10}}, {"gram_wide", {10, 44}}, {"row", {1, 9}}, {"col", {9, 1}}, {"tiles", {270, 300}}};
    const auto [m, n] = shapes.at(shape);
    SplitMix64 rng{std::uint64_t(m * 1000 + n)};
    in.w0 = rng.uniform(m, n) * std::sqrt(3.0 / double(n));
    for (auto& g : in.g) g = rng.uniform(m, n);
    const Eigen::MatrixXd a = rng.uniform(m, 1);  // (in this order, as the script draws them)
    in.g[1] += 2.0 * a * rng.uniform(1, n);
    in.z = rng.uniform(n, 1);
    in.y = rng.uniform(m, 1);
    in.sketched = shape == "tiles";
  }
  return cache.emplace(shape, std::move(in)).first->second;
}

/// `got` (W_k, or a direction with base 0) against the golden `name`: the whole matrix and got - base, or for the
/// tiles shape the stored sketches of them.
template <class T>
void compare(const Inputs& in, const std::string& name, const Eigen::MatrixXd& got, const Eigen::MatrixXd& base,
             Tolerance tol, bool rows_stored) {
  const Golden& gold = Golden::get();
  CAPTURE(name);
  // MATOPT_GOLDEN_REPORT=1 prints every error (how the tolerances above were measured).
  static const bool report = std::getenv("MATOPT_GOLDEN_REPORT") != nullptr;
  const auto check = [&](const char* what, double error, double limit) {
    if (report) {
      char e[32];
      std::snprintf(e, sizeof e, "%.3g", error);
      const std::string line = name + " " + what + (sizeof(T) == 4 ? " float " : " double ") + e;
      MESSAGE(line);
    }
    CHECK_MESSAGE(error <= limit, what);
  };
  if (!in.sketched) {
    const Eigen::MatrixXd& want = gold[name];
    check("W", rel_error(got, want), tol.w);
    check("update", rel_error((got - base).eval(), (want - base).eval()), tol.update);
    return;
  }
  const Eigen::MatrixXd delta = got - base;
  check("sketch", rel_error((delta * in.z).eval(), gold[name + "/sketch"]), tol.update);
  check("sketchT", rel_error((delta.transpose() * in.y).eval(), gold[name + "/sketchT"]), tol.update);
  const double norm = gold[name + "/norm"](0, 0);
  check("norm", std::abs(delta.norm() - norm) / norm, tol.update);
  if (rows_stored) {
    Eigen::MatrixXd rows(3, got.cols());
    rows << got.row(0), got.row(256), got.row(269);
    check("W rows", rel_error(rows, gold[name + "/rows"]), tol.w);
  }
}

/// The golden runs' hyper-parameters: lr 0.02, beta 0.95 with Nesterov, weight decay 0.01.
template <class Opt>
typename Opt::Options golden_options() {
  using T = typename Opt::Scalar;
  typename Opt::Options o;
  o.lr = T(0.02);
  o.momentum = T(0.95);
  o.nesterov = true;
  o.weight_decay = T(0.01);
  return o;
}

template <class Opt, class Mat>
void check_trajectory(const std::string& shape, const std::string& name, const typename Opt::Options& o,
                      Kind kind) {
  using T = typename Opt::Scalar;
  const Inputs& in = inputs(shape);
  Opt opt(o);
  Mat w = in.w0.cast<T>();
  auto state = opt.make_state(w);
  for (int k = 1; k <= 3; ++k) {
    CAPTURE(k);
    opt.step(w, in.g[std::size_t(k - 1)].cast<T>().eval(), state);
    compare<T>(in, shape + "/" + name + "/W" + std::to_string(k), w.template cast<double>(), in.w0,
               tolerance<T>(kind), k == 3);
  }
}

template <class Opt>
void check_orders(const std::string& shape, const std::string& name, const typename Opt::Options& o,
                  Kind kind) {
  using T = typename Opt::Scalar;
  CAPTURE(shape);
  check_trajectory<Opt, RowMat<T>>(shape, name, o, kind);
  check_trajectory<Opt, ColMat<T>>(shape, name, o, kind);
}

// The tiles shape's Newton–Schulz runs cost about 0.7 GFLOP each: at -O0 (CI's sanitizer stage) it is checked for
// one optimizer, type and storage order; the optimized builds check all of them.
#if defined(__OPTIMIZE__)
constexpr bool kOptimized = true;
#else
constexpr bool kOptimized = false;
#endif

const std::vector<std::string>& small_shapes() {
  static const std::vector<std::string> s = {"tall", "wide", "gram_tall", "gram_wide", "row", "col"};
  return s;
}

template <template <class> class Preset, class T>
void check_preset(const std::string& name, Kind kind,
                  void (*configure)(typename Preset<T>::Options&) = nullptr) {
  auto o = golden_options<Preset<T>>();
  if (configure) configure(o);
  for (const auto& shape : small_shapes()) check_orders<Preset<T>>(shape, name, o, kind);
  if (kOptimized) check_orders<Preset<T>>("tiles", name, o, kind);
}

}  // namespace

TEST_CASE_TEMPLATE("golden: Muon (KellerJordan/Muon, NS5 in float64)", T, float, double) {
  check_preset<Muon, T>("muon", Kind::NewtonSchulz);
  // At -O0 the one tiles run: Muon, double, row-major (the tiled products under the sanitizers).
  if (!kOptimized && std::is_same_v<T, double>)
    check_trajectory<Muon<T>, RowMat<T>>("tiles", "muon", golden_options<Muon<T>>(), Kind::NewtonSchulz);
}
TEST_CASE_TEMPLATE("golden: MoonlightMuon (Sum momentum, 0.2 sqrt(max(m, n)))", T, float, double) {
  check_preset<MoonlightMuon, T>("moonlight_muon", Kind::NewtonSchulz);
}
TEST_CASE_TEMPLATE("golden: RMNP", T, float, double) { check_preset<RMNP, T>("rmnp", Kind::Normalize); }
TEST_CASE_TEMPLATE("golden: ColNorm", T, float, double) { check_preset<ColNorm, T>("colnorm", Kind::Normalize); }

TEST_CASE_TEMPLATE("golden: OrScale (Polar Express NS, trust ratio clipped to [0.5, 1.5])", T, float, double) {
  check_preset<OrScale, T>("orscale", Kind::NewtonSchulz);
}
TEST_CASE_TEMPLATE("golden: OrScale-LM (calibrated at the first step, clip [0.1, 5])", T, float, double) {
  check_preset<OrScale, T>("orscale_lm", Kind::NewtonSchulz, [](typename OrScale<T>::Options& o) {
    o.scaling.calibrate = true;
    o.scaling.clip_min = 0.1;
    o.scaling.clip_max = 5.0;
  });
}
TEST_CASE_TEMPLATE("golden: OrScale with the clip acting (clip_max 1 below every ratio here)", T, float, double) {
  check_preset<OrScale, T>("orscale_clip", Kind::NewtonSchulz, [](typename OrScale<T>::Options& o) { o.scaling.clip_max = 1.0; });
}

// Newton–Schulz of G1 alone (Orthogonalize at matrix level), plain and Gram, whatever the shape: both compute the
// same polynomial of X, so both equal the script's plain iteration.
TEST_CASE_TEMPLATE("golden: Newton-Schulz at matrix level (Jordan and Polar Express, plain and Gram)", T, float, double) {
  const auto run = [](auto schedule, const std::string& name, const std::string& shape, NsVariant variant) {
    using P = Orthogonalize<NewtonSchulz<decltype(schedule)>>;
    const Inputs& in = inputs(shape);
    typename P::Options o;
    o.variant = variant;
    CAPTURE(int(variant));
    const Eigen::MatrixXd zero = Eigen::MatrixXd::Zero(in.w0.rows(), in.w0.cols());
    const RowMat<T> g = in.g[0].cast<T>();
    compare<T>(in, shape + "/" + name, precondition<P, T>(g, o).template cast<double>(), zero,
               tolerance<T>(Kind::Direction), true);
    const ColMat<T> gc = in.g[0].cast<T>();
    compare<T>(in, shape + "/" + name, precondition<P, T>(gc, o).template cast<double>(), zero,
               tolerance<T>(Kind::Direction), true);
  };
  // (the tiles shape in the optimized builds only: at -O0 the Muon case above runs the tiled products)
  std::vector<std::string> shapes = small_shapes();
  if (kOptimized) shapes.push_back("tiles");
  for (const auto& shape : shapes) {
    CAPTURE(shape);
    for (const NsVariant v : {NsVariant::Plain, NsVariant::Gram, NsVariant::Auto}) {
      run(schedules::Jordan{}, "ns_jordan", shape, v);
      run(schedules::PolarExpress{}, "ns_polar_express", shape, v);
    }
  }
}

TEST_CASE_TEMPLATE("golden: AdamW (torch.optim.AdamW)", T, float, double) {
  const Golden& gold = Golden::get();
  typename AdamW<T>::Options o;
  o.lr = T(1e-2);
  o.weight_decay = T(0.1);
  AdamW<T> opt(o);
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-13;
  for (const std::string name : {"vector", "matrix"}) {
    CAPTURE(name);
    const std::string p = "adamw/" + name + "/";
    RowMat<T> w = gold[p + "W0"].cast<T>();
    auto st = opt.make_state(w);
    for (int k = 1; k <= 3; ++k) {
      opt.step(w, gold[p + "G" + std::to_string(k)].cast<T>(), st);
      CHECK(rel_error(w, gold[p + "W" + std::to_string(k)]) <= tol);
    }
    // A true vector type and a column-major matrix give the same numbers.
    Eigen::Matrix<T, -1, -1> wc = gold[p + "W0"].cast<T>();
    auto sc = opt.make_state(wc);
    for (int k = 1; k <= 3; ++k) opt.step(wc, gold[p + "G" + std::to_string(k)].cast<T>(), sc);
    CHECK(rel_error(wc, gold[p + "W3"]) <= tol);
  }
}

// The facade's names build the typed presets (the typed ones are checked against the golden data above): every
// name other than issue 20's (test_variants.cpp) steps the same bits on the same inputs, with non-default options
// set once by key and once by field, on a tall and a wide (Gram NS) shape. Here because this file instantiates the
// typed presets already.
TEST_CASE_TEMPLATE("facade: every preset's name builds its typed preset (bitwise, options by key)", T, float,
                   double) {
  const auto same = [](AnyOptimizer<T> any, auto typed) {
    for (const auto& shape : {std::pair<Index, Index>{9, 5}, {4, 21}}) {
      const Index m = shape.first, n = shape.second;
      CAPTURE(m);
      RowMat<T> a = randn(m, n, 3).template cast<T>(), b = a;
      auto sa = any.make_state(view(a));
      auto sb = typed.make_state(b);
      for (unsigned k = 0; k < 3; ++k) {
        const RowMat<T> g = randn(m, n, 10 + k).template cast<T>();
        any.step(view(a), view(g), sa);
        typed.step(b, g, sb);
      }
      CHECK(a == b);
      CHECK(any.name() == typed.name());
    }
  };
  Muon<T> muon;
  muon.options().lr = T(0.03);
  muon.options().precondition.schedule.steps = 4;
  same(make_optimizer<T>("muon", {{"lr", "0.03"}, {"ns_steps", "4"}}), muon);
  MoonlightMuon<T> moonlight;
  moonlight.options().weight_decay = T(0.2);
  same(make_optimizer<T>("moonlight_muon", {{"weight_decay", "0.2"}}), moonlight);
  RMNP<T> rmnp;
  rmnp.options().momentum = T(0.9);
  same(make_optimizer<T>("rmnp", {{"momentum", "0.9"}}), rmnp);
  ColNorm<T> colnorm;
  colnorm.options().nesterov = false;
  same(make_optimizer<T>("colnorm", {{"nesterov", "false"}}), colnorm);
  OrScale<T> orscale;
  orscale.options().scaling.calibrate = true;
  orscale.options().scaling.clip_max = 1.2;
  orscale.options().weight_decay = T(0.01);
  same(make_optimizer<T>("orscale", {{"calibrate", "true"}, {"clip_max", "1.2"}, {"weight_decay", "0.01"}}), orscale);
  typename AdamW<T>::Options ao;
  ao.beta2 = T(0.99);
  ao.weight_decay = T(0.1);
  same(make_optimizer<T>("adamw", {{"beta2", "0.99"}, {"weight_decay", "0.1"}}), AdamW<T>(ao));
}

// Muon, RMNP, ColNorm and AdamW against golden data from PyTorch (scripts/make_golden.py, float64):
// updated weights after steps 1 and 3 within 1e-5 (float) / 1e-10 (double) relative Frobenius error, for
// both storage orders. The update W_k - W_0 is checked too, so the comparison is not dominated by W_0.
#include <string>

#include <doctest/doctest.h>

#include <matopt/adamw.hpp>
#include <matopt/presets.hpp>

#include "test_support.hpp"

using namespace matopt;
using namespace matopt::test;

namespace {
template <class T>
constexpr double golden_tol() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-10;
}

template <class Opt, class Mat>
void check_against_golden(const std::string& shape, const std::string& name) {
  using T = typename Opt::Scalar;
  const Golden& gold = Golden::get();
  typename Opt::Options o;
  o.lr = T(0.02);
  o.momentum = T(0.95);
  o.nesterov = true;
  o.weight_decay = T(0.01);
  Opt opt(o);
  const Eigen::MatrixXd w0 = gold[shape + "/W0"];
  Mat w = w0.cast<T>();
  auto state = opt.make_state(w);
  for (int k = 1; k <= 3; ++k) {
    const Mat g = gold[shape + "/G" + std::to_string(k)].cast<T>();
    opt.step(w, g, state);
    if (k == 2) continue;
    const Eigen::MatrixXd want = gold[shape + "/" + name + "/W" + std::to_string(k)];
    CAPTURE(k);
    CHECK(rel_error(w, want) <= golden_tol<T>());
    CHECK(rel_error((w.template cast<double>() - w0).eval(), (want - w0).eval()) <= 100 * golden_tol<T>());
  }
}

template <class T, template <class> class Opt>
void check_all(const std::string& name) {
  for (const std::string shape : {"tall", "wide"}) {
    CAPTURE(shape);
    check_against_golden<Opt<T>, RowMat<T>>(shape, name);
    check_against_golden<Opt<T>, ColMat<T>>(shape, name);
  }
}
}  // namespace

TEST_CASE_TEMPLATE("golden: Muon (KellerJordan/Muon, NS5 in float64)", T, float, double) {
  check_all<T, Muon>("muon");
}
TEST_CASE_TEMPLATE("golden: RMNP", T, float, double) { check_all<T, RMNP>("rmnp"); }
TEST_CASE_TEMPLATE("golden: ColNorm", T, float, double) { check_all<T, ColNorm>("colnorm"); }

TEST_CASE_TEMPLATE("golden: AdamW (torch.optim.AdamW)", T, float, double) {
  const Golden& gold = Golden::get();
  typename AdamW<T>::Options o;
  o.lr = T(1e-2);
  o.weight_decay = T(0.1);
  AdamW<T> opt(o);
  for (const std::string name : {"vector", "matrix"}) {
    CAPTURE(name);
    const std::string p = "adamw/" + name + "/";
    RowMat<T> w = gold[p + "W0"].cast<T>();
    auto st = opt.make_state(w);
    for (int k = 1; k <= 3; ++k) {
      opt.step(w, gold[p + "G" + std::to_string(k)].cast<T>(), st);
      CHECK(rel_error(w, gold[p + "W" + std::to_string(k)]) <= golden_tol<T>());
    }
    // A true vector type and a column-major matrix give the same numbers.
    Eigen::Matrix<T, -1, -1> wc = gold[p + "W0"].cast<T>();
    auto sc = opt.make_state(wc);
    for (int k = 1; k <= 3; ++k) opt.step(wc, gold[p + "G" + std::to_string(k)].cast<T>(), sc);
    CHECK(rel_error(wc, gold[p + "W3"]) <= golden_tol<T>());
  }
}

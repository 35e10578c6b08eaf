// SPDX-License-Identifier: MIT
// Must not compile: a scaling whose update has the signature of before the engine operations (no engine), so
// that the static_assert gives its author the one every optimizer calls (CTest policy_checks.scaling_update).
// Compiled with -DMATOPT_ENGINE_UPDATE, the same scaling written with the engine's operations compiles and steps
// (CTest policy_checks.scaling_update_compile, the control).
#include <matopt/matopt.hpp>

struct HalfStep {  // W <- W - (lr / 2) D
  struct Options {};
  template <class T>
  struct State {
    template <class F>
    void fields(F&&) {}
  };
  static constexpr const char* name() { return "HalfStep"; }
  template <class O, class D>
  static void describe(O&, D&) {}
  static double factor(const Options&, matopt::Index, matopt::Index) { return 0.5; }
  template <class T>
  static T effective_lr(const Options&, const State<T>&, T lr, matopt::Index, matopt::Index) {
    return lr / 2;
  }
#if defined(MATOPT_ENGINE_UPDATE)
  template <class T, class Engine, class W, class D, class G>
  static void update(Engine& e, W& w, const D& d, const G&, State<T>&, const Options&, T lr, T) {
    e.update(w, T(1), lr / 2, d);
  }
#else
  template <class T, class WMat, class DExpr, class GMat>
  static void update(WMat& w, const DExpr& d, const GMat&, State<T>&, const Options&, T lr, T) {
    w -= (lr / 2) * d;
  }
#endif
};

int main() {
  matopt::Optimizer<float, matopt::Identity, matopt::NoMomentum, HalfStep> opt;
  Eigen::MatrixXf w = Eigen::MatrixXf::Zero(4, 3), g = Eigen::MatrixXf::Ones(4, 3);
  auto state = opt.make_state(w);
  opt.step(w, g, state);
  return 0;
}

// SPDX-License-Identifier: MIT
// Must not compile: a second moment whose apply has the signature of before the engine operations (no engine), so
// that the static_assert gives its author the one every optimizer calls (CTest policy_checks.moment_apply).
// Compiled with -DMATOPT_ENGINE_MOMENT, the same moment written with the engine's operations compiles and steps
// (CTest policy_checks.moment_apply_compile, the control).
#include <matopt/matopt.hpp>

struct Halve {  // D' = D / 2, no state
  struct Options {};
  static constexpr const char* name() { return "Halve"; }
  static constexpr bool sign_input = false;
  template <class O, class D>
  static void describe(O&, D&) {}
  static matopt::Index state_size(matopt::Index, matopt::Index) { return 0; }
  static matopt::Index workspace_size(matopt::Index, matopt::Index) { return 0; }
#if defined(MATOPT_ENGINE_MOMENT)
  static constexpr bool engine_state = false;
  static constexpr bool reads_input_norm = false;
  template <class T, class E, class D, class GNorm, class UNorm, class Sink>
  static void apply(E& e, const D& d, const Options&, T*, T*, GNorm&&, UNorm&&, Sink&& sink) {
    e.scaled(d, T(0.5), sink);
  }
#else
  template <class T, class DExpr, class UExpr, class GMat, class Sink>
  static void apply(const DExpr& d, const UExpr&, const GMat&, const Options&, T*, T*, Sink&& sink) {
    sink(d * T(0.5));
  }
#endif
};

int main() {
  matopt::Optimizer<float, matopt::SecondMoment<matopt::Identity, Halve>, matopt::NoMomentum, matopt::Static<>> opt;
  Eigen::MatrixXf w = Eigen::MatrixXf::Zero(4, 3), g = Eigen::MatrixXf::Ones(4, 3);
  auto state = opt.make_state(w);
  opt.step(w, g, state);
  return 0;
}

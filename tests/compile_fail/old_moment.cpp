// SPDX-License-Identifier: MIT
// Must not compile: a second moment whose apply has the signature of before the engine operations (no engine), so
// that the static_assert gives its author the one every optimizer calls (CTest policy_checks.moment_apply).
// Compiled with -DMATOPT_ENGINE_MOMENT, the same moment written with the engine's operations compiles and steps
// (CTest policy_checks.moment_apply_compile, the control). With -DMATOPT_UNDECLARED_NORM as well, it calls u_norm()
// without declaring reads_input_norm, and the build stops naming the flag (CTest policy_checks.moment_input_norm).
// With -DMATOPT_UNDECLARED_STATE instead, it keeps S for the engine's moment_normalized without declaring
// engine_state, and the build stops naming the flag (CTest policy_checks.moment_engine_state).
#include <matopt/matopt.hpp>
#if defined(MATOPT_UNDECLARED_STATE)
#include <matopt/backend/thrust.hpp>
#endif

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
  static void apply(E& e, const D& d, const Options&, [[maybe_unused]] T* s, T*, GNorm&&,
                    [[maybe_unused]] UNorm&& u_norm, Sink&& sink) {
#if defined(MATOPT_UNDECLARED_NORM)
    e.scaled(d, T(0.5) * u_norm(), sink);
#elif defined(MATOPT_UNDECLARED_STATE)
    e.moment_normalized(d, s, T(0.5), T(1e-8), sink);  // S: engine_state undeclared (false), so host memory
#else
    e.scaled(d, T(0.5), sink);
#endif
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
#if defined(MATOPT_UNDECLARED_STATE)
  matopt::DeviceOptimizer<decltype(opt), matopt::ThrustEngine> device;
  matopt::DeviceMatrix<float> dw(4, 3), dg(4, 3);
  auto device_state = device.make_state(dw);
  device.step(dw, dg, device_state);
#endif
  return 0;
}

// The device cases shared with the CUDA suite (tests/device_cases.hpp: ExactPolar, checkpoints moved between
// the host and device optimizers, spectral diagnostics of device matrices) on the Thrust backend. A
// translation unit of its own: the SVD-based cases are slow to compile, and this one builds next to
// test_thrust.cpp (the Thrust-on-CUDA suite, tests/gpu, compiles test_thrust.cpp only; the CUDA engine's
// suite runs these cases).

#include <matopt/backend/thrust.hpp>
#include <matopt/matopt.hpp>

namespace matopt::test {
/// The backend of the shared device cases.
struct Backend {
  using Engine = ThrustEngine;
  template <class Opt>
  static DeviceOptimizer<Opt, Engine> optimizer(const typename Opt::Options& o) {
    return DeviceOptimizer<Opt, Engine>(o);
  }
  template <class Dev>
  static void before_step(Dev&) {}
};
}  // namespace matopt::test

#define MATOPT_BACKEND "thrust backend"
#include "device_cases.hpp"

// SPDX-License-Identifier: MIT
// Must not compile: a preconditioner without `option_keys` and `validate`, composed into an Optimizer. CTest
// policy_checks.missing_members compiles it (-fsyntax-only) and expects the static_asserts' messages, which tell the
// policy's author what to add (core/detail/traits.hpp, check_preconditioner).
#include <matopt/matopt.hpp>

struct HalfIdentity {  // D = U / 2: every member of a preconditioner but `option_keys` and `validate`
  struct Options {};
  template <class T>
  struct Workspace {
    std::size_t bytes() const { return 0; }
  };
  template <class T>
  static void reserve(Workspace<T>&, const Options&, matopt::Index, matopt::Index) {}
  static bool set_option(Options&, std::string_view, std::string_view) { return false; }
  static constexpr const char* name() { return "HalfIdentity"; }
  static double cost(matopt::Index m, matopt::Index n) { return matopt::elementwise_cost(m, n); }
  template <class T, class UExpr, class Sink>
  static void apply(const UExpr& u, const Options&, Workspace<T>&, Sink&& sink) {
    sink(u * T(0.5));
  }
};

int main() {
  matopt::Optimizer<float, HalfIdentity, matopt::NoMomentum, matopt::Static<>> opt;
  Eigen::MatrixXf w = Eigen::MatrixXf::Zero(4, 3), g = Eigen::MatrixXf::Ones(4, 3);
  auto state = opt.make_state(w);
  opt.step(w, g, state);
  return 0;
}

// SPDX-License-Identifier: MIT
// Must not compile: a preconditioner that does not declare its planner cost, wrapped in AnyOptimizer. CTest
// policy_checks.missing_cost compiles it (-fsyntax-only) and expects the static_assert's message, which tells the
// policy's author what to add.
#include <matopt/facade/any_optimizer.hpp>

struct HalfIdentity {  // D = U / 2: every member of a preconditioner but `cost`
  struct Options {};
  template <class T>
  struct Workspace {
    std::size_t bytes() const { return 0; }
  };
  template <class T>
  static void reserve(Workspace<T>&, const Options&, matopt::Index, matopt::Index) {}
  static void validate(const Options&, std::string_view) {}
  static bool set_option(Options&, std::string_view, std::string_view) { return false; }
  static constexpr const char* option_keys() { return ""; }
  static constexpr const char* name() { return "HalfIdentity"; }
  template <class T, class UExpr, class Sink>
  static void apply(const UExpr& u, const Options&, Workspace<T>&, Sink&& sink) {
    sink(u * T(0.5));
  }
};

int main() {
  matopt::AnyOptimizer<float> any{matopt::Optimizer<float, HalfIdentity, matopt::NoMomentum, matopt::Static<>>{}};
  return any.cost(4, 3) > 0 ? 0 : 1;
}

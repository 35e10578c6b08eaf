// SPDX-License-Identifier: MIT
// Must not compile: a preconditioner missing members, so that the static_asserts' messages tell its author what to
// add. CTest compiles it (-fsyntax-only) with each define below and expects each message:
//   policy_checks.missing_cost     -DMATOPT_DROP_COST: no `cost`, wrapped in AnyOptimizer (distributed/plan.hpp);
//   policy_checks.missing_members  -DMATOPT_DROP_MEMBERS: no `describe` (its options), in an Optimizer
//                                  (core/detail/traits.hpp, check_preconditioner);
//   policy_checks.state_fields     -DMATOPT_STATE_WITHOUT_FIELDS: a State<T> without `fields`, in an Optimizer;
//   policy_checks.init_state       -DMATOPT_BAD_INIT_STATE: an init_state no optimizer calls (a parameter missing);
//   policy_checks.check_state      -DMATOPT_BAD_CHECK_STATE: a check_state no optimizer calls (no `where`).
//   policy_checks.engine_form      -DMATOPT_ON_DEVICE: stepped by a DeviceOptimizer without an engine form
//                                  (reserve_on / apply_on: core/detail/engine_form.hpp);
//   policy_checks.inner_engine_form -DMATOPT_IN_COMPOSITE: wrapped by Adaptive, which needs its engine form;
//   policy_checks.splits_rows      -DMATOPT_SPLITS_ROWS: row blocks declared by a host form (they are stepped
//                                  through an engine form: core/detail/engine_step.hpp).
//   policy_checks.fused_step       -DMATOPT_FUSED_STEP: a preconditioner declaring the former fused-step opt-in
//                                  (the one-pass step is now the engines' fused_normalize_rows; it would be ignored).
//   policy_checks.apply_on         -DMATOPT_BAD_APPLY_ON: an engine form whose apply_on the engine step cannot call
//                                  (a parameter missing): named with the signature, not a template error inside.
// Compiled with -DMATOPT_GOOD_STATE (the same State with both hooks as the optimizers call them), it compiles:
// policy_checks.state_hooks_compile.
#include <matopt/matopt.hpp>
#if defined(MATOPT_ON_DEVICE)
#include <matopt/backend/thrust.hpp>
#endif

struct HalfIdentity {  // D = U / 2
#if defined(MATOPT_SPLITS_ROWS)
  struct Options : matopt::RowBlocks {};
  static constexpr bool splits_rows = true;
#else
  struct Options {};
#endif
#if defined(MATOPT_FUSED_STEP)
  static constexpr bool has_fused_step = true;
#endif
#if defined(MATOPT_BAD_APPLY_ON)  // an engine form only, whose apply_on lacks `layout`
  template <class WS>
  static void reserve_on(WS& ws, const Options&, matopt::Index m, matopt::Index n) {
    ws.grow(ws.u, m * n);
  }
  template <class E, class WS, class FormU>
  static matopt::detail::Strided<typename WS::Scalar> apply_on(E& e, WS& ws, const Options&, matopt::Index m,
                                                               matopt::Index n, FormU&& form_u) {
    const auto u = matopt::detail::form_in_workspace(ws, m, n, matopt::Layout::ColMajor, form_u);
    e.scale(u, typename WS::Scalar(0.5));
    return u;
  }
#else
  template <class T>
  struct Workspace {
    std::size_t bytes() const { return 0; }
  };
  template <class T>
  static void reserve(Workspace<T>&, const Options&, matopt::Index, matopt::Index) {}
#endif
  static constexpr const char* name() { return "HalfIdentity"; }
#if !defined(MATOPT_DROP_MEMBERS)
  template <class O, class D>
  static void describe(O&, D&) {}
#endif
#if defined(MATOPT_STATE_WITHOUT_FIELDS)
  template <class T>
  struct State {
    T scale = T(1);
  };
#endif
#if !defined(MATOPT_DROP_COST)
  static double cost(matopt::Index m, matopt::Index n) { return matopt::elementwise_cost(m, n); }
#endif
#if defined(MATOPT_BAD_INIT_STATE) || defined(MATOPT_BAD_CHECK_STATE) || defined(MATOPT_GOOD_STATE)
  template <class T>
  struct State {
    T scale = T(1);
    template <class F>
    void fields(F&& f) {
      f("scale", scale);
    }
  };
  template <class T, class UExpr, class Sink>
  static void apply(const UExpr& u, const Options&, Workspace<T>&, State<T>& s, Sink&& sink) {
    sink(u * s.scale);
  }
#if defined(MATOPT_BAD_INIT_STATE)
  template <class T>
  static void init_state(State<T>& s, const Options&, matopt::Index) {
    s.scale = T(0.5);
  }
#else
  template <class T>
  static void init_state(State<T>& s, const Options&, matopt::Index, matopt::Index) {
    s.scale = T(0.5);
  }
#endif
#if defined(MATOPT_BAD_CHECK_STATE)
  template <class T>
  static void check_state(const State<T>&, const Options&, matopt::Index, matopt::Index) {}
#else
  template <class T>
  static void check_state(const State<T>&, const Options&, matopt::Index, matopt::Index, std::string_view) {}
#endif
#elif !defined(MATOPT_BAD_APPLY_ON)
  template <class T, class UExpr, class Sink>
  static void apply(const UExpr& u, const Options&, Workspace<T>&, Sink&& sink) {
    sink(u * T(0.5));
  }
#endif
};

int main() {
  using Opt = matopt::Optimizer<float, HalfIdentity, matopt::NoMomentum, matopt::Static<>>;
#if defined(MATOPT_DROP_COST)
  matopt::AnyOptimizer<float> any{Opt{}};
  return any.cost(4, 3) > 0 ? 0 : 1;
#elif defined(MATOPT_IN_COMPOSITE)
  matopt::Optimizer<float, matopt::Adaptive<HalfIdentity, matopt::Orthogonalize<>>, matopt::NoMomentum,
                    matopt::Static<>>
      opt;
  Eigen::MatrixXf w = Eigen::MatrixXf::Zero(4, 3), g = Eigen::MatrixXf::Ones(4, 3);
  auto state = opt.make_state(w);
  opt.step(w, g, state);
  return 0;
#elif defined(MATOPT_ON_DEVICE)
  matopt::DeviceOptimizer<Opt, matopt::ThrustEngine> opt;
  matopt::DeviceMatrix<float> w(4, 3), g(4, 3);
  auto state = opt.make_state(w);
  opt.step(w, g, state);
  return 0;
#else
  Opt opt;
  Eigen::MatrixXf w = Eigen::MatrixXf::Zero(4, 3), g = Eigen::MatrixXf::Ones(4, 3);
  auto state = opt.make_state(w);
  opt.step(w, g, state);
  return 0;
#endif
}

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: compile-time facts about Eigen matrix arguments and policies (namespace detail only).
// Compile-time facts about Eigen matrix arguments.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "matopt/config.hpp"
#include "matopt/core/detail/config_check.hpp"
#include "matopt/core/detail/parallel.hpp"
#include "matopt/core/options.hpp"

namespace matopt::detail {

template <class M>
using remove_cvref_t = std::remove_cv_t<std::remove_reference_t<M>>;

/// True for Eigen dense matrix expressions (Matrix, Map, Ref, Block, ...).
template <class M>
inline constexpr bool is_eigen_matrix_v =
    std::is_base_of_v<Eigen::MatrixBase<remove_cvref_t<M>>, remove_cvref_t<M>>;

/// Storage order of an Eigen matrix type.
template <class M>
inline constexpr Layout layout_of_v =
    (remove_cvref_t<M>::Flags & Eigen::RowMajorBit) ? Layout::RowMajor : Layout::ColMajor;

template <Layout L>
inline constexpr int eigen_order_v = L == Layout::RowMajor ? Eigen::RowMajor : Eigen::ColMajor;

/// Dynamic matrix of a given storage order.
template <class T, Layout L>
using DynamicMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, eigen_order_v<L>>;

/// W and G as Optimizer::step runs them: a contiguous map in storage order L. A Matrix, a Map of one, a transposed
/// or inner-panel view (Eigen's LinearAccessBit with direct access) is viewed this way, so that each preset's step
/// is compiled once per order whatever matrix type the caller holds (and, linked with matopt::runtime, not at all in
/// the caller's file: presets.hpp). It is also the facade's map (core/view.hpp, with_map). A contiguous map, not a
/// strided one: Eigen compiles element-wise loops over strided memory into more code (the runtime's files
/// compiled markedly slower with an OuterStride<> map: `docs/results/performance-log.md#compile-time`).
template <class T, Layout L>
using StepMap = Eigen::Map<std::conditional_t<std::is_const_v<T>, const DynamicMatrix<std::remove_const_t<T>, L>,
                                              DynamicMatrix<T, L>>>;
/// Whether an expression of type X is contiguous memory of X's storage order by its type: direct access, unit inner
/// stride, and linear access as its evaluator declares it (a Matrix's own Flags leave LinearAccessBit to the evaluator,
/// which also declares it for a vector of any stride: a row of a column-major matrix, a diagonal).
template <class X>
inline constexpr bool contiguous_type_v =
    bool(X::Flags & Eigen::DirectAccessBit) && X::InnerStrideAtCompileTime == 1 &&
    bool(Eigen::internal::evaluator<X>::Flags & Eigen::LinearAccessBit);
/// Whether W (and G) of these types step as StepMaps: contiguous by type, T's scalar, one order.
template <class T, class W, class G>
inline constexpr bool steps_as_map_v = contiguous_type_v<W> && bool(W::Flags & Eigen::LvalueBit) &&
                                       contiguous_type_v<G> && std::is_same_v<typename W::Scalar, T> &&
                                       std::is_same_v<typename G::Scalar, T> && layout_of_v<W> == layout_of_v<G>;
/// The StepMap of m.
template <class T, Layout L, class M>
StepMap<T, L> step_map(M& m) {
  return StepMap<T, L>(m.data(), m.rows(), m.cols());
}
/// The StepMap of a contiguous view's data.
template <class T, Layout L>
StepMap<T, L> step_map(T* data, Index rows, Index cols) {
  return StepMap<T, L>(data, rows, cols);
}

/// Matrices with one row or one column have the same memory layout in either order.
inline bool same_layout(Layout a, Layout b, Index rows, Index cols) {
  return a == b || rows <= 1 || cols <= 1;
}

/// S::has_fused_step if the scaling S declares it (its update is W <- keep W - step D: S::coefficients), else false.
template <class P, class = void>
inline constexpr bool has_fused_step_v = false;
template <class P>
inline constexpr bool has_fused_step_v<P, std::void_t<decltype(P::has_fused_step)>> = P::has_fused_step;
/// Whether a scaling wraps another, declared as `using Wrapped = Inner;` with its options in `Options::inner`
/// (SpectralCap): the step's checks reach the wrapped scaling's.
template <class S, class = void>
inline constexpr bool wraps_scaling_v = false;
template <class S>
inline constexpr bool wraps_scaling_v<S, std::void_t<typename S::Wrapped>> = true;

/// P::reads_gradient if P declares it: the preconditioner's apply takes the raw gradient after U
/// (precondition/second_moment.hpp).
template <class P, class = void>
inline constexpr bool reads_gradient_v = false;
template <class P>
inline constexpr bool reads_gradient_v<P, std::void_t<decltype(P::reads_gradient)>> = P::reads_gradient;

/// P::splits_rows if P declares it: Optimizer steps W's row blocks (precondition/row_blocks.hpp) through it.
template <class P, class = void>
inline constexpr bool splits_rows_v = false;
template <class P>
inline constexpr bool splits_rows_v<P, std::void_t<decltype(P::splits_rows)>> = P::splits_rows;
/// P::entrywise if P declares it (D of each entry of U alone, P::direction(u): Identity, Sign), else false.
template <class P, class = void>
inline constexpr bool entrywise_v = false;
template <class P>
inline constexpr bool entrywise_v<P, std::void_t<decltype(P::entrywise)>> = P::entrywise;

/// The state a policy keeps per parameter: P::State<T> if P declares one, NoState otherwise.
struct NoState {
  template <class F>
  void fields(F&&) {}
  std::size_t bytes() const { return 0; }
};
template <class P, class T, class = void>
struct policy_state {
  using type = NoState;
};
template <class P, class T>
struct policy_state<P, T, std::void_t<typename P::template State<T>>> {
  using type = typename P::template State<T>;
};
template <class P, class T>
using policy_state_t = typename policy_state<P, T>::type;
template <class P, class T>
inline constexpr bool has_policy_state_v = !std::is_same_v<policy_state_t<P, T>, NoState>;

/// Sizes a policy's per-parameter state for an m x n parameter, if the policy asks (P::init_state).
template <class P, class S, class = void>
inline constexpr bool has_init_state_v = false;
template <class P, class S>
inline constexpr bool has_init_state_v<P, S, std::void_t<decltype(P::init_state(std::declval<S&>(), Index(), Index()))>> =
    true;
template <class P, class S>
void init_policy_state(S& s, Index m, Index n) {
  if constexpr (has_init_state_v<P, S>) P::init_state(s, m, n);
}
/// The same, for a policy whose state depends on its options: P::init_state(state, options, m, n).
template <class P, class S, class O, class = void>
inline constexpr bool has_init_state_options_v = false;
template <class P, class S, class O>
inline constexpr bool has_init_state_options_v<
    P, S, O, std::void_t<decltype(P::init_state(std::declval<S&>(), std::declval<const O&>(), Index(), Index()))>> = true;
template <class P, class S, class O>
void init_policy_state(S& s, const O& o, Index m, Index n) {
  if constexpr (has_init_state_options_v<P, S, O>) P::init_state(s, o, m, n);
  else init_policy_state<P>(s, m, n);
}
/// P::check_state(state, options, m, n, where) if P has one: whether a step may use this state (before writes).
template <class P, class S, class O, class = void>
inline constexpr bool has_check_state_v = false;
template <class P, class S, class O>
inline constexpr bool has_check_state_v<
    P, S, O,
    std::void_t<decltype(P::check_state(std::declval<const S&>(), std::declval<const O&>(), Index(), Index(),
                                        std::string_view()))>> = true;

/// A member named init_state or check_state (a template on T, as a policy declares them), whatever its signature:
/// check_state_hooks refuses one whose signature no optimizer calls, which would otherwise never run.
template <class P, class T, class = void>
inline constexpr bool names_init_state_v = false;
template <class P, class T>
inline constexpr bool names_init_state_v<P, T, std::void_t<decltype(&P::template init_state<T>)>> = true;
template <class P, class T, class = void>
inline constexpr bool names_check_state_v = false;
template <class P, class T>
inline constexpr bool names_check_state_v<P, T, std::void_t<decltype(&P::template check_state<T>)>> = true;

/// Compile-time checks of a policy's optional state hooks (a preconditioner's, with options; a scaling's, without):
/// a member named init_state or check_state must have a signature the optimizers call, or the build stops with a
/// message giving that signature. True when they do.
template <class P, class T, bool Preconditioner>
constexpr bool check_state_hooks() {
  using S = policy_state_t<P, T>;
  if constexpr (Preconditioner) {
    using O = typename P::Options;
    if constexpr (names_init_state_v<P, T>)
      static_assert(has_init_state_v<P, S> || has_init_state_options_v<P, S, O>,
                    "matopt: a preconditioner's `init_state` is `template <class T> static void init_state(State<T>&, "
                    "Index m, Index n)` or, for a state sized by the options, `(State<T>&, const Options&, Index m, "
                    "Index n)`: this one matches neither, so no optimizer would call it");
    if constexpr (names_check_state_v<P, T>)
      static_assert(has_check_state_v<P, S, O>,
                    "matopt: a preconditioner's `check_state` is `template <class T> static void check_state(const "
                    "State<T>&, const Options&, Index m, Index n, std::string_view where)`: this one does not match, so "
                    "no optimizer would call it");
  } else {
    if constexpr (names_init_state_v<P, T>)
      static_assert(has_init_state_v<P, S>,
                    "matopt: a scaling's `init_state` is `template <class T> static void init_state(State<T>&, Index m, "
                    "Index n)`: this one does not match, so no optimizer would call it");
    static_assert(!names_check_state_v<P, T>,
                  "matopt: a scaling has no `check_state` hook (only preconditioners do): no optimizer would call it");
  }
  return true;
}

/// A policy's name for checkpoints: P::identity() if it has one (composite policies name their parts),
/// else P::name().
template <class P, class = void>
inline constexpr bool has_identity_v = false;
template <class P>
inline constexpr bool has_identity_v<P, std::void_t<decltype(P::identity())>> = true;
template <class P>
std::string policy_identity() {
  if constexpr (has_identity_v<P>) return P::identity();
  else return P::name();
}

/// The members every preconditioner declares (@ref policy_preconditioner), each detected on its own so that
/// check_preconditioner can name the one that is missing.
template <class P, class = void>
inline constexpr bool has_options_type_v = false;
template <class P>
inline constexpr bool has_options_type_v<P, std::void_t<typename P::Options>> = true;
template <class P, class = void>
inline constexpr bool has_name_v = false;
template <class P>
inline constexpr bool has_name_v<P, std::void_t<decltype(std::string(P::name()))>> = true;
template <class P, class = void>
inline constexpr bool has_describe_v = false;
template <class P>
inline constexpr bool has_describe_v<
    P, std::void_t<decltype(P::describe(std::declval<typename P::Options&>(), std::declval<OptionSetter&>()))>> = true;
template <class P, class T, class = void>
inline constexpr bool has_workspace_v = false;
template <class P, class T>
inline constexpr bool has_workspace_v<
    P, T, std::void_t<decltype(std::size_t(std::declval<const typename P::template Workspace<T>&>().bytes()))>> = true;
template <class P, class T, class = void>
inline constexpr bool has_reserve_v = false;
template <class P, class T>
inline constexpr bool has_reserve_v<
    P, T,
    std::void_t<decltype(P::reserve(std::declval<typename P::template Workspace<T>&>(),
                                    std::declval<const typename P::Options&>(), Index(), Index()))>> = true;

/// What the optional opt-ins require: Options with row blocks (splits_rows: blocked(), for_each), a State listing its
/// fields (checkpoints).
template <class P, class = void>
inline constexpr bool has_row_block_options_v = false;
template <class P>
inline constexpr bool has_row_block_options_v<
    P, std::void_t<decltype(bool(std::declval<const typename P::Options&>().blocked())),
                   decltype(std::declval<const typename P::Options&>().count())>> = true;
struct FieldProbe {
  template <class Name, class Field>
  void operator()(Name&&, Field&&) const {}
};
template <class S, class = void>
inline constexpr bool has_fields_v = false;
template <class S>
inline constexpr bool has_fields_v<S, std::void_t<decltype(std::declval<S&>().fields(FieldProbe{}))>> = true;

/// Compile-time checks that a preconditioner P declares the members Optimizer<T, P, ...> calls, each with a
/// message that says what to add (docs/extending.md#a-new-preconditioner). True when all are there.
template <class P, class T>
constexpr bool check_preconditioner() {
  static_assert(has_options_type_v<P>,
                "matopt: a preconditioner declares `Options`, its hyperparameters (`struct Options {};` if none)");
  static_assert(has_name_v<P>,
                "matopt: a preconditioner declares `static constexpr const char* name()`, its name in messages and "
                "checkpoints");
  if constexpr (has_options_type_v<P>)
    static_assert(has_describe_v<P>,
                  "matopt: a preconditioner declares `template <class O, class D> static void describe(O& o, D& d)`, "
                  "calling d(key, o.field, check, doc) for each option (core/options.hpp; empty if none)");
  // A preconditioner without a Workspace of its own is written in engine form only (reserve_on and apply_on,
  // core/detail/engine_form.hpp): Optimizer checks that form.
  if constexpr (has_options_type_v<P> && has_workspace_v<P, T>)
    static_assert(has_reserve_v<P, T>,
                  "matopt: a preconditioner declares `template <class T> static void reserve(Workspace<T>&, const "
                  "Options&, Index m, Index n)`, which sizes its workspace for an m x n parameter");
  static_assert(!has_fused_step_v<P>,
                "matopt: a preconditioner's `has_fused_step` and `fused_step` are no longer read: RowNormalize's and "
                "ColNormalize's one-pass step is the engines' fused_normalize_rows (remove them)");
  // The opt-ins a preconditioner declares, and what each needs.
  if constexpr (has_options_type_v<P>) {
    if constexpr (splits_rows_v<P>)
      static_assert(has_row_block_options_v<P>,
                    "matopt: a preconditioner with `splits_rows = true` has Options that derive from matopt::RowBlocks "
                    "(heads, split_sizes, split_groups)");
  }
  if constexpr (reads_gradient_v<P>)
    static_assert(has_policy_state_v<P, T>,
                  "matopt: a preconditioner with `reads_gradient = true` declares `template <class T> struct State`: "
                  "its apply takes U, G and the parameter's state");
  if constexpr (has_policy_state_v<P, T>)
    static_assert(has_fields_v<policy_state_t<P, T>>,
                  "matopt: a preconditioner's `State<T>` lists its fields for checkpoints: `template <class F> void "
                  "fields(F&& f)` calling f(name, field) for each");
  if constexpr (has_options_type_v<P>) check_state_hooks<P, T, true>();
  return has_options_type_v<P> && has_name_v<P> && has_describe_v<P>;
}

/// Bytes a policy state holds: its bytes() if it has one, else its size unless empty.
template <class S, class = void>
inline constexpr bool has_bytes_v = false;
template <class S>
inline constexpr bool has_bytes_v<S, std::void_t<decltype(std::declval<const S&>().bytes())>> = true;
template <class S>
std::size_t state_bytes(const S& s) {
  if constexpr (has_bytes_v<S>) return s.bytes();
  else return std::is_empty_v<S> ? 0 : sizeof(S);
}

/// True when the Eigen matrix is stored contiguously (unit inner stride, no padding between lines).
template <class M>
bool is_contiguous(const M& m) {
  if constexpr (bool(M::Flags & Eigen::DirectAccessBit)) {
    return m.innerStride() == 1 && (m.outerStride() == m.innerSize() || m.outerSize() <= 1);
  } else {
    return false;
  }
}

/// Whether every entry is finite, in one vectorized pass: x - x is 0 for finite x and NaN for NaN or
/// +-inf, so the sum is 0 exactly when all entries are finite. (Eigen's allFinite() does not vectorize and
/// was 10x slower than a whole RMNP step; matopt must not be compiled with -ffinite-math-only.)
/// Contiguous inputs are checked in fixed blocks, in parallel.
template <class M>
bool all_finite(const Eigen::MatrixBase<M>& m) {
  using T = typename M::Scalar;
  if (m.size() == 0) return true;
  if constexpr (bool(M::Flags & Eigen::DirectAccessBit)) {
    if (is_contiguous(m.derived())) {
      constexpr Index block = Index(1) << 16;
      const T* data = m.derived().data();
      const Index n = m.size();
      std::atomic<bool> finite{true};
      parallel_for((n + block - 1) / block, [&](Index b) {
        const Index len = std::min(block, n - b * block);
        const Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> x(data + b * block, len);
        if ((x - x).sum() != T(0)) finite.store(false, std::memory_order_relaxed);
      });
      return finite.load();
    }
  }
  return (m.array() - m.array()).sum() == T(0);
}

inline const char* layout_name(Layout l) { return l == Layout::RowMajor ? "row-major" : "column-major"; }

}  // namespace matopt::detail

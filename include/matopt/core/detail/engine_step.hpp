// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: one parameter's step on an engine over views, written once for every engine (namespace detail only).
// The step of docs/design.md#the-step-pipeline on views of the engine's memory, for a preconditioner's engine form
// (core/detail/engine_form.hpp):
//   U = u_g G + u_v V (formed where the engine form asks: form_u), D = Preconditioner(U),
//   W <- Scaling(W, D, G) (the scaling's own update, with PolicyEngine's operations), V <- v_v V + v_g G.
// Row blocks (heads, split_sizes, split_groups; precondition/row_blocks.hpp): each block is formed run by run,
// preconditioned on its share of a second moment's S and updated as a parameter of its own shape; the momentum is
// updated once, after. Blocks of one shape run through one batched Newton-Schulz where the engine has it
// (Engine::has_batched_ns: the CUDA engine). Optimizer runs this on HostEngine, DeviceOptimizer on ThrustEngine and
// the CUDA engine, inside the gate, report and counters of detail::Driver (core/detail/driver.hpp).

#include <array>
#include <type_traits>
#include <utility>

#include "matopt/config.hpp"
#include "matopt/core/detail/engine_form.hpp"
#include "matopt/core/detail/norms.hpp"
#include "matopt/core/detail/strided.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/precondition/row_blocks.hpp"

namespace matopt::detail {

/// Whether the engine orthogonalizes blocks of one shape in one batched run (Engine::has_batched_ns).
template <class E, class = void>
inline constexpr bool has_batched_ns_v = false;
template <class E>
inline constexpr bool has_batched_ns_v<E, std::void_t<decltype(E::has_batched_ns)>> = E::has_batched_ns;

/// A form_u as the engine step passes it to apply_on (has_apply_on_v).
template <class T>
struct FormUProbe {
  void operator()(Strided<T>) const {}
};
/// Whether P::apply_on takes what the engine step passes it (EngineStep::precondition_of): (e, ws, o, [state,] m, n,
/// layout, form_u), the state where P keeps one, and returns D as a view.
template <class P, class T, class E, class WS, class = void>
inline constexpr bool has_apply_on_v = false;
template <class P, class T, class E, class WS>
inline constexpr bool has_apply_on_v<
    P, T, E, WS,
    std::enable_if_t<!has_policy_state_v<P, T> &&
                     std::is_convertible_v<decltype(P::apply_on(std::declval<E&>(), std::declval<WS&>(),
                                                                std::declval<const typename P::Options&>(), Index(),
                                                                Index(), Layout(), std::declval<FormUProbe<T>&>())),
                                           Strided<T>>>> = true;
template <class P, class T, class E, class WS>
inline constexpr bool has_apply_on_v<
    P, T, E, WS,
    std::enable_if_t<has_policy_state_v<P, T> &&
                     std::is_convertible_v<decltype(P::apply_on(std::declval<E&>(), std::declval<WS&>(),
                                                                std::declval<const typename P::Options&>(),
                                                                std::declval<policy_state_t<P, T>&>(), Index(),
                                                                Index(), Layout(), std::declval<FormUProbe<T>&>())),
                                           Strided<T>>>> = true;

/// One parameter's step on the engine E with the workspace WS, for Optimizer<T, P, M, S> options O: the engine and
/// the options, the step's lr and weight decay, W's storage order and where the parameter's state is.
template <class T, class P, class M, class S, class E, class WS, class O>
struct EngineStep {
  using Scaling = PolicyEngine<T, E, WS, S>;
  /// Preconditioners that read G and keep a second moment S (SecondMoment).
  static constexpr bool second_moment = reads_gradient_v<P>;
  /// Row blocks, taken with a scaling that keeps no state (Driver::check, core/detail/driver.hpp).
  static constexpr bool splits_rows = splits_rows_v<P> && std::is_empty_v<typename S::template State<T>>;
  // A second moment's and an engine-resident state's apply_on are the library's own forms (SecondMoment, Dion).
  static_assert(second_moment || engine_state_v<P> || has_apply_on_v<P, T, E, WS>,
                "matopt: a preconditioner's engine form declares `template <class E, class WS, class FormU> static "
                "detail::Strided<typename WS::Scalar> apply_on(E& e, WS& ws, const Options& o, [State<T>& state,] "
                "Index m, Index n, Layout layout, FormU&& form_u)`, returning D (core/detail/engine_form.hpp)");

  E& e;
  const O& o;
  T lr, lambda;
  Layout layout;                                 ///< W's storage order
  policy_state_t<P, T>& precondition;            ///< the preconditioner's State
  typename S::template State<T>& scaling_state;  ///< the scaling's State
  std::array<T*, 4> fields{};                    ///< the fields P keeps in engine memory (engine_state_v<P>)
  T* moment = nullptr;                           ///< a second moment's S (second_moment)

  /// Sizes ws (and the engine's scratch) for an m x n parameter and each of its row blocks; `whole = false`: for
  /// the blocks only (a thread's workspace for row blocks stepped in parallel).
  static void reserve(E& e, WS& ws, const O& o, Index m, Index n, bool whole = true) {
    if (whole) {
      P::reserve_on(ws, o.precondition, m, n);
      e.reserve(m, n);  // the engine's own scratch (the CUDA engine's bf16 operands, reduction results)
      if constexpr (tracks_singular_vectors_v<S>) WS::grow(ws.vectors, m + n);
    }
    if constexpr (splits_rows) {
      const RowBlocks& b = o.precondition;
      if (!b.blocked() || !b.fits(m)) return;
      b.for_each(m, [&](const RowSet& r) {
        P::reserve_on(ws, o.precondition, r.size(), n);
        e.reserve(r.size(), n);  // the engine's row scratch is not monotone in the rows (cuda::Engine::reserve)
      });
      ws.host_norms.reserve(b.split_groups);  // >= 1
      if constexpr (!has_fused_step_v<S>)
        if (b.split_groups > 1)  // update_block gathers a block's runs
          b.for_each(m, [&](const RowSet& r) {
            WS::grow(ws.block_w, r.size() * n);
            WS::grow(ws.block_g, r.size() * n);
          });
      if constexpr (batched_blocks)
        if (b.equal_blocks(m)) e.template reserve_batched<T>(b.count(), b.block(m, 0).size(), n);
    }
  }

  /// W <- the step's W, V <- v_v V + v_g G, for m x n views of the engine's memory (W and V in W's storage order; V
  /// empty without a momentum buffer). each_block(count, f) calls f(i, workspace) for i in [0, count): one block at a
  /// time, or in parallel with a workspace per thread (each sized by reserve(..., false)).
  template <class EachBlock>
  void apply(WS& ws, Strided<T> w, Strided<const T> g, Strided<T> v, EachBlock&& each_block) {
    if constexpr (splits_rows) {
      if (static_cast<const RowBlocks&>(o.precondition).blocked()) {
        apply_blocks(ws, w, g, v, each_block);
        return update_momentum(g, v);
      }
    }
    const Strided<T> d = precondition_of(ws, 0, w.rows, w.cols, block_u(RowSet{0, w.rows, w.rows, 1}, g, v),
                                         [&] { return e.norm(g); });
    update(ws, w, d, g);
    update_momentum(g, v);
  }

 private:
  static constexpr bool batched_blocks = splits_rows && has_batched_ns_v<E> && !std::is_void_v<ns_method_t<P>>;

  auto coefficients() const { return M::coefficients(o.momentum, o.nesterov); }
  void update_momentum(Strided<const T> g, Strided<T> v) {
    if constexpr (M::has_buffer) {
      const auto c = coefficients();
      e.combine(v, c.v_v, Strided<const T>(v), c.v_g, g);  // V <- v_v V + v_g G
    }
  }
  /// The scaling's update of W (a parameter, or a row block as one) with D and G.
  void update(WS& ws, Strided<T> w, Strided<T> d, Strided<const T> g) {
    Scaling scaling{e, ws, layout};
    S::update(scaling, w, d, g, scaling_state, o.scaling, lr, lambda);
  }

  /// D for an m x n parameter or row block whose U form_u writes; `offset`: the block's first entry of S.
  template <class FormU, class GNorm>
  Strided<T> precondition_of(WS& ws, Index offset, Index m, Index n, FormU&& form_u, GNorm&& g_norm) {
    const auto& po = o.precondition;
    if constexpr (second_moment)
      return P::apply_on(e, ws, po, moment + offset, g_norm, m, n, layout, form_u);
    else if constexpr (engine_state_v<P>)
      return P::apply_on(e, ws, po, precondition, fields.data(), m, n, layout, form_u);
    else if constexpr (has_policy_state_v<P, T>)
      return P::apply_on(e, ws, po, precondition, m, n, layout, form_u);
    else
      return P::apply_on(e, ws, po, m, n, layout, form_u);
  }

  /// Run k of block b (rows [first + k stride, + rows)) of x.
  template <class X>
  static X run_of(const RowSet& b, X x, Index k) {
    return rows_of(x, b.first + k * b.stride, b.rows);
  }
  /// form_u of block b (or of the whole parameter: one run of every row): U's runs one after another in the target.
  auto block_u(const RowSet& b, Strided<const T> g, Strided<T> v) {
    return [this, b, g, v](Strided<T> target) {
      static_cast<void>(v);  // not read without a momentum buffer
      const auto c = coefficients();
      for (Index k = 0; k < b.groups; ++k) {
        const Strided<T> t = b.groups == 1 ? target : rows_of(target, k * b.rows, b.rows);
        if constexpr (M::has_buffer)
          e.combine(t, c.u_g, run_of(b, g, k), c.u_v, Strided<const T>(run_of(b, v, k)));
        else
          e.copy(run_of(b, g, k), t);
      }
    };
  }
  /// ||G_b||_F, when a moment asks (NAMO): the norm of the runs' norms (norms.hpp's robust_norm).
  auto block_g_norm(WS& ws, const RowSet& b, Strided<const T> g) {
    return [this, &ws, b, g] {
      auto norms = ws.host_norms.vector(b.groups);  // reserved for split_groups runs
      for (Index k = 0; k < b.groups; ++k) norms[k] = e.norm(run_of(b, g, k));
      return robust_norm(norms);
    };
  }

  /// Each block formed, preconditioned on its share of S and updated (each_block: one at a time or in parallel);
  /// blocks of one shape on an engine with batched Newton-Schulz together (apply_blocks_batched).
  template <class EachBlock>
  void apply_blocks(WS& ws, Strided<T> w, Strided<const T> g, Strided<T> v, EachBlock& each_block) {
    const RowBlocks& blocks = o.precondition;
    if constexpr (batched_blocks)
      if (blocks.equal_blocks(w.rows)) return apply_blocks_batched(ws, w, g, v);
    each_block(blocks.count(), [&](Index i, WS& block_ws) {
      Index offset = 0;  // the block's share of S: the blocks' states lie in block order
      if constexpr (second_moment)
        for (Index j = 0; j < i; ++j) offset += P::block_state_size(blocks.block(w.rows, j).size(), w.cols);
      const RowSet b = blocks.block(w.rows, i);
      const Strided<T> d =
          precondition_of(block_ws, offset, b.size(), w.cols, block_u(b, g, v), block_g_norm(block_ws, b, g));
      update_block(block_ws, b, w, g, d);
    });
  }

  /// W_b <- the scaling's update of block b as a parameter of the block's shape, with D_b (its runs from D's rows, in
  /// order) and G_b. A block of one run is a view of W and G. The runs of a split_groups block take the coefficients
  /// of the block's shape run by run when the update is W <- keep W - step D (has_fused_step: Static), and are
  /// otherwise gathered into the workspace, updated there and written back.
  void update_block(WS& ws, const RowSet& b, Strided<T> w, Strided<const T> g, Strided<T> d) {
    if (b.groups == 1) return update(ws, rows_of(w, b.first, b.rows), d, rows_of(g, b.first, b.rows));
    if constexpr (has_fused_step_v<S>) {
      const auto k = S::coefficients(o.scaling, lr, lambda, b.size(), w.cols);
      for (Index r = 0; r < b.groups; ++r) {
        const Strided<const T> dr = rows_of(d, r * b.rows, b.rows);
        if (k.cautious)
          e.cautious_update(run_of(b, w, r), k.keep, k.step, dr);
        else
          e.update(run_of(b, w, r), k.keep, k.step, dr);
      }
    } else {
      const Strided<T> wb = strided(WS::ptr(ws.block_w), b.size(), w.cols, layout);
      const Strided<T> gb = strided(WS::ptr(ws.block_g), b.size(), w.cols, layout);
      for (Index r = 0; r < b.groups; ++r) {
        e.copy(Strided<const T>(run_of(b, w, r)), rows_of(wb, r * b.rows, b.rows));
        e.copy(run_of(b, g, r), rows_of(gb, r * b.rows, b.rows));
      }
      update(ws, wb, d, gb);
      for (Index r = 0; r < b.groups; ++r) e.copy(Strided<const T>(rows_of(wb, r * b.rows, b.rows)), run_of(b, w, r));
    }
  }

  /// The blocks' Newton-Schulz as one batched run (E::ns_batched: each product one strided-batched call for every
  /// block), then each block's moment (SecondMoment) and update, as apply_blocks.
  void apply_blocks_batched(WS& ws, Strided<T> w, Strided<const T> g, Strided<T> v) {
    if constexpr (batched_blocks) {
      using Method = ns_method_t<P>;
      const RowBlocks& blocks = o.precondition;
      const Index count = blocks.count(), mb = blocks.block(w.rows, 0).size(), n = w.cols;
      const bool tall = mb > n;
      const Index r = tall ? n : mb, s = tall ? mb : n;
      const typename Method::Options& ns = o.precondition;
      const Strided<T> xs = e.template ns_batched<T>(
          count, r, s, ns, Method::uses_gram(ns, r, s), [&](Index i, Strided<T> x) {
            const Strided<T> u = tall ? x.t() : x;
            block_u(blocks.block(w.rows, i), g, v)(u);
            if constexpr (second_moment)
              if constexpr (P::sign_input) e.sign(u);
          });
      Index offset = 0;
      for (Index i = 0; i < count; ++i) {
        const RowSet b = blocks.block(w.rows, i);
        const Strided<T> x = col_major(xs.data + i * r * s, r, s), d = tall ? x.t() : x;
        if constexpr (second_moment) {
          P::finish_on(e, ws, o.precondition, d, moment + offset, block_g_norm(ws, b, g), layout, block_u(b, g, v));
          offset += P::block_state_size(mb, n);
        }
        update_block(ws, b, w, g, d);
      }
    }
  }
};

}  // namespace matopt::detail

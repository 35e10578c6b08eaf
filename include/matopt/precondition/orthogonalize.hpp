// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Orthogonalize: D = the polar factor of U (Muon), by Newton–Schulz or an exact SVD, optionally per row block.

#include <algorithm>
#include <string>
#include <string_view>
#include <type_traits>

#include "matopt/config.hpp"
#include "matopt/core/detail/engine_form.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/distributed/plan.hpp"
#include "matopt/precondition/detail/ns_algorithm.hpp"
#include "matopt/precondition/exact_polar.hpp"
#include "matopt/precondition/newton_schulz.hpp"
#include "matopt/precondition/row_blocks.hpp"

namespace matopt {

/// D = polar(U), the orthogonalized direction of Muon (KellerJordan/Muon; `docs/math.md`), computed by `Method` on
/// r x s with r = min(m, n) <= s; a tall U is read transposed, at no copy, since polar(U^T) = polar(U)^T. With
/// RowBlocks options (heads, split_sizes), each block of rows is orthogonalized on its own
/// (@ref policy_preconditioner).
/// @tparam Method NewtonSchulz<Schedule> (default), GramNewtonSchulz or ExactPolar (@ref policy_method).
template <class Method = NewtonSchulz<>>
struct Orthogonalize {
  /// The method's options and the row blocks (heads, split_sizes, split_groups).
  struct Options : Method::Options, RowBlocks {};
  /// "Orthogonalize".
  static constexpr const char* name() { return "Orthogonalize"; }
  /// The planner's cost (distributed/plan.hpp): m n min(m, n), the Newton–Schulz (or polar) products.
  static double cost(Index m, Index n) { return orthogonalize_cost(m, n); }
  /// "Orthogonalize<Method>".
  static std::string identity() { return std::string("Orthogonalize<") + Method::name() + ">"; }

  /// The optimizers step each block of rows (RowBlocks: per-head, split QKV) through apply_on on its own.
  static constexpr bool splits_rows = true;

  /// The method's options, then the row blocks' (core/options.hpp).
  template <class O, class D>
  static void describe(O& o, D& d) {
    Method::describe(o, d);
    RowBlocks::describe(o, d);
  }

  /// The engine form (core/detail/engine_form.hpp): Newton–Schulz on the engine, or ExactPolar's SVD on a host copy.
  static constexpr bool polar_on_host = std::is_same_v<Method, ExactPolar>;
  /// Sizes the engine workspace: X, Y (r x s), A, B (r x r), and Q, T for Gram; ExactPolar: U and its host copy.
  template <class WS>
  static void reserve_on(WS& ws, const Options& o, Index m, Index n) {
    const Index r = std::min(m, n), s = std::max(m, n);  // X = U or U^T, r x s with r <= s
    if constexpr (polar_on_host) {
      ws.grow(ws.u, m * n);
      detail::reserve_host(ws, ws.host_u, m * n);
      ExactPolar::reserve(ws.polar, o, r, s);
    } else {
      ws.grow(ws.x, r * s);
      ws.grow(ws.y, r * s);
      ws.grow(ws.a, r * r);
      ws.grow(ws.b, r * r);
      if (Method::uses_gram(o, r, s)) {
        ws.grow(ws.q, r * r);
        ws.grow(ws.t, r * r);
      }
      if (o.dtype == NsDtype::BFloat16) ws.bf16.reserve(r * s, r * s);  // the host engine's (a device refuses it)
    }
  }
  /// D = polar(U) of X = U (m <= n) or U^T, r x s. Newton–Schulz (precondition/detail/ns_algorithm.hpp) runs on the
  /// engine with X column-major on a device engine, laid out as U is on one that runs either order (the host's), so
  /// that forming X is a straight copy and D comes back in W's order. ExactPolar: U formed in W's order and read on
  /// the host (a device downloads m n elements), its SVD's polar factor (BDCSVD; it allocates) uploaded over U: the
  /// SVD, O(mn min(m, n)) on the host, dominates the two copies. ns_steps: Newton–Schulz's iteration count, the
  /// schedule's where negative (AutoSteps passes its plan's).
  template <class E, class WS, class FormU>
  static detail::Strided<typename WS::Scalar> apply_on(E& e, WS& ws, const Options& o, Index m, Index n,
                                                       Layout layout, FormU&& form_u, int ns_steps = -1) {
    using T = typename WS::Scalar;
    using detail::Strided;
    if constexpr (polar_on_host) {
      const Strided<T> u = detail::form_in_workspace(ws, m, n, layout, form_u);
      const T* host = detail::host_readable(e, ws, ws.host_u, static_cast<const T*>(u.data), m * n);
      // U's memory read in the other order is U^T: X = U (wide) or U^T (tall) at no transposing copy.
      const bool tall = m > n, x_col_major = tall == (layout == Layout::RowMajor);
      const Index r = tall ? n : m, s = tall ? m : n;
      std::copy_n(host, m * n, ws.polar.x.data());
      const T* d = x_col_major ? ExactPolar::run<T, Eigen::ColMajor>(r, s, o, ws.polar).data()
                               : ExactPolar::run<T, Eigen::RowMajor>(r, s, o, ws.polar).data();
      e.upload(d, m * n, u.data);  // D in U's order
      return u;
    } else {
      const bool tall = m > n;
      const Index r = tall ? n : m, s = tall ? m : n;
      const Layout xl = !E::any_order || tall == (layout == Layout::RowMajor) ? Layout::ColMajor : Layout::RowMajor;
      const auto at = [&](auto& buffer, Index rows, Index cols) {
        return detail::strided(WS::ptr(buffer), rows, cols, xl);
      };
      Strided<T> x = at(ws.x, r, s), y = at(ws.y, r, s);
      form_u(tall ? x.t() : x);
      const bool gram = Method::uses_gram(o, r, s) && r > 0 && s > 0;
      Strided<T> a = at(ws.a, r, r), b = at(ws.b, r, r), q = Strided<T>{}, t = q;
      if (gram) {
        q = at(ws.q, r, r);
        t = at(ws.t, r, r);
      }
      const Strided<T> d =
          detail::newton_schulz(e, ws, detail::NsMatrices<Strided<T>>{&x, &y, &a, &b, &q, &t}, o, gram, ns_steps);
      return tall ? d.t() : d;
    }
  }
};

namespace detail {
/// Orthogonalize by Newton-Schulz: an engine may run its equal row blocks in one batch (core/detail/engine_step.hpp).
template <class Schedule, NsVariant V>
struct ns_method<Orthogonalize<NewtonSchulz<Schedule, V>>> {
  using type = NewtonSchulz<Schedule, V>;
};
}  // namespace detail

}  // namespace matopt

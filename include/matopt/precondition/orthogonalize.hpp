// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Orthogonalize: D = the polar factor of U (Muon), by Newton–Schulz or an exact SVD, optionally per row block.
// Orthogonalize: D = polar factor of U (Muon; docs/math.md), computed by `Method` (NewtonSchulz<Schedule>,
// GramNewtonSchulz<Schedule> or ExactPolar), which works on r x s with r = min(m, n) <= s. U is copied into
// the workspace in its own storage order (a straight copy) and that memory is read as X = U (wide) or
// X = U^T (tall), which is the same memory in the opposite order; D comes back as a view of the workspace in
// U's order. So no storage order or shape costs a transposing copy, and polar(U^T) = polar(U)^T.

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

/// D = polar(U), the orthogonalized direction of Muon (KellerJordan/Muon), computed by `Method` on r x s with
/// r = min(m, n) <= s; a tall U is read transposed, at no copy. With RowBlocks options (heads, split_sizes), each
/// block of rows is orthogonalized on its own (@ref policy_preconditioner).
/// @tparam Method NewtonSchulz<Schedule> (default), GramNewtonSchulz or ExactPolar (@ref policy_method).
template <class Method = NewtonSchulz<>>
struct Orthogonalize {
  /// The method's options and the row blocks (heads, split_sizes, split_groups).
  struct Options : Method::Options, RowBlocks {};
  /// The method's workspace.
  template <class T>
  using Workspace = typename Method::template Workspace<T>;

  /// "Orthogonalize".
  static constexpr const char* name() { return "Orthogonalize"; }
  /// The planner's cost (distributed/plan.hpp): m n min(m, n), the Newton–Schulz (or polar) products.
  static double cost(Index m, Index n) { return orthogonalize_cost(m, n); }
  /// "Orthogonalize<Method>".
  static std::string identity() { return std::string("Orthogonalize<") + Method::name() + ">"; }

  /// Optimizer steps each block of rows (RowBlocks: per-head, split QKV) through apply() on its own.
  static constexpr bool splits_rows = true;

  /// Sizes `ws` for an m x n parameter and for its row blocks (grows only; run() then allocates nothing).
  template <class T>
  static void reserve(Workspace<T>& ws, const Options& o, Index m, Index n) {
    Method::reserve(ws, o, m < n ? m : n, m < n ? n : m);
    if (o.blocked() && o.fits(m))
      o.for_each(m, [&](const RowSet& b) {
        const Index rows = b.size();
        Method::reserve(ws, o, rows < n ? rows : n, rows < n ? n : rows);
      });
  }

  /// The method's options, then the row blocks' (core/options.hpp).
  template <class O, class D>
  static void describe(O& o, D& d) {
    Method::describe(o, d);
    RowBlocks::describe(o, d);
  }

  /// Calls sink(D) with D the m x n orthogonalized direction of the expression U.
  template <class T, class UExpr, class Sink>
  static void apply(const UExpr& u, const Options& o, Workspace<T>& ws, Sink&& sink) {
    constexpr int order = detail::eigen_order_v<detail::layout_of_v<UExpr>>;
    const Index m = u.rows(), n = u.cols();
    const bool tall = m > n;
    const Index r = tall ? n : m, s = tall ? m : n;
    ws.template input<order>(m, n).noalias() = u;
    // X = U keeps U's order; X = U^T (tall) reads the same memory in the other order.
    const bool x_col_major = tall == (order == Eigen::RowMajor);
    const T* d = x_col_major ? Method::template run<T, Eigen::ColMajor>(r, s, o, ws).data()
                             : Method::template run<T, Eigen::RowMajor>(r, s, o, ws).data();
    sink(Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, order>>(d, m, n));
  }

  /// The engine form (core/detail/engine_form.hpp): Newton–Schulz on the engine, or ExactPolar's SVD on a host copy.
  static constexpr bool polar_on_host = std::is_same_v<Method, ExactPolar>;
  /// Sizes the engine workspace: X, Y (r x s), A, B (r x r), and Q, T for Gram; ExactPolar: U and its host copy.
  template <class WS>
  static void reserve_on(WS& ws, const Options& o, Index m, Index n) {
    const Index r = std::min(m, n), s = std::max(m, n);  // X = U or U^T, r x s with r <= s
    if constexpr (polar_on_host) {
      ws.grow(ws.u, m * n);
      ws.host_u.reserve(m * n);
      reserve(ws.polar, o, m, n);
    } else {
      ws.grow(ws.x, r * s);
      ws.grow(ws.y, r * s);
      ws.grow(ws.a, r * r);
      ws.grow(ws.b, r * r);
      if (Method::uses_gram(o, r, s)) {
        ws.grow(ws.q, r * r);
        ws.grow(ws.t, r * r);
      }
    }
  }
  /// D = polar(U). Newton–Schulz (precondition/detail/ns_algorithm.hpp) runs on the engine with X = U (m <= n) or
  /// U^T formed column-major r x s. ExactPolar: U formed in W's order, downloaded (m n elements), orthogonalized
  /// by apply() above (BDCSVD; it allocates, as on the host) and D uploaded over U: the SVD, O(mn min(m, n)) on the
  /// host, dominates the two copies.
  template <class E, class WS, class FormU>
  static detail::Strided<typename WS::Scalar> apply_on(E& e, WS& ws, const Options& o, Index m, Index n,
                                                       Layout layout, FormU&& form_u) {
    using T = typename WS::Scalar;
    using detail::Strided;
    if constexpr (polar_on_host) {
      const Strided<T> u = detail::form_in_workspace(ws, m, n, layout, form_u);
      e.download(static_cast<const T*>(u.data), m * n, ws.host_u.data());
      const auto upload = [&](const auto& d) { e.upload(d.data(), m * n, u.data); };  // D in U's order
      if (layout == Layout::RowMajor)
        apply<T>(ws.host_u.template matrix<Eigen::RowMajor>(m, n), o, ws.polar, upload);
      else
        apply<T>(ws.host_u.template matrix<Eigen::ColMajor>(m, n), o, ws.polar, upload);
      return u;
    } else {
      const bool tall = m > n;
      const Index r = tall ? n : m, s = tall ? m : n;
      Strided<T> x = detail::col_major(WS::ptr(ws.x), r, s), y = detail::col_major(WS::ptr(ws.y), r, s);
      form_u(tall ? x.t() : x);
      const bool gram = Method::uses_gram(o, r, s) && r > 0 && s > 0;
      Strided<T> a = detail::col_major(WS::ptr(ws.a), r, r), b = detail::col_major(WS::ptr(ws.b), r, r);
      Strided<T> q = detail::col_major(gram ? WS::ptr(ws.q) : nullptr, gram ? r : 0, gram ? r : 0), t = q;
      if (gram) t = detail::col_major(WS::ptr(ws.t), r, r);
      const Strided<T> d = detail::NsMatrices<Strided<T>>{&x, &y, &a, &b, &q, &t}.run(e, o, gram);
      return tall ? d.t() : d;
    }
  }
};

}  // namespace matopt

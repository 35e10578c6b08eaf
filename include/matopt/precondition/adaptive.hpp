// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Adaptive: per matrix, a cheap preconditioner while U's Gram matrix is diagonally dominant, the exact one otherwise.
// Why: the RMNP authors' measurements show r_min (docs/math.md#diagonal-dominance) of P = U U^T rising above 1
// early in training and staying there (docs/math.md#adaptive-switching).
//
// Cost: a check is a symmetric rank update of P (m^2 n / 2 multiply-adds, less than one NS5 iteration) and one
// evaluation of U into the workspace; it may allocate Eigen's packing buffers. Between checks a step
// costs what the chosen policy costs.

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "matopt/core/detail/engine_form.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/parse.hpp"
#include "matopt/diagnostics/diagonal_dominance.hpp"
#include "matopt/precondition/col_normalize.hpp"
#include "matopt/precondition/orthogonalize.hpp"
#include "matopt/precondition/row_normalize.hpp"

namespace matopt {

/// Per matrix, `Cheap` (RowNormalize, Theta(mn)) while the Gram matrix U U^T of its direction stays diagonally
/// dominant (r_min >= threshold, see diagonal_dominance()), and `Exact` (Orthogonalize, Theta(mn min(m, n))) when it
/// does not: when U U^T is diagonal, Muon's (U U^T)^(-1/2) U is row normalization. Measured every `every` steps of a
/// parameter (the first included); the choice holds until the next check. With ColNormalize as Cheap the Gram is
/// U^T U. Keeps a State per parameter (@ref policy_preconditioner).
template <class Cheap = RowNormalize, class Exact = Orthogonalize<>>
struct Adaptive {
  /// "Adaptive".
  static constexpr const char* name() { return "Adaptive"; }
  /// The planner's cost (distributed/plan.hpp): the larger of its two branches' (the exact one bounds a step).
  static double cost(Index m, Index n) { return std::max(Cheap::cost(m, n), Exact::cost(m, n)); }
  /// "Adaptive<Cheap, Exact>".
  static std::string identity() {
    return std::string("Adaptive<") + detail::policy_identity<Cheap>() + ", " + detail::policy_identity<Exact>() + ">";
  }

  /// The switching rule and both policies' options.
  struct Options {
    double threshold = 1.0;  ///< use Cheap while r_min >= threshold (1: diagonal outweighs the mean |off-diagonal|)
    int every = 100;         ///< re-check every `every` steps of a parameter
    /// Cheap's options.
    typename Cheap::Options cheap{};
    /// Exact's options.
    typename Exact::Options exact{};
  };

  /// Per parameter: the current choice and what the last check measured.
  template <class T>
  struct State {
    bool exact = false;          ///< Exact in use (until the next check)
    double r_min = 0;            ///< r_min of the last check
    std::int64_t calls = 0;      ///< steps preconditioned
    std::int64_t switches = 0;   ///< changes of choice after the first check
    /// Every field, for checkpoints: f(name, field).
    template <class F>
    void fields(F&& f) {
      f("exact", exact);
      f("r_min", r_min);
      f("calls", calls);
      f("switches", switches);
    }
    /// Checkpoint loading (serialization/archive.hpp): a ratio of absolute row sums is not negative.
    template <class Fail>
    void check_loaded(Fail&& fail) const {
      if (!(r_min >= 0)) fail("field 'r_min' is ", r_min, ": it must be >= 0");
    }
  };

  /// Whether the dominance is measured on U^T U (Cheap is ColNormalize) rather than on U U^T.
  static constexpr bool column_gram = std::is_same_v<Cheap, ColNormalize>;

  /// The switching rule's options (core/options.hpp), then Cheap's and Exact's; Exact steps the whole matrix.
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("adaptive_threshold", o.threshold, checks::NonNegative{}, "use the cheap preconditioner while r_min >= it");
    d("adaptive_every", o.every, checks::AtLeast{1}, "check every this many steps");
    Cheap::describe(o.cheap, d);
    Exact::describe(o.exact, d);
    if constexpr (std::is_base_of_v<RowBlocks, typename Exact::Options>)
      d.rule([&o](std::string_view where) {
        if (o.exact.blocked()) detail::fail(where, "heads / split_sizes: Adaptive steps the whole matrix");
      });
  }

  /// The engine form (core/detail/engine_form.hpp): both policies', U's k x k Gram and its host statistics.
  template <class WS>
  static void reserve_on(WS& ws, const Options& o, Index m, Index n) {
    detail::check_inner_engine_form<Cheap, WS>();
    detail::check_inner_engine_form<Exact, WS>();
    Cheap::reserve_on(ws, o.cheap, m, n);
    Exact::reserve_on(ws, o.exact, m, n);
    const Index k = column_gram ? n : m;
    ws.grow(ws.u, m * n);
    if constexpr (!WS::host_memory) ws.grow(ws.gram, k * k);  // the host engine forms it in ws.dominance's own
    ws.dominance.template reserve<typename WS::Scalar>(k, column_gram ? m : n);
  }
  /// choose() with r_min of U's Gram measured on the engine (detail::gram_dominance: U formed into ws.u, free until
  /// the chosen policy runs, as X = U or, for a column Gram, X = U^T), then the chosen policy's engine form, which
  /// forms U again.
  template <class E, class WS, class FormU>
  static detail::Strided<typename WS::Scalar> apply_on(E& e, WS& ws, const Options& o,
                                                       State<typename WS::Scalar>& s, Index m, Index n,
                                                       Layout layout, FormU&& form_u) {
    using T = typename WS::Scalar;
    const bool exact = choose(s, o, [&] {
      const Index k = column_gram ? n : m, l = column_gram ? m : n;
      const detail::Strided<T> x = detail::col_major(WS::ptr(ws.u), k, l);  // P = X X^T
      if (k >= 2) form_u(column_gram ? x.t() : x);
      ws.dominance.template reserve<T>(k, l);  // (no-op once reserved) before its buffer is taken
      T* p = WS::host_memory ? ws.dominance.gram.data() : WS::ptr(ws.gram);
      return detail::gram_dominance(e, x, p, ws.dominance, GramSide::Rows);
    });
    if (exact) return Exact::apply_on(e, ws, o.exact, m, n, layout, form_u);
    return Cheap::apply_on(e, ws, o.cheap, m, n, layout, form_u);
  }

  /// The policy's rule, shared by every backend (apply_on measures on the engine): on a check (every `every` calls,
  /// the first included) `measure()` returns the diagonal dominance of U's Gram (U^T U when column_gram) and sets the
  /// choice; counts the call; true when Exact runs this call.
  template <class T, class Measure>
  static bool choose(State<T>& s, const Options& o, Measure&& measure) {
    if (s.calls % o.every == 0) {
      const DiagonalDominance dd = measure();
      // A 1-row (1-column) Gram has no off-diagonal: both policies agree, keep the cheap one.
      const bool exact = dd.size >= 2 && dd.r_min < o.threshold;
      if (s.calls > 0 && exact != s.exact) ++s.switches;
      s.exact = exact;
      s.r_min = dd.r_min;
    }
    ++s.calls;
    return s.exact;
  }
};

}  // namespace matopt

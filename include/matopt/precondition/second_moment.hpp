// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// SecondMoment: a per-parameter second moment of the preconditioned direction (NorMuon, AdaMuon, NAMO).
// Each moment is written once with engine operations (detail::PolicyEngine over the host engine or a device
// engine), so a moment of one's own steps on every engine.
// Every eps is added to a norm, never a divisor on its own: a zero gradient or a zero direction gives D' = 0,
// not 0/0 (dion#24).

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "matopt/config.hpp"
#include "matopt/core/detail/engine.hpp"
#include "matopt/core/detail/engine_form.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/norms.hpp"
#include "matopt/core/detail/parse.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/core/detail/workspace.hpp"
#include "matopt/precondition/detail/engine_workspace.hpp"
#include "matopt/precondition/row_blocks.hpp"

namespace matopt {
namespace detail {
/// Stand-ins for a moment's g_norm, u_norm and sink in the check below.
template <class T>
struct NormStandIn {
  T operator()() const { return T(0); }
};
struct SinkStandIn {
  template <class X>
  void operator()(const X&) const {}
};
/// Whether the moment M declares engine_state and reads_input_norm, and has apply<T>(e, d, o, s, f, g_norm, u_norm,
/// sink).
template <class M, class T, class = void>
inline constexpr bool is_engine_moment_v = false;
template <class M, class T>
inline constexpr bool is_engine_moment_v<
    M, T,
    std::void_t<decltype(M::engine_state), decltype(M::reads_input_norm),
                decltype(M::template apply<T>(std::declval<PolicyEngine<T, HostEngine, HostWorkspace<T>, M>&>(),
                                              std::declval<const Strided<T>&>(),
                                              std::declval<const typename M::Options&>(), std::declval<T*>(),
                                              std::declval<T*>(), NormStandIn<T>{}, NormStandIn<T>{},
                                              SinkStandIn{}))>> = true;
/// Stops the build, saying what to write, for a moment not written with the engine's operations.
template <class M, class T>
constexpr void check_moment() {
  static_assert(is_engine_moment_v<M, T>,
                "matopt::SecondMoment<Inner, Moment>: a moment declares `static constexpr bool engine_state` and "
                "`reads_input_norm`, and has `template <class T, class E, class D, class GNorm, class UNorm, class "
                "Sink> static void apply(E& e, const D& d, const Options&, T* s, T* f, GNorm&&, UNorm&&, Sink&&)`, "
                "written with the engine's operations (docs/extending.md#a-new-second-moment)");
}
/// A moment's u_norm where it does not declare reads_input_norm: calling it stops the build (the engine form forms U
/// again, into memory reserved for it, only for a moment that declares it).
template <class T>
struct UndeclaredInputNorm {
  template <class U = T>
  T operator()() const {
    static_assert(!std::is_same_v<U, U>,
                  "matopt::SecondMoment<Inner, Moment>: a moment that calls u_norm() declares `static constexpr bool "
                  "reads_input_norm = true;`");
    return T(0);
  }
};
/// f where the moment M declares reads_input_norm, else UndeclaredInputNorm.
template <class M, class T, class F>
auto input_norm(F f) {
  if constexpr (M::reads_input_norm) return f;
  else return UndeclaredInputNorm<T>{};
}
}  // namespace detail

/// The second moments of SecondMoment: NorMuon (per row), AdaMuon (per entry) and Namo (one scalar)
/// (@ref policy_moment).
namespace moments {

/// Options every moment has: beta2 and the eps added to sqrt(S).
struct MomentOptions {
  /// EMA coefficient of S, in [0, 1) (default 0.95; key beta2).
  double beta2 = 0.95;
  /// Added to sqrt(S), > 0 (default 1e-8; NorMuon's 1e-10; key moment_eps).
  double eps = 1e-8;

  /// The options (core/options.hpp): beta2, moment_eps.
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("beta2", o.beta2, checks::UnitInterval{}, "beta2 of the second moment");
    d("moment_eps", o.eps, checks::Positive{}, "epsilon added to sqrt(S) and to the rescale's norm");
  }
};

/// NorMuon (arXiv 2510.05491; zichongli5/NorMuon): per row i of D (output neuron), S_i <- lerp(S_i, mean_j D_ij^2,
/// 1 - beta2), D'_i = D_i / (sqrt(S_i) + eps), then D' rescaled to ||D||_F. Under Axis::Longer, per column of a wide D.
/// The rescale (as the reference's normuon_update): D' <- D' ||D||_F / (||D'||_F + eps).
struct NorMuon {
  /// "NorMuon".
  static constexpr const char* name() { return "NorMuon"; }
  /// U goes to the inner preconditioner as is.
  static constexpr bool sign_input = false;
  /// S is read and written on the host (line_factors), on every engine.
  static constexpr bool engine_state = false;
  /// ||U||_F is not read.
  static constexpr bool reads_input_norm = false;
  /// Which lines S runs over: `Rows` (the reference) or `Longer` (rows when m >= n, else columns: modded-nanogpt,
  /// NVIDIA Emerging-Optimizers).
  enum class Axis { Rows, Longer };
  /// beta2, eps (default 1e-10 here) and the axis (key normuon_axis: rows, longer).
  struct Options : MomentOptions {
    /// Defaults, with the reference's eps 1e-10.
    Options() { eps = 1e-10; }  // the reference's eps (dion: 1e-8)
    Axis axis = Axis::Rows;     ///< Rows: the reference; Longer: modded-nanogpt / NVIDIA's rule
  };
  /// The moment's options (core/options.hpp) and normuon_axis.
  template <class O, class D>
  static void describe(O& o, D& d) {
    MomentOptions::describe(o, d);
    d("normuon_axis", o.axis, checks::one_of(axis_names, "an axis"), "per row, or per row/column of the longer side");
  }
  /// The option values of the axes.
  static constexpr std::pair<const char*, Axis> axis_names[] = {{"rows", Axis::Rows}, {"longer", Axis::Longer}};
  /// S: one entry per row, or per column under Axis::Longer on a wide matrix (max(m, n) held).
  static Index state_size(Index m, Index n) { return std::max(m, n); }
  /// Factors per line: max(m, n).
  static Index workspace_size(Index m, Index n) { return std::max(m, n); }

  /// Whether S runs over the rows of an m x n D (else over its columns).
  static bool per_row(const Options& o, Index m, Index n) { return o.axis == Axis::Rows || m >= n; }
  /// The k line factors from the lines' squared norms f (k lines of len elements), in place, with S updated:
  /// S <- lerp(S, mean, 1 - beta2), f_i = 1 / (sqrt(S_i) + eps), then all f scaled so that D' keeps D's
  /// Frobenius norm. Every engine's step shares this rule.
  template <class T>
  static void line_factors(const Options& o, T* s, T* f, Index k, Index len) {
    const T w = T(1 - o.beta2), eps = T(o.eps);
    T d2 = 0, d2_new = 0;  // ||D||_F^2 and ||D'||_F^2 before the rescale
    for (Index i = 0; i < k; ++i) {
      const T sq = f[i];
      s[i] += w * (sq / T(len) - s[i]);
      const T inv = T(1) / (std::sqrt(s[i]) + eps);
      d2 += sq;
      d2_new += inv * inv * sq;
      f[i] = inv;
    }
    const T rescale = std::sqrt(d2) / (std::sqrt(d2_new) + eps);
    for (Index i = 0; i < k; ++i) f[i] *= rescale;
  }

  /// Updates S from D's line norms and calls sink(D') (f: max(m, n) entries of host scratch).
  template <class T, class E, class D, class GNorm, class UNorm, class Sink>
  static void apply(E& e, const D& d, const Options& o, T* s, T* f, GNorm&&, UNorm&&, Sink&& sink) {
    const Index m = e.rows(d), n = e.cols(d);
    const bool rows = per_row(o, m, n);
    e.line_squared_norms(d, rows, f);
    line_factors(o, s, f, rows ? m : n, rows ? n : m);
    e.scale_lines(d, rows, static_cast<const T*>(f), sink);
  }
};

/// AdaMuon (arXiv 2507.11005; Chongjie-Si/AdaMuon), element-wise after Newton–Schulz of sign(U):
/// S <- beta2 S + (1 - beta2) D.D, D' = D / (sqrt(S) + eps), rescaled to RMS `rms`.
/// The rescale: D' <- D' rms sqrt(mn) / (||D'||_F + eps).
struct AdaMuon {
  /// "AdaMuon".
  static constexpr const char* name() { return "AdaMuon"; }
  static constexpr bool sign_input = true;  ///< Inner receives sign(U) (AdaMuon v2)
  /// S is read and written by the engine's moment_normalized (device memory on a device engine).
  static constexpr bool engine_state = true;
  /// ||U||_F is not read.
  static constexpr bool reads_input_norm = false;
  /// beta2, eps and the target RMS of D' (key rms_target).
  struct Options : MomentOptions {
    double rms = 0.2;  ///< RMS of D' (AdaMuon's alignment to AdamW's update RMS)
  };
  /// The moment's options (core/options.hpp) and rms_target.
  template <class O, class D>
  static void describe(O& o, D& d) {
    MomentOptions::describe(o, d);
    d("rms_target", o.rms, checks::Positive{}, "AdaMuon's RMS of the direction");
  }
  /// S has an entry per element of W: m n.
  static Index state_size(Index m, Index n) { return m * n; }
  /// No scratch: 0.
  static Index workspace_size(Index, Index) { return 0; }

  /// Updates S and calls sink(D').
  template <class T, class E, class D, class GNorm, class UNorm, class Sink>
  static void apply(E& e, const D& d, const Options& o, T* s, T*, GNorm&&, UNorm&&, Sink&& sink) {
    const Index m = e.rows(d), n = e.cols(d);
    e.moment_normalized(d, s, T(o.beta2), T(o.eps), [&](const auto& x) {
      e.scaled(x, rescale<T>(o, e.norm(x), m, n), sink);
    });
  }
  /// The factor that gives D' = D / (sqrt(S) + eps) (of Frobenius norm `norm`) the RMS o.rms.
  template <class T>
  static T rescale(const Options& o, T norm, Index m, Index n) {
    return T(o.rms * std::sqrt(double(m) * double(n))) / (norm + T(o.eps));
  }
};

/// NAMO (arXiv 2602.17080; Emerging-Optimizers moment2_method="namo"): one scalar S <- lerp(S, ||G||_F^2, 1 - beta2),
/// D' = D ||U||_F / (sqrt(S) + eps).
struct Namo {
  /// "NAMO".
  static constexpr const char* name() { return "NAMO"; }
  /// U goes to the inner preconditioner as is.
  static constexpr bool sign_input = false;
  /// S (one scalar) is read and written on the host.
  static constexpr bool engine_state = false;
  /// ||U||_F is read: u_norm() (the engine form forms U again for it).
  static constexpr bool reads_input_norm = true;
  /// beta2 and eps.
  using Options = MomentOptions;
  /// The moment's options (core/options.hpp).
  template <class O, class D>
  static void describe(O& o, D& d) {
    MomentOptions::describe(o, d);
  }
  /// One scalar: 1.
  static Index state_size(Index, Index) { return 1; }
  /// No scratch: 0.
  static Index workspace_size(Index, Index) { return 0; }

  /// Updates S from ||G||_F and calls sink(D') (g_norm() = ||G||_F, u_norm() = ||U||_F).
  template <class T, class E, class D, class GNorm, class UNorm, class Sink>
  static void apply(E& e, const D& d, const Options& o, T* s, T*, GNorm&& g_norm, UNorm&& u_norm, Sink&& sink) {
    const T g = g_norm();
    e.scaled(d, scale(o, s, g, T(u_norm())), sink);
  }
  /// S <- lerp(S, ||G||_F^2, 1 - beta2) and the factor ||U||_F / (sqrt(S) + eps) (host and device steps).
  template <class T>
  static T scale(const Options& o, T* s, T g_norm, T u_norm) {
    *s += T(1 - o.beta2) * (g_norm * g_norm - *s);
    return u_norm / (std::sqrt(*s) + T(o.eps));
  }
};

}  // namespace moments

/// SecondMoment<Inner, Moment>: D = Inner(U) (Inner(sign U) for AdaMuon), then D' = Moment(D) with the moment's
/// state S kept per parameter (checkpointed); no bias correction, as in the reference codes. With an Orthogonalize
/// Inner and row blocks (heads, split_sizes, split_groups: row_blocks.hpp), each block of rows is a parameter of its
/// own: its own S, its own Frobenius rescale (per-head NorMuon: dion's NorMuon with num_heads) and its own ||G||_F
/// (NAMO) (@ref policy_preconditioner). The Scaling policy then applies lr, s(m, n) and the decay
/// (`docs/math.md#second-moments-and-scalar-factors`).
/// @tparam Inner a stateless preconditioner, e.g. Orthogonalize<>.
/// @tparam Moment moments::NorMuon, moments::AdaMuon or moments::Namo.
template <class Inner, class Moment>
struct SecondMoment {
  /// Inner's options and the moment's.
  struct Options : Inner::Options {
    /// The moment's options (beta2, eps, ...).
    typename Moment::Options moment{};
  };
  /// Per parameter: the moment's S.
  template <class T>
  struct State {
    Eigen::Matrix<T, Eigen::Dynamic, 1> second_moment;  ///< S, in W's storage order where it is a matrix
    /// Bytes held.
    std::size_t bytes() const { return std::size_t(second_moment.size()) * sizeof(T); }
    /// Every field, for checkpoints: f(name, field).
    template <class F>
    void fields(F&& f) {
      f("second_moment", second_moment);
    }
    /// Checkpoint loading (serialization/archive.hpp): S is an EMA of squares.
    template <class Fail>
    void check_loaded(Fail&& fail) const {
      if ((second_moment.array() < T(0)).any()) fail("field 'second_moment' has a negative entry");
    }
  };

  /// The preconditioner reads the raw gradient too (NAMO's ||G||_F): Optimizer passes it.
  static constexpr bool reads_gradient = true;
  /// Row blocks when Inner steps them (Orthogonalize): the optimizers step each block through apply_on.
  static constexpr bool splits_rows = detail::splits_rows_v<Inner>;

  /// "SecondMoment".
  static constexpr const char* name() { return "SecondMoment"; }
  /// The planner's cost (distributed/plan.hpp): Inner's (the moment is one pass over the entries).
  static double cost(Index m, Index n) { return Inner::cost(m, n); }
  /// "SecondMoment<Inner, Moment>".
  static std::string identity() {
    return std::string("SecondMoment<") + detail::policy_identity<Inner>() + ", " + Moment::name() + ">";
  }

  /// Entries of S for an m x n parameter under options o (the blocks' states one after another).
  static Index state_size(const Options& o, Index m, Index n) {
    if constexpr (splits_rows) {
      if (o.blocked() && o.fits(m)) {
        Index size = 0;
        o.for_each(m, [&](const RowSet& b) { size += Moment::state_size(b.size(), n); });
        return size;
      }
    }
    return Moment::state_size(m, n);
  }
  /// S of state_size(o, m, n) zeros.
  template <class T>
  static void init_state(State<T>& s, const Options& o, Index m, Index n) {
    s.second_moment.setZero(state_size(o, m, n));
  }
  /// S must be the size these options give (heads / split sizes fixed at make_state), checked before a step.
  template <class T>
  static void check_state(const State<T>& s, const Options& o, Index m, Index n, std::string_view where) {
    check_state_size(s.second_moment.size(), o, m, n, where);
  }
  /// The same for an S of `size` entries held elsewhere (a device optimizer's device memory).
  static void check_state_size(Index size, const Options& o, Index m, Index n, std::string_view where) {
    const Index want = state_size(o, m, n);
    if (size != want)
      detail::fail(where, "state's second moment has ", size, " entries but a ", detail::shape_string(m, n),
                   " W with these options needs ", want,
                   " (heads / split_sizes / split_groups changed since make_state)");
  }
  /// Entries of S for one block of `rows` rows (the blocks' states lie one after another, in block order).
  static Index block_state_size(Index rows, Index n) { return Moment::state_size(rows, n); }
  /// The moment's options, then Inner's (core/options.hpp).
  template <class O, class D>
  static void describe(O& o, D& d) {
    Moment::describe(o.moment, d);
    Inner::describe(o, d);
  }

  /// The engine form (core/detail/engine_form.hpp). S lives in engine memory where the moment declares
  /// engine_state (AdaMuon's m n entries), else in the host State (NorMuon's k line statistics go down and k factors
  /// up each step, k = m or n).
  static constexpr bool engine_state = detail::engine_state_v<Moment>;
  /// The State's fields that live in engine memory: S.
  template <class T, class F>
  static void engine_fields(State<T>& s, F&& f) {
    f(s.second_moment);
  }
  /// S, of `size` entries in engine memory, must be the size these options give.
  template <class T>
  static void check_engine_state(const State<T>&, Index size, const Options& o, Index m, Index n,
                                 std::string_view where) {
    check_state_size(size, o, m, n, where);
  }
  /// Whether Inner receives sign(U) (AdaMuon).
  static constexpr bool sign_input = Moment::sign_input;
  /// Inner's, the moment's line statistics, and U formed again where the moment reads ||U||_F.
  template <class WS>
  static void reserve_on(WS& ws, const Options& o, Index m, Index n) {
    detail::check_inner_engine_form<Inner, WS>();
    Inner::reserve_on(ws, o, m, n);
    ws.grow(ws.scale, Moment::workspace_size(m, n));
    ws.host_lines.reserve(Moment::workspace_size(m, n));
    if constexpr (Moment::reads_input_norm) ws.grow(ws.u2, m * n);
  }
  /// D = Inner(U) (Inner(sign U) for AdaMuon), then finish_on; S at s, ||G||_F from g_norm().
  template <class E, class WS, class GNorm, class FormU>
  static detail::Strided<typename WS::Scalar> apply_on(E& e, WS& ws, const Options& o, typename WS::Scalar* s,
                                                       GNorm&& g_norm, Index m, Index n, Layout layout,
                                                       FormU&& form_u) {
    using T = typename WS::Scalar;
    static_assert(!detail::has_policy_state_v<Inner, T>, "matopt::SecondMoment: Inner must keep no state of its own");
    const auto inner_u = [&](detail::Strided<T> target) {
      form_u(target);
      if constexpr (Moment::sign_input) e.sign(target);
    };
    const typename Inner::Options& inner = o;
    const detail::Strided<T> d = Inner::apply_on(e, ws, inner, m, n, layout, inner_u);
    finish_on(e, ws, o, d, s, g_norm, layout, form_u);
    return d;
  }
  /// D' = Moment(D) in place with the engine's policy operations, for a D the inner preconditioner made (here, or
  /// batched over row blocks); ||U||_F, where the moment reads it, of U formed again into ws.u2.
  template <class E, class WS, class GNorm, class FormU>
  static void finish_on(E& e, WS& ws, const Options& o, detail::Strided<typename WS::Scalar> d,
                        typename WS::Scalar* s, GNorm&& g_norm, Layout layout, FormU&& form_u) {
    using T = typename WS::Scalar;
    detail::check_moment<Moment, T>();
    detail::PolicyEngine<T, E, WS, Moment> pe{e, ws, layout};
    const auto u_norm = detail::input_norm<Moment, T>([&] {
      const detail::Strided<T> u = detail::laid_out_as(WS::ptr(ws.u2), d);
      form_u(u);
      return e.norm(detail::Strided<const T>(u));
    });
    Moment::template apply<T>(pe, d, o.moment, s, ws.host_lines.data(), g_norm, u_norm,
                              [](const detail::Strided<T>&) {});
  }
};

namespace detail {
/// SecondMoment of Newton-Schulz batches its equal row blocks as its inner policy does (core/detail/engine_step.hpp).
template <class Inner, class Moment>
struct ns_method<SecondMoment<Inner, Moment>> : ns_method<Inner> {};
}  // namespace detail

}  // namespace matopt

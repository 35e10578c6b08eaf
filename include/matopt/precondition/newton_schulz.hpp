// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// NewtonSchulz: orthogonalization by a Newton–Schulz iteration (plain or Gram), the method of Muon's Orthogonalize.
// Newton–Schulz orthogonalization (Muon; KellerJordan/Muon `zeropower_via_newtonschulz5`; docs/math.md).
// Input X is r x s with r <= s (Orthogonalize transposes tall matrices). X <- X / (safety ||X||_F + eps),
// then per step A = X X^T, B = b A + c A^2, X <- a X + B X: every singular value goes through
// p(s) = a s + b s^3 + c s^5.
//
// Two algorithms give the same result (performance.md cost model, naive 4r^2 s + 2r^3 per step):
//  - plain, with symmetry: A = X X^T as one triangle (SYRK, r^2 s); B = b A + c A A^T as one triangle
//    (SYRK with beta = b, r^3); a folded onto B's diagonal; X <- (a I + B) X as one GEMM (2 r^2 s).
//    3 r^2 s + r^3 per step.
//  - Gram (Dao-AILab): iterate on R = X X^T: M = a I + b R + c R^2, Q <- Q M, R <- M R M; restart
//    (X <- Q X, R <- X X^T, Q <- I) after the listed steps; output Q X. About 6 r^2 s + 31 r^3 for five
//    steps with one restart: cheaper when s >> r.
// NsVariant::Auto uses Gram when s >= gram_aspect * r (default 4), plain otherwise.

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "matopt/core/detail/bf16_engine.hpp"
#include "matopt/core/detail/engine.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/norms.hpp"
#include "matopt/core/options.hpp"
#include "matopt/core/detail/workspace.hpp"
#include "matopt/precondition/detail/ns_algorithm.hpp"
#include "matopt/precondition/schedule.hpp"

namespace matopt {

/// Which Newton–Schulz algorithm runs: `Plain` (SYRK and GEMM on X, 3 r^2 s + r^3 per step), `Gram` (iterates on
/// X X^T, Dao-AILab: cheaper when s >> r), or `Auto` (Gram when s >= gram_aspect r, plain otherwise).
enum class NsVariant { Auto, Plain, Gram };
/// The option values of the variants.
inline constexpr std::pair<const char*, NsVariant> ns_variant_names[] = {
    {"auto", NsVariant::Auto}, {"plain", NsVariant::Plain}, {"gram", NsVariant::Gram}};

/// The precision of Newton–Schulz's products (key ns_dtype): `Float32` (default) multiplies in the optimizer's
/// scalar type; `BFloat16` rounds every product's operands to bfloat16 and accumulates in float, as the peers' GPU
/// Muons do, through oneDNN on the host (`docs/math.md#newton-schulz-in-bfloat16`). The iterate and the output keep
/// the optimizer's scalar type.
enum class NsDtype { Float32, BFloat16 };

/// The option values of the precisions.
inline constexpr std::pair<const char*, NsDtype> ns_dtype_names[] = {{"float32", NsDtype::Float32},
                                                                     {"bfloat16", NsDtype::BFloat16}};
/// "float32" or "bfloat16".
inline const char* ns_dtype_name(NsDtype d) { return checks::one_of(ns_dtype_names).name(d); }

/// Newton–Schulz with the schedule `Schedule` by default (a tag of matopt::schedules); the schedule is a
/// run-time value in Options, so a generated one (polar_express::optimal_composition) plugs in too.
template <class Schedule = schedules::Jordan, NsVariant DefaultVariant = NsVariant::Auto>
struct NewtonSchulz {
  /// "NewtonSchulz".
  static constexpr const char* name() { return "NewtonSchulz"; }

  /// Options of the iteration (@ref policy_method).
  struct Options {
    /// The coefficient schedule, steps and normalization (default: Schedule's; keys ns_schedule, ns_steps, ns_safety,
    /// ns_eps, ns_aol).
    NsSchedule schedule = Schedule::schedule();
    /// The algorithm (default DefaultVariant; key ns_variant: auto, plain, gram).
    NsVariant variant = DefaultVariant;
    double gram_aspect = 4.0;        ///< Auto: Gram when s >= gram_aspect * r
    std::vector<int> restarts = {2};  ///< Gram: restart after these step counts (Dao-AILab: after step 2)
    /// Precision of the products (key ns_dtype: float32, bfloat16; bfloat16 needs a build with oneDNN).
    NsDtype dtype = NsDtype::Float32;
  };

  /// Scratch of the iteration, sized by reserve().
  template <class T>
  struct Workspace {
    /// Internal: the iterate X (where the input goes), its update, A = X X^T and B; q, t for Gram only.
    /// @{
    detail::Buffer<T> x, y, a, b, q, t;  // q, t: Gram only
    detail::Bf16Scratch bf16;             // ns_dtype = bfloat16 only
    /// @}
    /// Bytes held.
    std::size_t bytes() const {
      return x.bytes() + y.bytes() + a.bytes() + b.bytes() + q.bytes() + t.bytes() + bf16.bytes();
    }
    /// Where the caller writes the input (rows * cols elements, in storage order Order).
    template <int Order>
    detail::DenseMap<T, Order> input(Index rows, Index cols) { return x.template matrix<Order>(rows, cols); }
  };

  /// The options (core/options.hpp): the schedule's (ns_schedule, ns_steps, ns_safety, ns_eps, ns_aol), ns_variant,
  /// gram_aspect and ns_dtype; the schedule's coefficients, the Gram restarts, and bfloat16 only in a build with
  /// oneDNN on a CPU it has a bfloat16 matmul for.
  template <class O, class D>
  static void describe(O& o, D& d) {
    detail::describe_schedule(o.schedule, d);
    d("ns_variant", o.variant, checks::one_of(ns_variant_names), "plain or Gram Newton-Schulz (auto: Gram when "
      "s >= gram_aspect r)");
    d("gram_aspect", o.gram_aspect, checks::AtLeast{1}, "the aspect ratio at which auto takes the Gram form");
    d("ns_dtype", o.dtype, checks::one_of(ns_dtype_names), "the precision of the Newton-Schulz products");
    d.rule([&o](std::string_view where) {
      if (o.dtype == NsDtype::BFloat16) detail::check_bf16_products(where);
      for (int k : o.restarts)
        if (k < 1) detail::fail(where, "Gram NS restart steps must be >= 1 (got ", k, ")");
    });
  }

  /// Sizes the workspace for r x s inputs (r <= s) under these options.
  template <class T>
  static void reserve(Workspace<T>& ws, const Options& o, Index r, Index s) {
    ws.x.reserve(r * s);
    ws.y.reserve(r * s);
    ws.a.reserve(r * r);
    ws.b.reserve(r * r);
    if (uses_gram(o, r, s)) {
      ws.q.reserve(r * r);
      ws.t.reserve(r * r);
    }
    if (o.dtype == NsDtype::BFloat16) ws.bf16.reserve(r * s, r * s);
  }

  /// Whether an r x s input (r <= s) runs the Gram algorithm under these options.
  static bool uses_gram(const Options& o, Index r, Index s) {
    return o.variant == NsVariant::Gram || (o.variant == NsVariant::Auto && double(s) >= o.gram_aspect * double(r));
  }

  /// Orthogonalizes the r x s input held in the workspace's input, read in storage order Order, and
  /// returns a view of the result (in the same order; it lives in the workspace).
  template <class T, int Order>
  static detail::DenseMap<T, Order> run(Index r, Index s, const Options& o, Workspace<T>& ws) {
    using M = detail::DenseMap<T, Order>;
    const bool gram = uses_gram(o, r, s) && r > 0 && s > 0;
    const Index k = gram ? r : 0;
    M x = ws.x.template matrix<Order>(r, s), y = ws.y.template matrix<Order>(r, s);
    M a = ws.a.template matrix<Order>(r, r), b = ws.b.template matrix<Order>(r, r);
    M q = ws.q.template matrix<Order>(k, k), t = ws.t.template matrix<Order>(k, k);
    if (o.dtype == NsDtype::BFloat16) {
      ws.bf16.reserve(r * s, r * s);  // no-op once sized (reserve; here for ns_dtype set after make_state)
      detail::Bf16HostEngine engine(ws.bf16);
      return detail::NsMatrices<M>{&x, &y, &a, &b, &q, &t}.run(engine, o, gram);
    }
    detail::HostEngine engine;
    return detail::NsMatrices<M>{&x, &y, &a, &b, &q, &t}.run(engine, o, gram);
  }
};

/// Gram Newton–Schulz (Dao-AILab) always, whatever the shape.
template <class Schedule = schedules::Jordan>
using GramNewtonSchulz = NewtonSchulz<Schedule, NsVariant::Gram>;

}  // namespace matopt

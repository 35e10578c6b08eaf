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

#include <algorithm>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "matopt/core/detail/bf16_engine.hpp"
#include "matopt/core/detail/engine.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/norms.hpp"
#include "matopt/core/detail/strided.hpp"
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

namespace detail {
/// Newton–Schulz on Eigen maps of one storage order: with the configured GEMM engine (HostEngine), or under
/// ns_dtype = bfloat16 with oneDNN's products (Bf16HostEngine, on the scratch bf16).
template <class M, class Options>
M& ns_on_host(NsMatrices<M> m, Bf16Scratch& bf16, const Options& o, bool gram, int steps = -1) {
  if (o.dtype == NsDtype::BFloat16) {
    bf16.reserve(m.x->size(), m.x->size());  // no-op once sized (reserve; here for ns_dtype set after make_state)
    Bf16HostEngine engine(bf16);
    return m.run(engine, o, gram, steps);
  }
  HostEngine engine;
  return m.run(engine, o, gram, steps);
}
}  // namespace detail

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

  /// Whether an r x s input (r <= s) runs the Gram algorithm under these options.
  static bool uses_gram(const Options& o, Index r, Index s) {
    return o.variant == NsVariant::Gram || (o.variant == NsVariant::Auto && double(s) >= o.gram_aspect * double(r));
  }
};

namespace detail {
/// Newton–Schulz on the host engine (an engine form's: Orthogonalize::apply_on): the handles, of one storage order,
/// as Eigen maps; ns_on_host's products, bfloat16 on the workspace's scratch under ns_dtype = bfloat16.
template <class WS, class T, class Options>
Strided<T> newton_schulz(HostEngine&, WS& ws, NsMatrices<Strided<T>> h, const Options& o, bool gram, int steps) {
  const auto run = [&](auto order) -> Strided<T> {
    using M = DenseMap<T, decltype(order)::value>;
    const auto map = [](const Strided<T>* x) { return M(x->data, x->rows, x->cols); };
    M x = map(h.x), y = map(h.y), a = map(h.a), b = map(h.b), q = map(h.q), t = map(h.t);
    const M& d = ns_on_host(NsMatrices<M>{&x, &y, &a, &b, &q, &t}, ws.bf16, o, gram, steps);
    return strided(const_cast<T*>(d.data()), d.rows(), d.cols(),
                   decltype(order)::value == Eigen::RowMajor ? Layout::RowMajor : Layout::ColMajor);
  };
  if (h.x->rs == 1) return run(std::integral_constant<int, Eigen::ColMajor>{});
  return run(std::integral_constant<int, Eigen::RowMajor>{});
}
}  // namespace detail

/// Gram Newton–Schulz (Dao-AILab) always, whatever the shape.
template <class Schedule = schedules::Jordan>
using GramNewtonSchulz = NewtonSchulz<Schedule, NsVariant::Gram>;

}  // namespace matopt

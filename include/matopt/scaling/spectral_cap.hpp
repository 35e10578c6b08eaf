// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// SpectralCap: a step modifier that removes the update's first-order growth of W's top singular value.
// The spectral cap (docs/math.md#spectral-cap; from a report's abstract: "projects out only the first-order
// growth of the single top singular direction from each update").
// The paper was not found; this follows the abstract.
//
//   using CappedMuon = matopt::Optimizer<float, matopt::Orthogonalize<>, matopt::Momentum<matopt::Ema,
//                                        matopt::Nesterov>, matopt::SpectralCap<matopt::Static<>>>;

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include <Eigen/Core>

#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/parse.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/scaling/static.hpp"

namespace matopt {

/// The spectral cap, a step modifier wrapping any scaling policy: it tracks W's top singular triplet (u1, sigma1, v1)
/// by power iteration warm-started from the last step's v1, and when c = u1^T D v1 < 0 (the step would grow sigma1)
/// and sigma1 >= threshold, removes c u1 v1^T from D before the wrapped scaling's update. Every other direction, the
/// rotation of the top direction and a switch of the top direction stay free. Cost per step: 2 power_iterations
/// GEMVs with W (4 mn flops each) and one pass over D for c (@ref policy_scaling).
/// @tparam Inner the wrapped scaling policy (Static<> by default).
template <class Inner = Static<>>
struct SpectralCap {
  /// The wrapped scaling (its scale and decay are checked before a step writes anything).
  using Wrapped = Inner;
  /// "SpectralCap".
  static constexpr const char* name() { return "SpectralCap"; }
  /// "SpectralCap<Inner>".
  static std::string identity() { return std::string("SpectralCap<") + detail::policy_identity<Inner>() + ">"; }

  /// The cap's options and the wrapped policy's.
  struct Options {
    /// The wrapped policy's options.
    typename Inner::Options inner{};
    double threshold = 0;          ///< cap only while sigma1 >= threshold (0: always, the default)
    int power_iterations = 1;      ///< per step, warm-started from the previous v1
    int initial_iterations = 30;   ///< at a parameter's first step, from a fixed pseudo-random v
  };

  /// Per parameter: the singular-pair estimate, the cap's record and the wrapped policy's state (checkpointed).
  template <class T>
  struct State {
    /// The wrapped policy's state.
    typename Inner::template State<T> inner{};
    /// W's top left and right singular vectors (last step's estimate).
    /// @{
    Eigen::Matrix<T, Eigen::Dynamic, 1> u, v;  ///< W's top left / right singular vectors (last step's estimate)
    /// @}
    T sigma = T(0);                            ///< W's top singular value estimate, before the last update
    T projection = T(0);                       ///< u1^T D v1 of the last step (its first-order sigma1 change is -eta times it)
    std::int64_t capped = 0;                   ///< steps on which the cap removed a component
    bool warm = false;                         ///< u, v hold an estimate

    /// Bytes held.
    std::size_t bytes() const {
      return static_cast<std::size_t>(u.size() + v.size()) * sizeof(T) + detail::state_bytes(inner);
    }
    /// Every field, for checkpoints: f(name, field).
    template <class F>
    void fields(F&& f) {
      f("inner", inner);
      f("u", u);
      f("v", v);
      f("sigma", sigma);
      f("projection", projection);
      f("capped", capped);
      f("warm", warm);
    }
    /// Checkpoint loading (serialization/archive.hpp): sigma >= 0, and a warm start from unit vectors (a power
    /// iteration from a huge v would overflow W v).
    template <class Fail>
    void check_loaded(Fail&& fail) const {
      if (!(sigma >= T(0))) fail("field 'sigma' is ", double(sigma), ": it must be >= 0");
      const auto unit = [](const auto& x) { return std::abs(double(x.squaredNorm()) - 1) <= 1e-3; };
      if (warm && !(unit(u) && unit(v))) fail("fields 'u' and 'v' must be unit vectors when 'warm' is set");
    }
  };

  /// Sizes u (m) and v (n) as zeros, and the wrapped policy's state.
  template <class T>
  static void init_state(State<T>& s, Index m, Index n) {
    s.u.setZero(m);
    s.v.setZero(n);
    detail::init_policy_state<Inner>(s.inner, m, n);
  }

  /// The cap's options (core/options.hpp), then the wrapped policy's.
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("cap_threshold", o.threshold, checks::NonNegative{}, "cap only while sigma1 >= it (0: always)");
    d("cap_power_iterations", o.power_iterations, checks::AtLeast{1}, "power iterations per step");
    d("cap_initial_iterations", o.initial_iterations, checks::AtLeast{1},
      "power iterations at a parameter's first step");
    Inner::describe(o.inner, d);
  }

  /// The wrapped policy's effective lr.
  template <class T>
  static T effective_lr(const Options& o, const State<T>& s, T lr, Index m, Index n) {
    return Inner::effective_lr(o.inner, s.inner, lr, m, n);
  }

  /// The singular vectors' scratch on views: m + n elements of the workspace (core/detail/engine_step.hpp).
  static constexpr bool tracks_singular_vectors = true;

  /// Tracks W's top singular pair (power iteration warm-started from the previous v1, in the engine's memory), removes
  /// D's first-order growth of sigma1, then the wrapped update; on any engine.
  template <class T, class Engine, class WMat, class DMat, class GMat>
  static void update(Engine& e, WMat& w, const DMat& d, const GMat& g, State<T>& s, const Options& o, T lr,
                     T lambda) {
    const int iterations = start(s, o, e.cols(w));
    auto vec = e.singular_vectors(w, s.u, s.v);
    power_iteration(s, iterations, vec);
    vec.store(s.u, s.v);
    s.projection = T(0);
    if (measures(s, o) && caps(s, vec.bilinear(d)))  // c = u^T D v: one pass over D
      Inner::update(e, w, vec.minus_rank1(d, s.projection), g, s.inner, o.inner, lr, lambda);
    else
      Inner::update(e, w, d, g, s.inner, o.inner, lr, lambda);
  }

  // The pieces of update(), each a rule on the host State.

  /// The start of a step's tracking: the number of power iterations to run, power_iterations from a warm v,
  /// else initial_iterations from a fixed pseudo-random unit v written into s.v (n = W's columns).
  template <class T>
  static int start(State<T>& s, const Options& o, Index n) {
    if (s.warm && s.v.squaredNorm() != T(0)) return o.power_iterations;
    // A fixed pseudo-random start (not a constant vector, which a structured W can be orthogonal to).
    std::uint64_t x = 0x9E3779B97F4A7C15ull;
    for (Index j = 0; j < n; ++j) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      s.v(j) = T(double(x >> 11) * 0x1.0p-53 - 0.5);
    }
    s.v.normalize();
    return o.initial_iterations;
  }

  /// `iterations` power-iteration steps on vectors u, v held by `vec`: vec.forward() sets u = W v and returns
  /// ||u||, vec.backward() sets v = W^T u and returns ||v||, vec.normalize_u / normalize_v(norm) divide by it.
  /// Sets s.sigma (0, and s.warm = false, when W v or W^T u vanishes: nothing to cap).
  template <class T, class Vectors>
  static void power_iteration(State<T>& s, int iterations, Vectors&& vec) {
    s.warm = true;
    s.sigma = T(0);
    for (int k = 0; k < iterations; ++k) {
      const T un = vec.forward();
      if (!(un > T(0))) {  // W v = 0: W is zero (or v in its null space); nothing to cap
        s.warm = false;
        return;
      }
      vec.normalize_u(un);
      s.sigma = vec.backward();
      if (!(s.sigma > T(0))) {
        s.warm = false;
        return;
      }
      vec.normalize_v(s.sigma);
    }
  }

  /// Whether c = u1^T D v1 is measured this step (after tracking): sigma1 > 0 and sigma1 >= threshold.
  template <class T>
  static bool measures(const State<T>& s, const Options& o) {
    return s.sigma > T(0) && double(s.sigma) >= o.threshold;
  }

  /// Records c = u1^T D v1; true when the cap removes c u1 v1^T from D (c < 0), counted in s.capped.
  template <class T>
  static bool caps(State<T>& s, T c) {
    s.projection = c;
    if (!(c < T(0))) return false;
    ++s.capped;
    return true;
  }
};

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// TrustRatio scaling: W <- W - lr r (lambda W + s Q), with the trust ratio r of OrScale or LARS.

#include <algorithm>
#include <cmath>
#include <string_view>
#include <type_traits>

#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/parse.hpp"
#include "matopt/scaling/shape.hpp"
#include "matopt/scaling/step_rules.hpp"

namespace matopt {
/// Trust ratios of TrustRatio: trust::OrScale and trust::Lars.
namespace trust {

/// OrScale's ratio (arXiv 2605.07815; NUS-HPC-AI-Lab/OrScale): r = clip(||W||_F / (c ||D'||_F + eps), clip_min,
/// clip_max), with c = 1, or calibrated at the first step so that r0 = 1 (OrScale-LM).
/// The calibration sets c = ||W0||_F / ||D'0||_F once; if either norm is below eps there, c falls back to
/// 0.2 sqrt(max(m, n)).
struct OrScale {
  /// "OrScale".
  static constexpr const char* name() { return "OrScale"; }
  /// Options of the ratio.
  struct Options {
    double clip_min = 0.5;  ///< OrScale: [0.5, 1.5]; OrScale-LM: [0.1, 5.0]
    /// Upper clip of r, >= clip_min (default 1.5; key clip_max).
    double clip_max = 1.5;
    /// Added to c ||D'||_F, > 0 (default 1e-6; key trust_eps).
    double eps = 1e-6;
    bool calibrate = false;  ///< OrScale-LM: set c at the first step so that r0 = 1
  };
  /// The options (core/options.hpp): clip_min, clip_max, trust_eps, calibrate.
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("clip_min", o.clip_min, checks::Positive{}, "lower clip of OrScale's trust ratio");
    d("clip_max", o.clip_max, checks::Positive{}, "upper clip of OrScale's trust ratio, >= clip_min");
    d("trust_eps", o.eps, checks::Positive{}, "epsilon of OrScale's trust ratio");
    d("calibrate", o.calibrate, checks::Any{}, "calibrate c at the first step so that r0 = 1 (OrScale-LM)");
    d.rule([&o](std::string_view where) {
      if (o.clip_min > o.clip_max)
        detail::fail(where, "clip_min must be <= clip_max (got [", o.clip_min, ", ", o.clip_max, "])");
    });
  }
};

/// LARS's ratio (arXiv 1708.03888): r = eta ||W|| / (||G|| + lambda ||W||), and r = 1 when ||W|| or ||G|| is 0
/// (as LARS implementations do, so that zero-initialized weights still move).
struct Lars {
  /// "LARS".
  static constexpr const char* name() { return "LARS"; }
  /// Options of the ratio.
  struct Options {
    /// eta, > 0 (default 0.001; key trust_coefficient).
    double trust_coefficient = 0.001;
  };
  /// The option (core/options.hpp): trust_coefficient.
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("trust_coefficient", o.trust_coefficient, checks::Positive{}, "eta of the LARS ratio");
  }
};

}  // namespace trust

/// Trust-ratio scaling with coupled weight decay: D' = lambda W + s(m, n) Q (Q the preconditioned direction),
/// W <- W - lr r D', with the ratio r of `Ratio`. The lr rule of StepRules applies to s; only the decoupled decay form
/// is accepted (the decay is part of D', which r measures) (@ref policy_scaling).
/// @tparam Ratio trust::OrScale (default) or trust::Lars.
/// @tparam Shape s(m, n) under lr_rule = preset (shape::Unit by default; shape::MoonlightRms for OrScale-LM).
template <class Ratio = trust::OrScale, class Shape = shape::Unit>
struct TrustRatio {
  /// "TrustRatio".
  static constexpr const char* name() { return "TrustRatio"; }

  /// The ratio's options and the step rules, with the shape rule.
  struct Options : Ratio::Options, StepRules {
    Shape rule{};  ///< s(m, n) multiplying Q under lr_rule = preset
  };
  /// Per parameter: OrScale's calibration c and the last ratio (checkpointed).
  template <class T>
  struct State {
    T calibration = T(1);  ///< c (OrScale)
    /// Whether c has been calibrated (OrScale-LM's first step).
    bool calibrated = false;
    T last_ratio = T(1);  ///< r of the most recent step (1 before the first)
    /// Every field, for checkpoints: f(name, field).
    template <class F>
    void fields(F&& f) {
      f("calibration", calibration);
      f("calibrated", calibrated);
      f("last_ratio", last_ratio);
    }
    /// Checkpoint loading (serialization/archive.hpp): c > 0 (1, or ||W0|| / ||D'0|| >= 1 / eps, or
    /// 0.2 sqrt(max(m, n))), r >= 0.
    template <class Fail>
    void check_loaded(Fail&& fail) const {
      if (!(calibration > T(0))) fail("field 'calibration' is ", double(calibration), ": it must be > 0");
      if (!(last_ratio >= T(0))) fail("field 'last_ratio' is ", double(last_ratio), ": it must be >= 0");
    }
  };

  /// The ratio's options, then the step rules' (core/options.hpp); only the decoupled decay form.
  template <class O, class D>
  static void describe(O& o, D& d) {
    Ratio::describe(o, d);
    StepRules::describe(o, d);
    d.rule([&o](std::string_view where) {
      if (o.weight_decay_method != WeightDecay::Decoupled)
        detail::fail(where, "weight_decay_method = ", weight_decay_name(o.weight_decay_method),
                     ": TrustRatio couples the decay into D' = lambda W + s Q, which the trust ratio measures and the "
                     "step multiplies by lr r (OrScale, arXiv 2605.07815); only the default form applies");
    });
  }

  /// s(m, n) under these options.
  static double factor(const Options& o, Index m, Index n) { return o.factor(o.rule, m, n); }

  /// lr * r * s, with r from the most recent step.
  template <class T>
  static T effective_lr(const Options& o, const State<T>& st, T lr, Index m, Index n) {
    return lr * st.last_ratio * T(factor(o, m, n));
  }

  /// Which norms ratio() reads: ||D'|| (OrScale) or ||G|| (LARS). Every backend computes only those.
  static constexpr bool uses_g_norm = !std::is_same_v<Ratio, trust::OrScale>;

  /// r from ||W||, ||D'|| and ||G|| (`docs/math.md#trust-ratio-orscale-lars`), calibrating c at the first
  /// step (OrScale-LM) and recording r in the state. Shared by every backend.
  template <class T>
  static T ratio(T w_norm, T d_norm, T g_norm, State<T>& st, const Options& o, Index m, Index n, T lambda) {
    T r;
    if constexpr (std::is_same_v<Ratio, trust::OrScale>) {
      (void)g_norm;
      (void)lambda;
      const T eps = T(o.eps);
      T c = st.calibration;
      if (o.calibrate && !st.calibrated) {
        c = (w_norm >= eps && d_norm >= eps)
                ? w_norm / d_norm
                : T(0.2 * std::sqrt(static_cast<double>(std::max(m, n))));
        st.calibration = c;
        st.calibrated = true;
      }
      r = std::clamp(w_norm / (c * d_norm + eps), T(o.clip_min), T(o.clip_max));
    } else {
      (void)d_norm;
      r = (w_norm > T(0) && g_norm > T(0)) ? T(o.trust_coefficient) * w_norm / (g_norm + lambda * w_norm)
                                          : T(1);
    }
    st.last_ratio = r;
    return r;
  }

  /// W <- W - lr r (lambda W + s Q), r measured on this step's norms (ratio()), on any engine.
  template <class T, class Engine, class WMat, class QMat, class GMat>
  static void update(Engine& e, WMat& w, const QMat& q, const GMat& g, State<T>& st, const Options& o, T lr,
                     T lambda) {
    const Index m = e.rows(w), n = e.cols(w);
    // D': behind a host form an expression, evaluated twice and never stored; on views written over Q.
    const auto d = e.combined(lambda, w, T(factor(o, m, n)), q);
    const T w_norm = e.norm(w);
    const T r = uses_g_norm ? ratio(w_norm, T(0), e.norm(g), st, o, m, n, lambda)
                            : ratio(w_norm, e.norm(d), T(0), st, o, m, n, lambda);
    e.update(w, T(1), lr * r, d);
  }
};

}  // namespace matopt

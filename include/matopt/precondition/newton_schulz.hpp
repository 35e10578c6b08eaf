#pragma once
// Newton–Schulz orthogonalization (Muon; KellerJordan/Muon `zeropower_via_newtonschulz5`, spec §2.1).
// Input X is r x s with r <= s (Orthogonalize transposes tall matrices). X <- X / (safety ||X||_F + eps),
// then per step A = X X^T, B = b A + c A^2, X <- a X + B X: every singular value goes through
// p(s) = a s + b s^3 + c s^5.

#include <string_view>
#include <utility>

#include "matopt/core/errors.hpp"
#include "matopt/core/workspace.hpp"
#include "matopt/precondition/schedule.hpp"

namespace matopt {

/// Newton–Schulz with the schedule `Schedule` by default (a tag of matopt::schedules); the schedule is a
/// run-time value in Options, so a generated one (polar_express::optimal_composition) plugs in too.
template <class Schedule = schedules::Jordan>
struct NewtonSchulz {
  static constexpr const char* name() { return "NewtonSchulz"; }

  struct Options {
    NsSchedule schedule = Schedule::schedule();
  };

  template <class T>
  struct Workspace {
    detail::Buffer<T> x, y, a, b;
    void reserve(Index r, Index s) {
      x.reserve(r * s);
      y.reserve(r * s);
      a.reserve(r * r);
      b.reserve(r * r);
    }
    std::size_t bytes() const { return x.bytes() + y.bytes() + a.bytes() + b.bytes(); }
    /// Where the caller writes the r x s input.
    Eigen::Map<typename detail::Buffer<T>::Matrix> input(Index r, Index s) { return x.matrix(r, s); }
  };

  static void validate(const Options& o, std::string_view where) { o.schedule.validate(where); }
  static bool set_option(Options& o, std::string_view key, std::string_view value) {
    return detail::set_schedule_option(o.schedule, key, value);
  }
  static constexpr const char* option_keys() { return detail::schedule_option_keys; }

  /// Orthogonalizes the r x s input held in ws.input(r, s) and returns a view of the result (which lives
  /// in the workspace).
  template <class T>
  static Eigen::Map<typename detail::Buffer<T>::Matrix> run(Index r, Index s, const Options& o,
                                                           Workspace<T>& ws) {
    using Map = Eigen::Map<typename detail::Buffer<T>::Matrix>;
    const NsSchedule& sch = o.schedule;
    Map x = ws.x.matrix(r, s), y = ws.y.matrix(r, s);
    Map a = ws.a.matrix(r, r), b = ws.b.matrix(r, r);
    x *= T(1) / (T(sch.safety) * x.norm() + T(sch.eps));
    Map* cur = &x;
    Map* next = &y;
    for (int k = 0; k < sch.steps; ++k) {
      const NsCoefficients& c = sch.at(k);
      a.noalias() = (*cur) * cur->transpose();
      b.noalias() = T(c.c) * (a * a);
      b += T(c.b) * a;
      next->noalias() = b * (*cur);
      *next += T(c.a) * (*cur);
      std::swap(cur, next);
    }
    return *cur;
  }
};

}  // namespace matopt

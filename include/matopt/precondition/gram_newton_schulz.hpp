#pragma once
// Gram Newton–Schulz (Dao-AILab, spec §2.1): the same result as NewtonSchulz, iterated on the r x r Gram
// matrix R = X X^T instead of X: with M = a I + b R + c R^2, X_{k+1} = M X_k and R_{k+1} = M R M.
// Q accumulates the M's; at each restart X <- Q X, R <- X X^T, Q <- I; the output is Q X.
// Per step 4 r^3 multiply-adds instead of 4 r^2 s: cheaper when s >> r.

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "matopt/core/errors.hpp"
#include "matopt/core/workspace.hpp"
#include "matopt/precondition/schedule.hpp"

namespace matopt {

template <class Schedule = schedules::Jordan>
struct GramNewtonSchulz {
  static constexpr const char* name() { return "GramNewtonSchulz"; }

  struct Options {
    NsSchedule schedule = Schedule::schedule();
    /// Restart after these step counts (Dao-AILab default: after step 2).
    std::vector<int> restarts = {2};
  };

  template <class T>
  struct Workspace {
    detail::Buffer<T> x, y, r, q, m, t;
    void reserve(Index rows, Index s) {
      x.reserve(rows * s);
      y.reserve(rows * s);
      for (auto* b : {&r, &q, &m, &t}) b->reserve(rows * rows);
    }
    std::size_t bytes() const {
      return x.bytes() + y.bytes() + r.bytes() + q.bytes() + m.bytes() + t.bytes();
    }
    Eigen::Map<typename detail::Buffer<T>::Matrix> input(Index rows, Index s) { return x.matrix(rows, s); }
  };

  static void validate(const Options& o, std::string_view where) {
    o.schedule.validate(where);
    for (int k : o.restarts)
      if (k < 1) detail::fail(where, "Gram NS restart steps must be >= 1 (got ", k, ")");
  }
  static bool set_option(Options& o, std::string_view key, std::string_view value) {
    return detail::set_schedule_option(o.schedule, key, value);
  }
  static constexpr const char* option_keys() { return detail::schedule_option_keys; }

  template <class T>
  static Eigen::Map<typename detail::Buffer<T>::Matrix> run(Index rows, Index s, const Options& o,
                                                           Workspace<T>& ws) {
    using Map = Eigen::Map<typename detail::Buffer<T>::Matrix>;
    const NsSchedule& sch = o.schedule;
    Map x = ws.x.matrix(rows, s), y = ws.y.matrix(rows, s);
    Map r = ws.r.matrix(rows, rows), q = ws.q.matrix(rows, rows);
    Map m = ws.m.matrix(rows, rows), t = ws.t.matrix(rows, rows);
    x *= T(1) / (T(sch.safety) * x.norm() + T(sch.eps));
    r.noalias() = x * x.transpose();
    q.setIdentity();
    for (int k = 0; k < sch.steps; ++k) {
      const NsCoefficients& c = sch.at(k);
      m.noalias() = T(c.c) * (r * r);  // M = a I + b R + c R^2
      m += T(c.b) * r;
      m.diagonal().array() += T(c.a);
      t.noalias() = q * m;  // Q <- Q M
      q = t;
      t.noalias() = m * r;  // R <- M R M
      r.noalias() = t * m;
      const bool restart = k + 1 < sch.steps &&
                           std::find(o.restarts.begin(), o.restarts.end(), k + 1) != o.restarts.end();
      if (restart) {
        y.noalias() = q * x;
        x = y;
        r.noalias() = x * x.transpose();
        q.setIdentity();
      }
    }
    y.noalias() = q * x;
    return y;
  }
};

}  // namespace matopt

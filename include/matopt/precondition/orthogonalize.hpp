#pragma once
// Orthogonalize: D = polar factor of U (Muon, spec §2.1), computed by `Method` (NewtonSchulz<Schedule>,
// GramNewtonSchulz<Schedule> or ExactPolar). U (m x n) is transposed to r x s with r = min(m, n) <= s,
// orthogonalized, and handed back transposed, without a copy, as a view of the workspace.

#include <string>
#include <string_view>

#include "matopt/config.hpp"
#include "matopt/precondition/newton_schulz.hpp"

namespace matopt {

template <class Method = NewtonSchulz<>>
struct Orthogonalize {
  using Options = typename Method::Options;
  template <class T>
  using Workspace = typename Method::template Workspace<T>;

  static constexpr const char* name() { return "Orthogonalize"; }
  static std::string identity() { return std::string("Orthogonalize<") + Method::name() + ">"; }

  /// Sizes `ws` for an m x n parameter (grows only; run() then allocates nothing).
  template <class T>
  static void reserve(Workspace<T>& ws, const Options& o, Index m, Index n) {
    Method::reserve(ws, o, m < n ? m : n, m < n ? n : m);
  }

  static void validate(const Options& o, std::string_view where) { Method::validate(o, where); }
  static bool set_option(Options& o, std::string_view key, std::string_view value) {
    return Method::set_option(o, key, value);
  }
  static constexpr const char* option_keys() { return Method::option_keys(); }

  /// Calls sink(D) with D the m x n orthogonalized direction of the expression U.
  template <class T, class UExpr, class Sink>
  static void apply(const UExpr& u, const Options& o, Workspace<T>& ws, Sink&& sink) {
    const Index m = u.rows(), n = u.cols();
    const bool tall = m > n;
    const Index r = tall ? n : m, s = tall ? m : n;
    auto x = ws.input(r, s);
    if (tall)
      x.noalias() = u.transpose();
    else
      x.noalias() = u;
    const auto d = Method::template run<T>(r, s, o, ws);
    if (tall)
      sink(d.transpose());
    else
      sink(d);
  }
};

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
// SecondMoment<Inner, Moment>: a second moment of the preconditioned direction, kept per parameter
// (../shared/design/variants.md §1-3). D = Inner(U) (Inner(sign U) for AdaMuon), then D' = Moment(D):
//   moments::NorMuon (arXiv 2510.05491; zichongli5/NorMuon normuon_update), per row i (output neuron):
//       S_i <- lerp(S_i, mean_j D_ij^2, 1 - beta2);  D' = D_i / (sqrt(S_i) + eps);  D' <- D' ||D||_F / (||D'||_F + eps)
//       axis = longer: per row when m >= n, per column otherwise (modded-nanogpt, NVIDIA Emerging-Optimizers).
//   moments::AdaMuon (arXiv 2507.11005; Chongjie-Si/AdaMuon), elementwise, after NS of sign(U):
//       S <- beta2 S + (1 - beta2) D.D;  D' = D / (sqrt(S) + eps);  D' <- D' rms sqrt(mn) / (||D'||_F + eps)
//   moments::Namo (arXiv 2602.17080; Emerging-Optimizers moment2_method="namo"), one scalar:
//       S <- lerp(S, ||G||_F^2, 1 - beta2);  D' = D ||U||_F / (sqrt(S) + eps)
// No bias correction, as in the reference codes. The Scaling policy then applies lr, s(m, n) and the decay.
// Per-head (heads, split_sizes, split_groups of an Orthogonalize Inner: row_blocks.hpp): each block of rows is
// a parameter of its own, with its own S, its own Frobenius rescale (NorMuon: dion's NorMuon with num_heads)
// and its own ||G||_F (NAMO); S holds the blocks' states one after another.
// Every eps is added to a norm, never a divisor on its own: a zero gradient or a zero direction gives D' = 0,
// not 0/0 (dion#24). The state (S) is the parameter's and goes into checkpoints.

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <type_traits>

#include <Eigen/Core>

#include "matopt/config.hpp"
#include "matopt/core/errors.hpp"
#include "matopt/core/norms.hpp"
#include "matopt/core/parse.hpp"
#include "matopt/core/traits.hpp"
#include "matopt/core/workspace.hpp"
#include "matopt/precondition/row_blocks.hpp"

namespace matopt {
namespace moments {

/// Options every moment has: beta2 and the eps added to sqrt(S).
struct MomentOptions {
  double beta2 = 0.95;
  double eps = 1e-8;

  void validate(std::string_view where) const {
    detail::require_unit_interval(where, "beta2", beta2);
    detail::require_positive(where, "moment_eps", eps);
  }
  bool set_option(std::string_view key, std::string_view value) {
    if (key == "beta2") beta2 = detail::parse_double(key, value);
    else if (key == "moment_eps") eps = detail::parse_double(key, value);
    else return false;
    return true;
  }
};

struct NorMuon {
  static constexpr const char* name() { return "NorMuon"; }
  static constexpr bool sign_input = false;
  enum class Axis { Rows, Longer };
  struct Options : MomentOptions {
    Options() { eps = 1e-10; }  // the reference's eps (dion: 1e-8)
    Axis axis = Axis::Rows;     ///< Rows: the reference; Longer: modded-nanogpt / NVIDIA's rule
  };
  static void validate(const Options& o, std::string_view where) { o.validate(where); }
  static bool set_option(Options& o, std::string_view key, std::string_view value) {
    if (key != "normuon_axis") return o.set_option(key, value);
    if (value == "rows") o.axis = Axis::Rows;
    else if (value == "longer") o.axis = Axis::Longer;
    else detail::fail("matopt options", "option 'normuon_axis': '", value, "' is not an axis (rows, longer)");
    return true;
  }
  static constexpr const char* option_keys() { return "beta2, moment_eps, normuon_axis"; }
  /// S: one entry per row, or per column under Axis::Longer on a wide matrix (max(m, n) held).
  static Index state_size(Index m, Index n) { return std::max(m, n); }
  static Index workspace_size(Index m, Index n) { return std::max(m, n); }

  /// Whether S runs over the rows of an m x n D (else over its columns).
  static bool per_row(const Options& o, Index m, Index n) { return o.axis == Axis::Rows || m >= n; }
  /// The k line factors from the lines' squared norms f (k lines of len elements), in place, with S updated:
  /// S <- lerp(S, mean, 1 - beta2), f_i = 1 / (sqrt(S_i) + eps), then all f scaled so that D' keeps D's
  /// Frobenius norm. The host step and the device engines' (backend/device_optimizer.hpp) share this rule.
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

  template <class T, class DExpr, class UExpr, class GMat, class Sink>
  static void apply(const DExpr& d, const UExpr&, const GMat&, const Options& o, T* s_data, T* f_data, Sink&& sink) {
    const Index m = d.rows(), n = d.cols();
    const bool rows = per_row(o, m, n);
    const Index k = rows ? m : n;
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>> f(f_data, k);
    if (rows) f = d.rowwise().squaredNorm();
    else f = d.colwise().squaredNorm().transpose();
    line_factors(o, s_data, f_data, k, rows ? n : m);
    if (rows) sink((d.array().colwise() * f.array()).matrix());
    else sink((d.array().rowwise() * f.transpose().array()).matrix());
  }
};

struct AdaMuon {
  static constexpr const char* name() { return "AdaMuon"; }
  static constexpr bool sign_input = true;  ///< Inner receives sign(U) (AdaMuon v2)
  struct Options : MomentOptions {
    double rms = 0.2;  ///< RMS of D' (AdaMuon's alignment to AdamW's update RMS)
  };
  static void validate(const Options& o, std::string_view where) {
    o.validate(where);
    detail::require_positive(where, "rms_target", o.rms);
  }
  static bool set_option(Options& o, std::string_view key, std::string_view value) {
    if (key != "rms_target") return o.set_option(key, value);
    o.rms = detail::parse_double(key, value);
    return true;
  }
  static constexpr const char* option_keys() { return "beta2, moment_eps, rms_target"; }
  static Index state_size(Index m, Index n) { return m * n; }
  static Index workspace_size(Index, Index) { return 0; }

  template <class T, class DExpr, class UExpr, class GMat, class Sink>
  static void apply(const DExpr& d, const UExpr&, const GMat&, const Options& o, T* s_data, T*, Sink&& sink) {
    using Mat = detail::DynamicMatrix<T, detail::layout_of_v<DExpr>>;
    const Index m = d.rows(), n = d.cols();
    Eigen::Map<Mat> s(s_data, m, n);
    const T b = T(o.beta2), eps = T(o.eps);
    s = b * s + (T(1) - b) * d.cwiseAbs2();
    const auto normalized = d.array() / (s.array().sqrt() + eps);
    sink((normalized * rescale<T>(o, std::sqrt(normalized.square().sum()), m, n)).matrix());
  }
  /// The factor that gives D' = D / (sqrt(S) + eps) (of Frobenius norm `norm`) the RMS o.rms.
  template <class T>
  static T rescale(const Options& o, T norm, Index m, Index n) {
    return T(o.rms * std::sqrt(double(m) * double(n))) / (norm + T(o.eps));
  }
};

struct Namo {
  static constexpr const char* name() { return "NAMO"; }
  static constexpr bool sign_input = false;
  using Options = MomentOptions;
  static void validate(const Options& o, std::string_view where) { o.validate(where); }
  static bool set_option(Options& o, std::string_view key, std::string_view value) { return o.set_option(key, value); }
  static constexpr const char* option_keys() { return "beta2, moment_eps"; }
  static Index state_size(Index, Index) { return 1; }
  static Index workspace_size(Index, Index) { return 0; }

  template <class T, class DExpr, class UExpr, class GMat, class Sink>
  static void apply(const DExpr& d, const UExpr& u, const GMat& g, const Options& o, T* s, T*, Sink&& sink) {
    sink(d * scale(o, s, detail::robust_norm(g), detail::robust_norm(u)));
  }
  /// S <- lerp(S, ||G||_F^2, 1 - beta2) and the factor ||U||_F / (sqrt(S) + eps) (host and device steps).
  template <class T>
  static T scale(const Options& o, T* s, T g_norm, T u_norm) {
    *s += T(1 - o.beta2) * (g_norm * g_norm - *s);
    return u_norm / (std::sqrt(*s) + T(o.eps));
  }
};

}  // namespace moments

template <class Inner, class Moment>
struct SecondMoment {
  struct Options : Inner::Options {
    typename Moment::Options moment{};
  };
  template <class T>
  struct Workspace : Inner::template Workspace<T> {
    detail::Buffer<T> factors;  ///< the moment's per-line factors
  };
  template <class T>
  struct State {
    Eigen::Matrix<T, Eigen::Dynamic, 1> second_moment;  ///< S, in W's storage order where it is a matrix
    std::size_t bytes() const { return std::size_t(second_moment.size()) * sizeof(T); }
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
  /// Row blocks when Inner steps them (Orthogonalize): Optimizer calls apply_block for each.
  static constexpr bool splits_rows = detail::splits_rows_v<Inner>;

  static constexpr const char* name() { return "SecondMoment"; }
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
                   " W with these options needs ", want, " (heads / split_sizes / split_groups changed since make_state)");
  }
  /// Entries of S for one block of `rows` rows (the blocks' states lie one after another, in block order).
  static Index block_state_size(Index rows, Index n) { return Moment::state_size(rows, n); }
  template <class T>
  static void reserve(Workspace<T>& ws, const Options& o, Index m, Index n) {
    Inner::reserve(ws, o, m, n);
    ws.factors.reserve(Moment::workspace_size(m, n));
    if constexpr (splits_rows)
      if (o.blocked() && o.fits(m))
        o.for_each(m, [&](const RowSet& b) { ws.factors.reserve(Moment::workspace_size(b.size(), n)); });
  }
  static void validate(const Options& o, std::string_view where) {
    Inner::validate(o, where);
    Moment::validate(o.moment, where);
  }
  static bool set_option(Options& o, std::string_view key, std::string_view value) {
    return Moment::set_option(o.moment, key, value) || Inner::set_option(o, key, value);
  }
  static std::string option_keys() {
    std::string keys = Moment::option_keys();
    const std::string inner = Inner::option_keys();
    if (!inner.empty()) (keys += ", ") += inner;
    return keys;
  }

  /// Calls sink(D') for the direction U of gradient G.
  template <class T, class UExpr, class GMat, class Sink>
  static void apply(const UExpr& u, const GMat& g, const Options& o, Workspace<T>& ws, State<T>& st, Sink&& sink) {
    run<T>(u, g, o, ws, st.second_moment.data(), sink);
  }
  /// The same for the row block `rows` of an m-row W (the block's U and G), on that block's share of S (the
  /// blocks' states lie in block order).
  template <class T, class UExpr, class GMat, class Sink>
  static void apply_block(const RowSet& rows, Index m, const UExpr& u, const GMat& g, const Options& o,
                          Workspace<T>& ws, State<T>& st, Sink&& sink) {
    Index offset = 0;
    o.for_each(m, [&](const RowSet& b) {
      if (b.first < rows.first) offset += Moment::state_size(b.size(), u.cols());
    });
    run<T>(u, g, o, ws, st.second_moment.data() + offset, sink);
  }

 private:
  template <class T, class UExpr, class GMat, class Sink>
  static void run(const UExpr& u, const GMat& g, const Options& o, Workspace<T>& ws, T* s, Sink&& sink) {
    static_assert(!detail::has_policy_state_v<Inner, T>, "matopt::SecondMoment: Inner must keep no state of its own");
    auto moment = [&](const auto& d) { Moment::template apply<T>(d, u, g, o.moment, s, ws.factors.data(), sink); };
    const typename Inner::Options& inner = o;
    if constexpr (Moment::sign_input)
      Inner::template apply<T>(u.array().sign().matrix(), inner, ws, moment);
    else
      Inner::template apply<T>(u, inner, ws, moment);
  }
};

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Singular-value diagnostics: quantiles, orthogonality residual, spectral flatness and the exact-polar step.
// Spectral diagnostics (docs/math.md#diagnostics).
// Everything is computed in double whatever the input's scalar. These functions allocate (SVD,
// eigen-solver); they are measurements, not part of a step.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/SVD>

#include "matopt/config.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/diagnostics/ns_analysis.hpp"

namespace matopt {

namespace detail {

template <class Derived>
void require_nonempty(const char* where, const Eigen::MatrixBase<Derived>& u, const char* name = "U") {
  if (u.rows() == 0 || u.cols() == 0)
    fail(where, name, " must be non-empty (got ", shape_string(u.rows(), u.cols()), ")");
}

/// Singular values of u (in double), descending, from Eigen's BDCSVD (values only).
template <class Derived>
Eigen::VectorXd singular_values_desc(const Eigen::MatrixBase<Derived>& u) {
  const Eigen::MatrixXd x = u.template cast<double>();
  Eigen::BDCSVD<Eigen::MatrixXd> svd(x);
  return svd.singularValues();
}

inline void require_probabilities(const char* where, const std::vector<double>& ps) {
  if (ps.empty()) fail(where, "the list of probabilities p is empty");
  for (std::size_t i = 0; i < ps.size(); ++i)
    if (!(ps[i] >= 0 && ps[i] <= 1)) fail(where, "p[", i, "] must be in [0, 1] (got ", ps[i], ")");
}

}  // namespace detail

/// Sample quantiles of `values` at probabilities `ps`, each in [0, 1], by linear interpolation between order
/// statistics (numpy's default): with v sorted ascending and h = (count - 1) p, q(p) = v[floor h] +
/// (h - floor h)(v[floor h + 1] - v[floor h]). So q(0) = min, q(1) = max, q(0.5) = the median.
inline std::vector<double> sample_quantiles(std::vector<double> values, const std::vector<double>& ps) {
  constexpr const char* where = "matopt::sample_quantiles";
  if (values.empty()) detail::fail(where, "no values");
  detail::require_probabilities(where, ps);
  for (std::size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i])) detail::fail(where, "values[", i, "] must be finite (got ", values[i], ")");
  std::sort(values.begin(), values.end());
  std::vector<double> out;
  out.reserve(ps.size());
  for (double p : ps) out.push_back(detail::quantile_sorted(values.data(), Index(values.size()), p));
  return out;
}

/// Singular values of X = U / ||U||_F in ascending order (all min(m, n) of them, zeros included), computed in
/// double with Eigen's BDCSVD. Their squares sum to 1. A zero U gives zeros (as Newton–Schulz maps it to 0).
/// Throws std::invalid_argument for an empty U. Cost: one SVD, O(mn min(m, n)).
template <class Derived>
Eigen::VectorXd normalized_singular_values(const Eigen::MatrixBase<Derived>& u) {
  detail::require_nonempty("matopt::normalized_singular_values", u);
  Eigen::VectorXd s = detail::singular_values_desc(u);
  const double fro = s.norm();  // = ||U||_F, consistent with the computed values
  if (fro > 0) s /= fro;
  std::reverse(s.data(), s.data() + s.size());
  return s;
}

/// Quantiles at `ps` (each in [0, 1]) of the singular values of X = U / ||U||_F, the normalized singular
/// values Newton–Schulz sees before its safety factor (`docs/math.md#singular-value-quantiles`). Convention of
/// sample_quantiles (numpy "linear") over all min(m, n) singular values. Throws std::invalid_argument for an
/// empty U or p outside [0, 1]. After Magakyan, Parrilo, Ozdaglar ("singular value quantiles of the momentum buffer").
template <class Derived>
std::vector<double> singular_value_quantiles(const Eigen::MatrixBase<Derived>& u, const std::vector<double>& ps) {
  constexpr const char* where = "matopt::singular_value_quantiles";
  detail::require_nonempty(where, u);
  detail::require_probabilities(where, ps);
  const Eigen::VectorXd s = normalized_singular_values(u);
  std::vector<double> out;
  out.reserve(ps.size());
  for (double p : ps) out.push_back(detail::quantile_sorted(s.data(), s.size(), p));
  return out;
}

/// How far a Newton–Schulz output is from an orthogonal (semi-orthogonal) matrix.
struct OrthogonalityResidual {
  double sigma_min = 0;  ///< smallest of the r = min(m, n) singular values
  double sigma_max = 0;  ///< largest singular value
  double gram = 0;       ///< ||X X^T - I_r||_F / sqrt(r), X oriented r x s (short side first)
};

/// Orthogonality residual of an output O (docs/math.md): the spread [sigma_min, sigma_max] of its singular values
/// and ||X X^T - I||_F / sqrt(r) with X = O or O^T so that X X^T is r x r, r = min(m, n). Both come from one
/// Gram matrix formed in double (SYRK), its singular values as square roots of the Gram's eigenvalues:
/// absolute error about 1e-8 * sigma_max, plenty for outputs near 1. Cost r^2 s + O(r^3).
/// Throws std::invalid_argument for an empty O.
template <class Derived>
OrthogonalityResidual orthogonality_residual(const Eigen::MatrixBase<Derived>& o) {
  detail::require_nonempty("matopt::orthogonality_residual", o, "O");
  const bool tall = o.rows() > o.cols();
  const Index r = tall ? o.cols() : o.rows();
  const Eigen::MatrixXd x = o.template cast<double>();
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(r, r);
  if (tall)
    a.selfadjointView<Eigen::Lower>().rankUpdate(x.transpose());
  else
    a.selfadjointView<Eigen::Lower>().rankUpdate(x);
  double sq = 0;  // ||A - I||_F^2 from the lower triangle
  for (Index j = 0; j < r; ++j) {
    const double d = a(j, j) - 1;
    sq += d * d;
    for (Index i = j + 1; i < r; ++i) sq += 2 * a(i, j) * a(i, j);
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(a, Eigen::EigenvaluesOnly);  // reads the lower triangle
  const Eigen::VectorXd& lambda = eig.eigenvalues();                             // ascending
  OrthogonalityResidual out;
  out.sigma_min = std::sqrt(std::max(lambda(0), 0.0));
  out.sigma_max = std::sqrt(std::max(lambda(r - 1), 0.0));
  out.gram = std::sqrt(sq / double(r));
  return out;
}

/// Spectral flatness of a gradient G and the stable step of the exact-polar update (`docs/math.md#spectral-flatness`).
struct SpectralFlatness {
  double sigma_max = 0;       ///< largest singular value of G
  double sigma_mean = 0;      ///< ||G||_* / rank: the mean of the nonzero singular values
  double nuclear = 0;         ///< ||G||_*: the sum of the singular values counted in `rank`
  Index rank = 0;             ///< numerical rank: singular values above max(m, n) eps(T) sigma_max
  double flatness = 0;        ///< sigma_mean / sigma_max in (0, 1]; 1 for a flat spectrum; 0 for G = 0
  double stable_lr_bound = 0; ///< 2 ||G||_* / rank (infinity for G = 0)
};

/// Spectral flatness mean(sigma) / max(sigma) of G over its numerical rank, and the bound 2 ||G||_* / rank
/// (docs/math.md). For f(W) = 1/2 ||W - W*||^2 and G = W - W*, the exact-polar step W <- W - eta polar(G) maps each
/// nonzero singular value s_i of G to |s_i - eta|, so it decreases f iff eta < 2 ||G||_* / rank: the average
/// singular value, not the largest, sets the step. The rank tolerance
/// max(m, n) eps(T) sigma_max (T the input scalar) is ExactPolar's, so the bound is that of the step
/// ExactPolar takes. Singular values by BDCSVD in double: one SVD, O(mn min(m, n)).
/// Throws std::invalid_argument for an empty G.
template <class Derived>
SpectralFlatness spectral_flatness(const Eigen::MatrixBase<Derived>& g) {
  using Scalar = typename Derived::Scalar;
  detail::require_nonempty("matopt::spectral_flatness", g, "G");
  const Eigen::VectorXd s = detail::singular_values_desc(g);
  SpectralFlatness out;
  out.sigma_max = s(0);
  const double tol = double(std::max(g.rows(), g.cols())) * double(std::numeric_limits<Scalar>::epsilon()) * s(0);
  for (Index i = 0; i < s.size() && s(i) > tol; ++i) {
    out.nuclear += s(i);
    ++out.rank;
  }
  if (out.rank == 0) {
    out.stable_lr_bound = std::numeric_limits<double>::infinity();
    return out;
  }
  out.sigma_mean = out.nuclear / double(out.rank);
  out.flatness = out.sigma_mean / out.sigma_max;
  out.stable_lr_bound = 2 * out.sigma_mean;
  return out;
}

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
// Shared helpers of matopt's tests: reference oracles, random inputs, golden data.

#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

#include <Eigen/Core>
#include <Eigen/QR>
#include <doctest/doctest.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include <matopt/core/detail/engine.hpp>
#include <matopt/core/view.hpp>
#include <matopt/precondition/detail/engine_workspace.hpp>

namespace matopt::test {

template <class T>
using RowMat = matopt::RowMatrix<T>;
template <class T>
using ColMat = matopt::ColMatrix<T>;

/// Tolerances per scalar type.
template <class T>
constexpr double tol() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-12;
}

/// Deterministic standard-normal matrix.
template <class M = Eigen::MatrixXd>
M randn(Index rows, Index cols, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist;
  M out(rows, cols);
  for (Index i = 0; i < rows; ++i)
    for (Index j = 0; j < cols; ++j) out(i, j) = static_cast<typename M::Scalar>(dist(gen));
  return out;
}

/// Random matrix with orthonormal columns (n x k, k <= n), from a Householder QR.
inline Eigen::MatrixXd random_orthonormal(Index n, Index k, unsigned seed) {
  const Eigen::MatrixXd a = randn(n, k, seed);
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(a);
  return qr.householderQ() * Eigen::MatrixXd::Identity(n, k);
}

/// ||a - b||_F / ||b||_F (or ||a - b||_F when b = 0).
template <class A, class B>
double rel_error(const Eigen::MatrixBase<A>& a, const Eigen::MatrixBase<B>& b) {
  const Eigen::MatrixXd ad = a.template cast<double>(), bd = b.template cast<double>();
  const double nb = bd.norm();
  return nb > 0 ? (ad - bd).norm() / nb : (ad - bd).norm();
}

/// The direction D = P(U) of a preconditioner policy on the host, evaluated into a matrix: its host form, or its
/// engine form on the host engine, as Optimizer runs them.
template <class P, class T, class UMat>
Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> precondition(const UMat& u, const typename P::Options& o = {}) {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> d(u.rows(), u.cols());
  if constexpr (matopt::detail::host_engine_form_v<P, T>) {
    matopt::detail::HostWorkspace<T> ws;
    P::reserve_on(ws, o, u.rows(), u.cols());
    matopt::detail::HostEngine e;
    const auto form_u = [&](matopt::detail::Strided<T> target) {
      matopt::detail::HostEngine::as_map(target, [&](auto&& x) { x = u; });
    };
    const auto dv = P::apply_on(e, ws, o, u.rows(), u.cols(), matopt::detail::layout_of_v<UMat>, form_u);
    for (matopt::Index i = 0; i < d.rows(); ++i)
      for (matopt::Index j = 0; j < d.cols(); ++j) d(i, j) = dv(i, j);
  } else {
    typename P::template Workspace<T> ws;
    P::reserve(ws, o, u.rows(), u.cols());
    P::template apply<T>(u, o, ws, [&](const auto& dir) { d = dir; });
  }
  return d;
}

/// Runs f with `threads` OpenMP threads (serially without OpenMP).
template <class F>
void with_threads(int threads, F&& f) {
#if defined(_OPENMP)
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  f();
  omp_set_num_threads(before);
#else
  (void)threads;
  f();
#endif
}

/// Golden data written by scripts/make_golden.py.
class Golden {
 public:
#if defined(MATOPT_GOLDEN_FILE)
  static const Golden& get() {
    static const Golden g(path(MATOPT_GOLDEN_FILE));
    return g;
  }
#endif
#if defined(MATOPT_GOLDEN_VARIANTS_FILE)
  /// Written by scripts/make_golden_variants.py.
  static const Golden& variants() {
    static const Golden g(path(MATOPT_GOLDEN_VARIANTS_FILE));
    return g;
  }
#endif
  /// The file the build named, or the file of that name in $MATOPT_GOLDEN_DIR when it is set (a test executable
  /// run away from its source tree: scripts/gpu-check.sh --run-packed).
  static std::string path(const std::string& built) {
    const char* dir = std::getenv("MATOPT_GOLDEN_DIR");
    if (dir == nullptr || *dir == '\0') return built;
    return std::string(dir) + "/" + built.substr(built.find_last_of('/') + 1);
  }
  const Eigen::MatrixXd& operator[](const std::string& name) const {
    auto it = data_.find(name);
    if (it == data_.end()) throw std::runtime_error("golden data has no matrix '" + name + "'");
    return it->second;
  }

 private:
  explicit Golden(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open golden data " + path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("matrix ", 0) != 0) continue;
      std::istringstream head(line.substr(7));
      std::string name;
      Index rows = 0, cols = 0;
      head >> name >> rows >> cols;
      Eigen::MatrixXd m(rows, cols);
      for (Index i = 0; i < rows; ++i)
        for (Index j = 0; j < cols; ++j) in >> m(i, j);
      data_[name] = m;
    }
  }
  std::map<std::string, Eigen::MatrixXd> data_;
};

}  // namespace matopt::test

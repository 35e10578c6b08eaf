#pragma once
// Compile-time facts about Eigen matrix arguments.

#include <algorithm>
#include <atomic>
#include <type_traits>

#include <Eigen/Core>

#include "matopt/config.hpp"
#include "matopt/core/parallel.hpp"

namespace matopt::detail {

template <class M>
using remove_cvref_t = std::remove_cv_t<std::remove_reference_t<M>>;

/// True for Eigen dense matrix expressions (Matrix, Map, Ref, Block, ...).
template <class M>
inline constexpr bool is_eigen_matrix_v =
    std::is_base_of_v<Eigen::MatrixBase<remove_cvref_t<M>>, remove_cvref_t<M>>;

/// Storage order of an Eigen matrix type.
template <class M>
inline constexpr Layout layout_of_v =
    (remove_cvref_t<M>::Flags & Eigen::RowMajorBit) ? Layout::RowMajor : Layout::ColMajor;

template <Layout L>
inline constexpr int eigen_order_v = L == Layout::RowMajor ? Eigen::RowMajor : Eigen::ColMajor;

/// Dynamic matrix of a given storage order.
template <class T, Layout L>
using DynamicMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, eigen_order_v<L>>;

/// Matrices with one row or one column have the same memory layout in either order.
inline bool same_layout(Layout a, Layout b, Index rows, Index cols) {
  return a == b || rows <= 1 || cols <= 1;
}

/// P::has_fused_step if P declares it, false otherwise (user policies need not know about fusion).
template <class P, class = void>
inline constexpr bool has_fused_step_v = false;
template <class P>
inline constexpr bool has_fused_step_v<P, std::void_t<decltype(P::has_fused_step)>> = P::has_fused_step;

/// True when the Eigen matrix is stored contiguously (unit inner stride, no padding between lines).
template <class M>
bool is_contiguous(const M& m) {
  if constexpr (bool(M::Flags & Eigen::DirectAccessBit)) {
    return m.innerStride() == 1 && (m.outerStride() == m.innerSize() || m.outerSize() <= 1);
  } else {
    return false;
  }
}

/// Whether every entry is finite, in one vectorized pass: x - x is 0 for finite x and NaN for NaN or
/// +-inf, so the sum is 0 exactly when all entries are finite. (Eigen's allFinite() does not vectorize and
/// was 10x slower than a whole RMNP step; matopt must not be compiled with -ffinite-math-only.)
/// Contiguous inputs are checked in fixed blocks, in parallel.
template <class M>
bool all_finite(const Eigen::MatrixBase<M>& m) {
  using T = typename M::Scalar;
  if (m.size() == 0) return true;
  if constexpr (bool(M::Flags & Eigen::DirectAccessBit)) {
    if (is_contiguous(m.derived())) {
      constexpr Index block = Index(1) << 16;
      const T* data = m.derived().data();
      const Index n = m.size();
      std::atomic<bool> finite{true};
      parallel_for((n + block - 1) / block, [&](Index b) {
        const Index len = std::min(block, n - b * block);
        const Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> x(data + b * block, len);
        if ((x - x).sum() != T(0)) finite.store(false, std::memory_order_relaxed);
      });
      return finite.load();
    }
  }
  return (m.array() - m.array()).sum() == T(0);
}

inline const char* layout_name(Layout l) { return l == Layout::RowMajor ? "row-major" : "column-major"; }

}  // namespace matopt::detail

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: OpenMP threading with results independent of the thread count (namespace detail only).
// Threading: OpenMP when the including program is compiled with it (-fopenmp), serial otherwise.
// Work is cut into pieces whose boundaries never depend on the thread count, and each piece is computed
// by one thread, so results are bitwise identical for any number of threads. Inside a caller's parallel
// region matopt runs serially (no oversubscription).

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "matopt/config.hpp"

namespace matopt::detail {

/// Threads matopt may use from here: OpenMP's limit, or 1 inside a parallel region or without OpenMP.
inline int available_threads() {
#if defined(_OPENMP)
  return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  return 1;
#endif
}

/// Index of the calling thread in the current parallel region (0 outside one).
inline int thread_index() {
#if defined(_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/// Calls f(i) for i in [0, n), in parallel when worthwhile; f must write disjoint data for each i.
template <class F>
void parallel_for(Index n, F&& f) {
#if defined(_OPENMP)
  if (n > 1 && available_threads() > 1) {
#pragma omp parallel for schedule(dynamic, 1)
    for (Index i = 0; i < n; ++i) f(i);
    return;
  }
#endif
  for (Index i = 0; i < n; ++i) f(i);
}

/// parallel_for for work that calls Eigen's matrix products: a single item (n = 1) also runs inside a parallel
/// region when OpenMP offers more than one thread. Outside one, Eigen's product starts threads of its own, and
/// its blocking, so its rounding, depends on their number (measured: a 256 x 256 Muon step in double built with
/// -march=native on AVX2 differed between 1 and 2 threads under the Eigen engine; tests/test_threads.cpp).
/// Inside a region Eigen computes the product on the calling thread.
template <class F>
void parallel_for_products(Index n, F&& f) {
#if defined(_OPENMP)
  if (n == 1 && available_threads() > 1) {
#pragma omp parallel
#pragma omp single
    f(Index(0));
    return;
  }
#endif
  parallel_for(n, f);
}

}  // namespace matopt::detail

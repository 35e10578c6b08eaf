#pragma once
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

}  // namespace matopt::detail

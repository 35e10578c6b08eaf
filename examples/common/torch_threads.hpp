// SPDX-License-Identifier: MIT
#pragma once
// Thread setup for the libtorch examples. libtorch and matopt share Debian's libgomp, and libtorch's first
// parallel call sets OpenMP's thread count to libtorch's own default: so set (or read) libtorch's count first,
// then OpenMP's. threads = 0 keeps both defaults.
#include <torch/torch.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace examples {

struct Threads {
  int torch = 1, openmp = 1;  ///< libtorch's and matopt's (OpenMP's) counts in effect
};

inline Threads set_threads(int threads) {
  Threads t;
  if (threads > 0) torch::set_num_threads(threads);
  t.torch = torch::get_num_threads();
#if defined(_OPENMP)
  if (threads > 0) omp_set_num_threads(threads);
  t.openmp = omp_get_max_threads();
#endif
  return t;
}

}  // namespace examples

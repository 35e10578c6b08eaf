// SPDX-License-Identifier: MIT
// matopt::runtime's preset files, src/runtime_<part>.cpp (part polar: runtime_polar_float.cpp and
// runtime_polar_double.cpp): each compiles the facade's models (AnyOptimizer's type-erased step, state and options of
// a preset, behind detail::configured) and the steps of the preset table's rows of its part (presets.hpp,
// MATOPT_FACADE_PRESETS), for float and double. A file defines MATOPT_RUNTIME_PART_<part>_<T> for the parts and
// scalar types it compiles, then includes this header. The presets are split over several files so that the library
// builds in parallel: in one file, the thirteen presets took several times longer than any one of these
// (docs/results/ci-log.md).
#pragma once
#ifndef MATOPT_RUNTIME_COMPILED
#error "src/runtime_*.cpp are built by the matopt::runtime target, which defines MATOPT_RUNTIME_COMPILED"
#endif
#include "matopt/facade/detail/factory.hpp"

// Parts this file does not compile expand to nothing.
#ifndef MATOPT_RUNTIME_PART_newton_schulz_float
#define MATOPT_RUNTIME_PART_newton_schulz_float(...)
#endif
#ifndef MATOPT_RUNTIME_PART_newton_schulz_double
#define MATOPT_RUNTIME_PART_newton_schulz_double(...)
#endif
#ifndef MATOPT_RUNTIME_PART_moments_float
#define MATOPT_RUNTIME_PART_moments_float(...)
#endif
#ifndef MATOPT_RUNTIME_PART_moments_double
#define MATOPT_RUNTIME_PART_moments_double(...)
#endif
#ifndef MATOPT_RUNTIME_PART_polar_float
#define MATOPT_RUNTIME_PART_polar_float(...)
#endif
#ifndef MATOPT_RUNTIME_PART_polar_double
#define MATOPT_RUNTIME_PART_polar_double(...)
#endif
#ifndef MATOPT_RUNTIME_PART_elementwise_float
#define MATOPT_RUNTIME_PART_elementwise_float(...)
#endif
#ifndef MATOPT_RUNTIME_PART_elementwise_double
#define MATOPT_RUNTIME_PART_elementwise_double(...)
#endif

namespace matopt {
// A matrix preset: its facade model and its steps (factory.hpp and presets.hpp declare them extern elsewhere).
#define MATOPT_INSTANTIATE_MATRIX(Preset, facade_name, lr, weight_decay, part)                                     \
  MATOPT_RUNTIME_PART_##part##_float(template AnyOptimizer<float> detail::configured<Preset<float>>(const Config&); \
                                     MATOPT_PRESET_STEPS(, Preset, float))                                         \
  MATOPT_RUNTIME_PART_##part##_double(template AnyOptimizer<double> detail::configured<Preset<double>>(            \
      const Config&); MATOPT_PRESET_STEPS(, Preset, double))
// AdamW and Lion (not matopt::Optimizer): the facade model only.
#define MATOPT_INSTANTIATE_ELEMENTWISE(Preset, facade_name, part)                                                    \
  MATOPT_RUNTIME_PART_##part##_float(template AnyOptimizer<float> detail::configured<Preset<float>>(const Config&);) \
  MATOPT_RUNTIME_PART_##part##_double(template AnyOptimizer<double> detail::configured<Preset<double>>(const Config&);)
MATOPT_MATRIX_PRESETS(MATOPT_INSTANTIATE_MATRIX)
MATOPT_ELEMENTWISE_PRESETS(MATOPT_INSTANTIATE_ELEMENTWISE)
}  // namespace matopt

// SPDX-License-Identifier: MIT
// matopt::runtime's preset files (runtime_*.cpp): each compiles the facade's models (AnyOptimizer's type-erased
// step, state and options of a preset, behind detail::configured) of a few presets for float and double. The
// presets are split over several files so that the library builds in parallel: in one file, the thirteen presets
// took several times longer than any one of these (docs/results/ci-log.md). Together the files cover
// MATOPT_FACADE_PRESETS (a preset left out is a link error of every program that builds it by name).
#pragma once
#ifndef MATOPT_RUNTIME_COMPILED
#error "src/runtime_*.cpp are built by the matopt::runtime target, which defines MATOPT_RUNTIME_COMPILED"
#endif
#include "matopt/facade/any_optimizer.hpp"

// A matrix preset: its facade model and its steps (presets.hpp declares both extern for the including files).
#define MATOPT_INSTANTIATE_PRESET_FOR(Preset, T) \
  template AnyOptimizer<T> detail::configured<Preset<T>>(const Config&); MATOPT_PRESET_STEPS(, Preset, T)
#define MATOPT_INSTANTIATE_PRESET(Preset) \
  MATOPT_INSTANTIATE_PRESET_FOR(Preset, float) MATOPT_INSTANTIATE_PRESET_FOR(Preset, double)
// AdamW and Lion (not matopt::Optimizer): the facade model only.
#define MATOPT_INSTANTIATE_FACADE(Preset)                                     \
  template AnyOptimizer<float> detail::configured<Preset<float>>(const Config&); \
  template AnyOptimizer<double> detail::configured<Preset<double>>(const Config&);

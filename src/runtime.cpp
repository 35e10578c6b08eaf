// SPDX-License-Identifier: MIT
// matopt::runtime (CMake option MATOPT_BUILD_RUNTIME): the run-time side of matopt compiled once, as fmt and
// spdlog offer. The facade (make_optimizer builds every preset by name), AnyOptimizer and the hybrid container,
// for float and double. Programs that link matopt::runtime get MATOPT_RUNTIME_COMPILED, under which the headers
// declare these instantiations `extern template`, so a translation unit that builds presets by name no longer
// instantiates every preset's step (scripts/facade_compile_time.sh measures it: docs/performance.md#compile-time).
// Typed use of the templates (matopt::Muon<float> and the rest) stays header-only and unchanged.
// This file compiles the facade's dispatch and the containers; the presets' models are in src/runtime_*.cpp.
#ifndef MATOPT_RUNTIME_COMPILED
#error "src/runtime.cpp is built by the matopt::runtime target, which defines MATOPT_RUNTIME_COMPILED"
#endif
#include "matopt/facade/detail/factory.hpp"
#include "matopt/hybrid/hybrid_optimizer.hpp"

namespace matopt {
std::string detail::compiled_preset_names() { return preset_names(); }
template class AnyOptimizer<float>;
template class AnyOptimizer<double>;
template AnyOptimizer<float> make_optimizer<float>(std::string_view, const Config&);
template AnyOptimizer<double> make_optimizer<double>(std::string_view, const Config&);
template class HybridOptimizer<float>;
template class HybridOptimizer<double>;
template AnyOptimizer<float> detail::default_adamw<float>();
template AnyOptimizer<double> detail::default_adamw<double>();
}  // namespace matopt

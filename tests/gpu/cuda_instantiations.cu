// SPDX-License-Identifier: MIT
// Every CUDA kernel and cuBLAS call site of matopt, compiled through explicit instantiations: what CI builds in
// place of the GPU test executables (issue 18; they need a GPU to run and scripts/gpu-check.sh builds them).
// Each line instantiates every non-template member of a device optimizer (make_state, step, the fused kernels
// its policies launch) or an orthogonalize entry point, for float and double.
#include <matopt/backend/cuda.cuh>
#include <matopt/backend/cuda.cuh>  // twice: include guards
#include <matopt/backend/device_adamw.hpp>
#include <matopt/backend/device_lion.hpp>
#include <matopt/backend/device_qk_clip.hpp>
#include <matopt/matopt.hpp>

namespace matopt {
using cuda::Engine;
// The presets and the engine entry points for both element types (cuBLAS's S and D call sites); the compositions
// add the remaining policies' kernels (SpectralCap, Adaptive, TrustRatio with LARS, Gram NS, ExactPolar, Identity,
// Sign), whose kernel templates the float instantiations compile.
#define MATOPT_INSTANTIATE(T)                                                                                     \
  template class DeviceOptimizer<Muon<T>, Engine>;                                                                \
  template class DeviceOptimizer<RMNP<T>, Engine>;                                                                \
  template class DeviceOptimizer<ColNorm<T>, Engine>;                                                             \
  template class DeviceOptimizer<OrScale<T>, Engine>;                                                             \
  template class DeviceElementwise<T, rules::AdamW>;                                                              \
  template class DeviceElementwise<T, rules::Lion>;                                                               \
  template Index qk_clip<Engine, T>(Engine&, DeviceMatrixView<T>, DeviceMatrixView<T>, const std::vector<double>&, \
                                    Index, const QkClipOptions&);                                                 \
  template void cuda::orthogonalize<NewtonSchulz<>, T>(Engine&, const T*, T*, Index, Index,                      \
                                                       const NewtonSchulz<>::Options&, Layout);                   \
  template void cuda::orthogonalize_batched<NewtonSchulz<schedules::PolarExpress>, T>(                          \
      Engine&, const T*, T*, Index, Index, Index, const NewtonSchulz<schedules::PolarExpress>::Options&, Layout); \
  template DiagonalDominance diagonal_dominance<Engine, T>(Engine&, DeviceMatrixView<const T>, GramSide);
MATOPT_INSTANTIATE(float)
MATOPT_INSTANTIATE(double)
#undef MATOPT_INSTANTIATE

template class DeviceOptimizer<Optimizer<float, Orthogonalize<GramNewtonSchulz<>>, Momentum<Ema, Plain>,
                                         SpectralCap<TrustRatio<trust::Lars, shape::Spectral>>>,
                               Engine>;
template class DeviceOptimizer<Optimizer<float, Adaptive<RowNormalize, Orthogonalize<>>, Momentum<Sum, Nesterov>,
                                         SpectralCap<Static<shape::MuonOriginal>>>,
                               Engine>;
template class DeviceOptimizer<Optimizer<float, Adaptive<ColNormalize, Orthogonalize<ExactPolar>>, NoMomentum,
                                         Static<shape::ScionColumn>>,
                               Engine>;
template class DeviceOptimizer<Optimizer<float, Identity, Momentum<Ema, Nesterov>, Static<shape::Unit>>, Engine>;
template class DeviceOptimizer<Optimizer<float, Sign, Momentum<Sum, Plain>, Static<shape::Unit>>, Engine>;
// The peers' variants (issue 20): the second moments' kernels (row squared norms, AdaMuon's element-wise moment),
// PolarGrad's dot product on the host SVD, Turbo-Muon's AOL (plain and, through orthogonalize_batched, batched),
// row blocks and the cautious update.
template class DeviceOptimizer<NorMuon<float>, Engine>;
template class DeviceOptimizer<AdaMuon<float>, Engine>;
template class DeviceOptimizer<NAMO<float>, Engine>;
template class DeviceOptimizer<PolarGrad<float>, Engine>;
template class DeviceOptimizer<TurboMuon<float>, Engine>;
template void cuda::orthogonalize_batched<NewtonSchulz<schedules::Turbo>, float>(
    Engine&, const float*, float*, Index, Index, Index, const NewtonSchulz<schedules::Turbo>::Options&, Layout);
}  // namespace matopt

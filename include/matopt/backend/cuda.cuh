// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The CUDA backend umbrella header: include it from CUDA translation units (.cu) and link matopt::cuda.
// The CUDA backend (docs/backends.md#the-cuda-backend): include from CUDA translation units (.cu) and link
// matopt::cuda. cuBLAS for the Newton–Schulz products (SYRK forms, FP32 / TF32 / BF16, strided-batched for
// same-shape matrices), fused kernels for the normalizing steps, one stream and one cuBLAS handle per engine,
// scratch sized once, CUDA errors as matopt::cuda::Error.
//
//   #include <matopt/backend/cuda.cuh>
//   #include <matopt/matopt.hpp>                                            // the presets
//   matopt::DeviceMatrix<float> w(host_w), g(host_g);                      // or DeviceMatrixView of a framework buffer
//   matopt::cuda::Optimizer<matopt::Muon<float>> opt({}, matopt::cuda::Engine(matopt::cuda::Precision::BF16));
//   auto state = opt.make_state(w);
//   opt.step(w, g, state);                                                 // matopt::to_host(w) reads it back
//   matopt::cuda::orthogonalize_batched(opt.engine(), u, d, 64, 256, 256);  // 64 same-shape matrices at once
//
// Eigen in nvcc translation units: define EIGEN_NO_CUDA (matopt's own CUDA programs do; nothing here runs Eigen
// on the device), or nvcc warns (20012, 20014) about the __host__ __device__ annotations in Eigen's headers.
//
// Pieces: cuda/errors.cuh (Error, MATOPT_CUDA_CHECK), cuda/engine.cuh (Engine, Precision), cuda/batched.cuh
// (Batched, BatchScalar), cuda/orthogonalize.cuh (orthogonalize, orthogonalize_batched), cuda/optimizer.cuh
// (Optimizer), cuda/kernels.cuh (the kernels); diagnostics of device matrices: device_diagnostics.hpp.

#include "matopt/backend/cuda/batched.cuh"
#include "matopt/backend/cuda/buffer.cuh"
#include "matopt/backend/cuda/engine.cuh"
#include "matopt/backend/cuda/errors.cuh"
#include "matopt/backend/cuda/kernels.cuh"
#include "matopt/backend/cuda/optimizer.cuh"
#include "matopt/backend/cuda/orthogonalize.cuh"
#include "matopt/backend/device_diagnostics.hpp"
#include "matopt/backend/device_matrix.hpp"
#include "matopt/backend/device_optimizer.hpp"

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// CUDA and cuBLAS failures as matopt::cuda::Error, and the MATOPT_CUDA_CHECK macros that throw it.
// CUDA and cuBLAS status codes become exceptions at the host boundary (docs/design.md#errors:
// CUDA status is checked at every host boundary). Every runtime and cuBLAS call of the CUDA
// backend goes through MATOPT_CUDA_CHECK, every kernel launch through MATOPT_CUDA_CHECK_LAUNCH; a failure
// throws matopt::cuda::Error naming the file, the line, the call and the status.
//
// Bad user input (shapes, hyperparameters) is not a CUDA error: it throws std::invalid_argument before any
// device work, as on the host.

#include <stdexcept>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

/// The CUDA backend: cuda::Engine (cuBLAS Newton–Schulz products, fused kernels), cuda::Optimizer, batched
/// orthogonalization, and cuda::Error. Include <matopt/backend/cuda.cuh> from CUDA translation units.
namespace matopt::cuda {

/// A failed CUDA runtime or cuBLAS call. `code()` is the cudaError_t or cublasStatus_t value and
/// `is_cublas()` says which.
class Error : public std::runtime_error {
 public:
  /// An error with message `what` and status `code`, a cublasStatus_t when `cublas`, else a cudaError_t.
  Error(const std::string& what, int code, bool cublas) : std::runtime_error(what), code_(code), cublas_(cublas) {}
  /// The cudaError_t or cublasStatus_t value.
  int code() const noexcept { return code_; }
  /// Whether code() is a cublasStatus_t.
  bool is_cublas() const noexcept { return cublas_; }

 private:
  int code_;
  bool cublas_;
};

namespace detail {

[[noreturn]] inline void throw_error(const char* name, const char* description, int code, bool cublas, const char* call,
                                     const char* file, int line) {
  throw Error(
      std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + name + " (" + description + ")",
      code, cublas);
}

inline void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    // Reset the runtime's last error (cudaGetLastError), so that a later launch check does not report this
    // one again; a sticky error (a fault inside a kernel) stays and fails every later call, as it should.
    (void)cudaGetLastError();
    throw_error(cudaGetErrorName(status), cudaGetErrorString(status), int(status), false, call, file, line);
  }
}

inline void check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw_error(cublasGetStatusName(status), cublasGetStatusString(status), int(status), true, call, file, line);
}

}  // namespace detail
}  // namespace matopt::cuda

/// Checks a cudaError_t or cublasStatus_t; throws matopt::cuda::Error with file:line and the call text.
#define MATOPT_CUDA_CHECK(call) ::matopt::cuda::detail::check((call), #call, __FILE__, __LINE__)

/// Checks the launch of the kernel just issued (cudaGetLastError: bad configuration, missing image, ...).
/// Errors inside the kernel surface at the next synchronizing call, which is checked too.
#define MATOPT_CUDA_CHECK_LAUNCH(kernel) \
  ::matopt::cuda::detail::check(cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)

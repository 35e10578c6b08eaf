// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: EngineWorkspace, the scratch of the preconditioners' engine forms (namespace detail only).

#include <cstddef>

#include "matopt/config.hpp"
#include "matopt/core/detail/bf16_engine.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/core/detail/workspace.hpp"
#include "matopt/diagnostics/diagonal_dominance.hpp"
#include "matopt/precondition/exact_polar.hpp"

namespace matopt::detail {

/// The workspace of one optimizer for the preconditioners' engine forms (core/detail/engine_form.hpp), sized by the
/// largest parameter it has made state for: named buffers in the engine's memory (Store::vector<T>: host memory on
/// the host, a device vector under DeviceOptimizer) and host scratch. reserve_on grows them, so a step allocates
/// nothing once warm.
template <class T, class Store>
struct EngineWorkspace {
  using Scalar = T;
  using Vector = typename Store::template vector<T>;
  /// Whether the engine's memory is the host's (host_readable then copies nothing, and the host copies are unused).
  static constexpr bool host_memory = Store::host_memory;
  static T* ptr(Vector& v) { return Store::ptr(v); }
  /// Grows (never shrinks) v to hold at least `size` elements.
  static void grow(Vector& v, Index size) { Store::grow(v, size); }

  Vector u, x, y, a, b, q, t, scale;
  Vector u2;       ///< NuclearScaled, moments reading ||U||: U formed again
  Vector gram;     ///< Adaptive: the k x k Gram of U
  Vector vectors;  ///< SpectralCap: u (m elements), then v (n)
  Vector block_w, block_g;  ///< a split_groups row block gathered for a scaling's own update (device)
  DiagonalDominanceWorkspace<T> dominance;   ///< Adaptive: host memory for the Gram's statistics
  Buffer<T> host_u;  ///< a device's U (or P) in host memory: AutoSteps' plan, ExactPolar, Dion's QR
  ExactPolar::Workspace<T> polar;            ///< ExactPolar: the host SVD's buffers
  Buffer<T> host_lines;                      ///< moments' and Dion's line factors
  Buffer<T> host_norms;                      ///< row blocks of split_groups runs: the runs' norms
  Bf16Scratch bf16;                          ///< ns_dtype = bfloat16 on the host engine

  /// Bytes of the engine buffers.
  std::size_t bytes() const {
    std::size_t n = 0;
    for (const Vector* v : {&u, &x, &y, &a, &b, &q, &t, &scale, &u2, &gram, &vectors, &block_w, &block_g})
      n += Store::size(*v);
    return n * sizeof(T);
  }
  /// Bytes of the host scratch.
  std::size_t host_bytes() const {
    return dominance.bytes() + host_u.bytes() + polar.bytes() + host_lines.bytes() + host_norms.bytes() +
           bf16.bytes();
  }
};

/// The host's store: Buffer<T>.
struct HostStore {
  static constexpr bool host_memory = true;
  template <class T>
  using vector = Buffer<T>;
  template <class T>
  static T* ptr(Buffer<T>& v) {
    return v.data();
  }
  template <class T>
  static void grow(Buffer<T>& v, Index size) {
    v.reserve(size);
  }
  template <class T>
  static std::size_t size(const Buffer<T>& v) {
    return v.bytes() / sizeof(T);
  }
};
/// The host optimizer's workspace for preconditioners written in engine form only.
template <class T>
using HostWorkspace = EngineWorkspace<T, HostStore>;

/// Whether the host optimizer steps P through its engine form (HostWorkspace, HostEngine): P declares no host form
/// (`Workspace<T>`, `reserve`, `apply` on Eigen expressions). Identity, Sign, RowNormalize and ColNormalize declare
/// both and keep the host form, whose lazy expressions spare a pass over U; the library's other preconditioners have
/// the engine form only.
template <class P, class T>
inline constexpr bool host_engine_form_v = !has_workspace_v<P, T>;
/// The host optimizer's workspace for P: HostWorkspace<T> for an engine form, else P's own.
template <class P, class T, bool = host_engine_form_v<P, T>>
struct host_workspace {
  using type = HostWorkspace<T>;
};
template <class P, class T>
struct host_workspace<P, T, false> {
  using type = typename P::template Workspace<T>;
};
template <class P, class T>
using host_workspace_t = typename host_workspace<P, T>::type;

}  // namespace matopt::detail

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: Euclidean norms without overflow or underflow, and sign(x), on Eigen expressions (namespace detail).
// Euclidean norms that neither overflow nor underflow (docs/reliability.md): norm_rule.hpp's rule over Eigen
// expressions. sign(x) entry by entry in SIMD packets: Eigen 3.4's own sign() (cwiseSign) is scalar code.

#include <type_traits>

#include <Eigen/Core>

#include "matopt/core/detail/norm_rule.hpp"

namespace matopt::detail {

/// The norm of x (any dense vector or matrix expression, evaluated coefficient-wise: no temporaries)
/// given its plain sum of squares.
template <class Derived>
typename Derived::Scalar rescaled_norm(const Eigen::DenseBase<Derived>& x, typename Derived::Scalar sumsq) {
  using T = typename Derived::Scalar;
  return rescaled(
      sumsq, [&] { return T(x.derived().array().abs().maxCoeff()); },
      [&](T a) { return T((x.derived().array() / a).abs2().sum()); });
}

/// ||x||_2 (Frobenius for a matrix) without overflow or underflow.
template <class Derived>
typename Derived::Scalar robust_norm(const Eigen::DenseBase<Derived>& x) {
  if (x.size() == 0) return typename Derived::Scalar(0);
  return rescaled_norm(x, x.derived().array().abs2().sum());
}

/// sign_of(x) as an Eigen functor with a packet form: both compares against 0 masked to 1 and subtracted, NaN lanes
/// kept (the same bits as the scalar form and as Eigen's scalar sign; Lion's and signum's steps vectorize).
template <class T>
struct SignOf {
  T operator()(const T& x) const { return sign_of(x); }
  template <class Packet>
  Packet packetOp(const Packet& x) const {
    namespace in = Eigen::internal;
    const Packet zero = in::pzero(x), one = in::pset1<Packet>(T(1));
    const Packet s = in::psub(in::pand(in::pcmp_lt(zero, x), one), in::pand(in::pcmp_lt(x, zero), one));
    return in::por(s, in::pandnot(x, in::pcmp_eq(x, x)));  // x where x != x (NaN), else s
  }
};
/// sign_of of each entry of an Eigen expression (array or matrix), lazily.
template <class X>
auto sign_of(const Eigen::DenseBase<X>& x) {
  return x.derived().unaryExpr(SignOf<typename X::Scalar>());
}

}  // namespace matopt::detail

namespace Eigen::internal {
/// SignOf runs in packets for float and double wherever Eigen vectorizes them (pcmp_lt, pcmp_eq, pand, pandnot and
/// por exist for their SSE, AVX, AVX-512 and NEON packets); other scalar types, one entry at a time.
template <class T>
struct functor_traits<matopt::detail::SignOf<T>> {
  enum {
    Cost = 4 * NumTraits<T>::AddCost,
    PacketAccess = std::is_floating_point_v<T> && bool(packet_traits<T>::Vectorizable)
  };
};
}  // namespace Eigen::internal

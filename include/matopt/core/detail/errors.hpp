// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: the std::invalid_argument messages of bad input (namespace detail only).
// Error reporting: bad input throws std::invalid_argument naming the parameter and the shapes, before
// anything is written (docs/design.md#errors).

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "matopt/config.hpp"

namespace matopt::detail {

/// "3x4" for a rows x cols shape.
inline std::string shape_string(Index rows, Index cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

/// Throws std::invalid_argument("<where>: <message pieces...>").
template <class... Parts>
[[noreturn]] void fail(std::string_view where, const Parts&... parts) {
  std::ostringstream os;
  os.precision(17);
  os << where << ": ";
  (os << ... << parts);
  throw std::invalid_argument(os.str());
}

/// Hyperparameter checks shared by every optimizer; each names the parameter and the value.
template <class T>
void require_positive(std::string_view where, std::string_view name, T value) {
  if (!(std::isfinite(static_cast<double>(value)) && value > T(0)))
    fail(where, name, " must be finite and > 0 (got ", value, ")");
}

template <class T>
void require_nonnegative(std::string_view where, std::string_view name, T value) {
  if (!(std::isfinite(static_cast<double>(value)) && value >= T(0)))
    fail(where, name, " must be finite and >= 0 (got ", value, ")");
}

/// The weight-decay factor `keep` W is multiplied by (1 - lr lambda, decoupled) must be finite in T: lr and lambda,
/// each finite, can overflow together.
template <class T>
void require_finite_keep(std::string_view where, T keep, T lr, T lambda) {
  if (!std::isfinite(static_cast<double>(keep)))
    fail(where, "the weight-decay factor 1 - lr * weight_decay is not finite (lr = ", lr, ", weight_decay = ", lambda,
         ")");
}

/// A momentum-like coefficient: beta in [0, 1).
template <class T>
void require_unit_interval(std::string_view where, std::string_view name, T value) {
  if (!(value >= T(0) && value < T(1)))
    fail(where, name, " must be in [0, 1) (got ", value, ")");
}

template <class T>
void require_finite(std::string_view where, std::string_view name, T value) {
  if (!std::isfinite(static_cast<double>(value))) fail(where, name, " must be finite (got ", value, ")");
}

}  // namespace matopt::detail

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: parsing of the facade's key/value option strings (namespace detail only).
// Parsing of key/value option strings for the run-time facade; errors name the key and the value.

#include <cerrno>
#include <cstdlib>
#include <string>
#include <string_view>

#include "matopt/core/detail/errors.hpp"

namespace matopt::detail {

inline double parse_double(std::string_view key, std::string_view value) {
  const std::string s(value);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE)
    fail("matopt options", "option '", key, "': '", value, "' is not a number");
  return v;
}

inline int parse_int(std::string_view key, std::string_view value) {
  const std::string s(value);
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || v < -2147483647L || v > 2147483647L)
    fail("matopt options", "option '", key, "': '", value, "' is not an integer");
  return static_cast<int>(v);
}

inline bool parse_bool(std::string_view key, std::string_view value) {
  if (value == "true" || value == "1" || value == "on" || value == "yes") return true;
  if (value == "false" || value == "0" || value == "off" || value == "no") return false;
  fail("matopt options", "option '", key, "': '", value, "' is not a boolean (true/false/1/0/on/off)");
}

}  // namespace matopt::detail

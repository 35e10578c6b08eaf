// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Option descriptors: a policy declares each of its options once (key, field, check, one-line doc), and the text
/// setter, the key list, the validation and the docs' key table all come from that one declaration.
// A policy with options declares
//   template <class O, class D> static void describe(O& o, D& d);   // O: Options or const Options
// and in it, once per option, d(key, o.field, check, doc); d.rule(f) for a rule across options (f(where) throws
// std::invalid_argument); Inner::describe(o, d) for the options of a policy it wraps. The walkers below
// (detail::set_option, validate_options, option_keys, knows_option, and option_info, which lists each option with
// what it accepts, its value and its doc) are the only code that reads options from text or checks them one by
// one. A check is any type with operator()(where, key, value) (throws for a bad value) and text() (what it
// accepts, for the docs); one with parse(key, text, field) reads the value itself (an enum's names, a schedule by
// name), one with name(field) gives the value's text.

#include <charconv>
#include <cstddef>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "matopt/config.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/parse.hpp"

namespace matopt {
namespace detail {
/// A number as messages print it ("1", "0.5").
inline std::string number_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace detail

/// One option of an optimizer, from its descriptor: what `AnyOptimizer::option_info()` lists and docs/options.md shows.
struct OptionInfo {
  std::string key;     ///< the text key (set_option, the facade's set)
  std::string values;  ///< what it accepts, e.g. "number > 0", "integer >= 1", "auto, plain, gram"
  std::string value;   ///< its current value as text ("" where it has no text form)
  std::string doc;     ///< one line on what it does
};
/// The options of X (an optimizer or a policy, by its describe) with o's values.
template <class X, class O>
std::vector<OptionInfo> option_info(const O& o);

/// The checks of option descriptors (@ref policy_common).
namespace checks {

/// Any value (a boolean, or values a rule of the policy checks).
struct Any {
  /// Accepts every value.
  template <class V>
  void operator()(std::string_view, std::string_view, const V&) const {}
  /// "" (no range).
  static std::string text() { return ""; }
};

/// Finite and > 0.
struct Positive {
  /// Throws std::invalid_argument unless v is finite and > 0.
  template <class V>
  void operator()(std::string_view where, std::string_view key, const V& v) const {
    detail::require_positive(where, key, v);
  }
  /// "> 0".
  static std::string text() { return "> 0"; }
};

/// Finite and >= 0.
struct NonNegative {
  /// Throws std::invalid_argument unless v is finite and >= 0.
  template <class V>
  void operator()(std::string_view where, std::string_view key, const V& v) const {
    detail::require_nonnegative(where, key, v);
  }
  /// ">= 0".
  static std::string text() { return ">= 0"; }
};

/// In [0, 1): a momentum-like coefficient.
struct UnitInterval {
  /// Throws std::invalid_argument unless v is in [0, 1).
  template <class V>
  void operator()(std::string_view where, std::string_view key, const V& v) const {
    detail::require_unit_interval(where, key, v);
  }
  /// "in [0, 1)".
  static std::string text() { return "in [0, 1)"; }
};

/// In (0, 1]: a fraction or a probability that may be 1.
struct Fraction {
  /// Throws std::invalid_argument unless v is in (0, 1].
  template <class V>
  void operator()(std::string_view where, std::string_view key, const V& v) const {
    if (!(v > 0 && v <= 1)) detail::fail(where, key, " must be in (0, 1] (got ", v, ")");
  }
  /// "in (0, 1]".
  static std::string text() { return "in (0, 1]"; }
};

/// >= min (NaN refused).
struct AtLeast {
  double min;  ///< the least value accepted
  /// Throws std::invalid_argument unless v >= min.
  template <class V>
  void operator()(std::string_view where, std::string_view key, const V& v) const {
    if (!(double(v) >= min)) detail::fail(where, key, " must be >= ", min, " (got ", v, ")");
  }
  /// ">= min".
  std::string text() const { return ">= " + detail::number_text(min); }
};

/// In [lo, hi].
struct InRange {
  double lo;  ///< the least value accepted
  double hi;  ///< the greatest value accepted
  /// Throws std::invalid_argument unless lo <= v <= hi.
  template <class V>
  void operator()(std::string_view where, std::string_view key, const V& v) const {
    if (!(double(v) >= lo && double(v) <= hi))
      detail::fail(where, key, " must be in [", lo, ", ", hi, "] (got ", v, ")");
  }
  /// "in [lo, hi]".
  std::string text() const { return "in [" + detail::number_text(lo) + ", " + detail::number_text(hi) + "]"; }
};

/// An enum's value by name: parse() reads one of the names, text() lists them.
template <class E>
struct OneOf {
  const std::pair<const char*, E>* names;  ///< the names and their values
  std::size_t count;                       ///< how many
  const char* what;                        ///< e.g. "an lr rule", for messages (nullptr: "one of ...")
  /// Every enum value is valid.
  template <class V>
  void operator()(std::string_view, std::string_view, const V&) const {}
  /// The names, comma-separated.
  std::string text() const {
    std::string s;
    for (std::size_t i = 0; i < count; ++i) (s += i ? ", " : "") += names[i].first;
    return s;
  }
  /// Sets e to the value named by text; throws std::invalid_argument naming the key and the names otherwise.
  void parse(std::string_view key, std::string_view value, E& e) const {
    for (std::size_t i = 0; i < count; ++i)
      if (value == names[i].first) {
        e = names[i].second;
        return;
      }
    if (what) detail::fail("matopt options", "option '", key, "': '", value, "' is not ", what, " (", text(), ")");
    detail::fail("matopt options", "option '", key, "': '", value, "' is not one of ", text());
  }
  /// The name of e ("" if it has none).
  const char* name(E e) const {
    for (std::size_t i = 0; i < count; ++i)
      if (names[i].second == e) return names[i].first;
    return "";
  }
};
/// OneOf over a table of names (a static array), e.g. one_of(lr_rule_names, "an lr rule").
template <class E, std::size_t N>
constexpr OneOf<E> one_of(const std::pair<const char*, E> (&names)[N], const char* what = nullptr) {
  return {names, N, what};
}

}  // namespace checks

namespace detail {

inline void parse_value(std::string_view key, std::string_view value, double& v) { v = parse_double(key, value); }
inline void parse_value(std::string_view key, std::string_view value, float& v) { v = float(parse_double(key, value)); }
inline void parse_value(std::string_view key, std::string_view value, int& v) { v = parse_int(key, value); }
inline void parse_value(std::string_view key, std::string_view value, bool& v) { v = parse_bool(key, value); }
/// "512,128,128": comma-separated integers ("" clears).
inline void parse_value(std::string_view key, std::string_view value, std::vector<Index>& v) {
  std::vector<Index> read;  // v changes only when every entry parses
  while (!value.empty()) {
    const std::size_t comma = value.find(',');
    read.push_back(parse_int(key, value.substr(0, comma)));
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
  }
  v = std::move(read);
}

template <class C, class F, class = void>
inline constexpr bool check_parses_v = false;
template <class C, class F>
inline constexpr bool check_parses_v<
    C, F, std::void_t<decltype(std::declval<const C&>().parse(std::string_view(), std::string_view(),
                                                              std::declval<F&>()))>> = true;

/// Sets the first option named `key` from text.
struct OptionSetter {
  std::string_view key, value;
  bool found = false;
  template <class F, class C>
  void operator()(std::string_view k, F& field, const C& check, const char*) {
    if (found || k != key) return;
    if constexpr (check_parses_v<C, F>) check.parse(k, value, field);
    else parse_value(k, value, field);
    found = true;
  }
  template <class R>
  void rule(R&&) {}
};

/// Checks every option, then the rules.
struct OptionValidator {
  std::string_view where;
  template <class F, class C>
  void operator()(std::string_view k, const F& field, const C& check, const char*) {
    check(where, k, field);
  }
  template <class R>
  void rule(R&& r) {
    r(where);
  }
};

template <class C, class F, class = void>
inline constexpr bool check_names_v = false;
template <class C, class F>
inline constexpr bool check_names_v<C, F, std::void_t<decltype(std::string(std::declval<const C&>().name(
                                                 std::declval<const F&>())))>> = true;

/// A field's value as text, as set_option reads it ("" where it has no text form).
template <class F, class C>
std::string value_text(const F& v, const C& check) {
  if constexpr (check_names_v<C, F>) {
    return check.name(v);
  } else if constexpr (std::is_same_v<F, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_floating_point_v<F>) {
    char text[64];  // the shortest text that reads back as v
    return std::string(text, std::to_chars(text, text + sizeof(text), v).ptr);
  } else if constexpr (std::is_arithmetic_v<F>) {
    return std::to_string(v);
  } else if constexpr (std::is_same_v<F, std::vector<Index>>) {
    std::string s;
    for (Index x : v) (s += s.empty() ? "" : ",") += std::to_string(x);
    return s;
  } else {
    return "";
  }
}

/// Collects the options (each key once, in declaration order) with their current values.
struct OptionLister {
  std::vector<OptionInfo> options;
  template <class F, class C>
  void operator()(std::string_view k, const F& field, const C& check, const char* doc) {
    for (const OptionInfo& o : options)
      if (o.key == k) return;
    std::string values;
    if constexpr (std::is_same_v<F, bool>) values = "boolean";
    else if constexpr (std::is_same_v<F, int>) values = "integer " + check.text();
    else if constexpr (std::is_floating_point_v<F>) values = "number " + check.text();
    else values = check.text();
    options.push_back({std::string(k), values, value_text(field, check), doc});
  }
  template <class R>
  void rule(R&&) {}
};

/// Sets option `key` of X (a type with static describe(O&, D&)) from text: false for a key X does not know.
template <class X, class O>
bool set_option(O& o, std::string_view key, std::string_view value) {
  OptionSetter s{key, value};
  X::describe(o, s);
  return s.found;
}
/// Throws std::invalid_argument, the message starting with `where`, naming the first bad option of X.
template <class X, class O>
void validate_options(const O& o, std::string_view where) {
  OptionValidator v{where};
  X::describe(o, v);
}
/// The keys of options, comma-separated ("" for none).
inline std::string join_keys(const std::vector<OptionInfo>& options) {
  std::string keys;
  for (const OptionInfo& o : options) (keys += keys.empty() ? "" : ", ") += o.key;
  return keys;
}
/// X's keys, comma-separated ("" for none).
template <class X, class O = typename X::Options>
std::string option_keys() {
  return join_keys(option_info<X>(O{}));
}
/// Whether X has an option named `key`.
template <class X, class O = typename X::Options>
bool knows_option(std::string_view key) {
  for (const OptionInfo& o : option_info<X>(O{}))
    if (o.key == key) return true;
  return false;
}

}  // namespace detail
template <class X, class O>
std::vector<OptionInfo> option_info(const O& o) {
  detail::OptionLister l;
  X::describe(o, l);
  return std::move(l.options);
}

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The binary form of optimizer state inside a checkpoint, and CheckpointError.
// The binary form of optimizer state (checkpoint.hpp writes the file around it). A state lists its fields
// with `fields(f)`, calling f(name, field) for each; the Writer appends, the Reader checks and restores:
//
//   field   := name:string  kind:u8  value
//   value   := i64 | f32/f64 (the state's scalar) | u8 (bool) | u64 length + elements (vector) |
//              fields... end-marker (a nested state)
//   string  := u64 length + bytes
//
// Native byte order (the file header records it). The Reader never trusts a length: every read is bounded
// by the bytes left, and a vector's length must equal the length the live state already has (made by
// make_state for the current parameter), so a file for another shape is rejected, never allocated.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include <Eigen/Core>

#include "matopt/config.hpp"

namespace matopt {

/// A checkpoint that cannot be loaded: truncated, corrupted, another version, scalar type, optimizer or
/// shape. The live state is unchanged when this is thrown.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

enum class FieldKind : std::uint8_t { Int = 1, Float = 2, Double = 3, Bool = 4, FloatVector = 5, DoubleVector = 6,
                                      Nested = 7, End = 8 };

class Writer;
class Reader;
/// A state that writes and reads itself (the facade's type-erased state) instead of listing fields.
template <class S, class = void>
inline constexpr bool has_write_v = false;
template <class S>
inline constexpr bool has_write_v<S, std::void_t<decltype(std::declval<const S&>().write(std::declval<Writer&>()))>> =
    true;
/// A state that checks the meaning of its loaded fields: `void check_loaded(Fail&& fail) const`.
template <class S, class = void>
inline constexpr bool has_check_loaded_v = false;
template <class S>
inline constexpr bool
    has_check_loaded_v<S, std::void_t<decltype(std::declval<const S&>().check_loaded(std::declval<void (*)()>()))>> =
        true;

template <class V>
constexpr FieldKind kind_of() {
  if constexpr (std::is_same_v<V, bool>) return FieldKind::Bool;
  else if constexpr (std::is_same_v<V, float>) return FieldKind::Float;
  else if constexpr (std::is_same_v<V, double>) return FieldKind::Double;
  else if constexpr (std::is_integral_v<V> || std::is_enum_v<V>) return FieldKind::Int;
  else if constexpr (std::is_same_v<V, Eigen::Matrix<float, Eigen::Dynamic, 1>>) return FieldKind::FloatVector;
  else if constexpr (std::is_same_v<V, Eigen::Matrix<double, Eigen::Dynamic, 1>>) return FieldKind::DoubleVector;
  else return FieldKind::Nested;
}

/// Reads a scalar field (integer, enum, bool or floating point) of a state by its path: the checkpoint's field
/// names joined by '.', e.g. "steps" or "precondition.ns_steps". Returns whether it was found (into `out`);
/// appends every scalar path to `known` (for the caller's error message). Vectors are not scalars.
template <class S>
bool find_scalar(const S& s, std::string_view path, double& out, std::string& known, const std::string& prefix = {}) {
  bool found = false;
  const_cast<S&>(s).fields([&](const char* name, const auto& v) {  // fields() only reads here
    using V = std::decay_t<decltype(v)>;
    const std::string full = prefix.empty() ? std::string(name) : prefix + "." + name;
    constexpr FieldKind kind = kind_of<V>();
    if constexpr (kind == FieldKind::Nested) {
      found = find_scalar(v, path, out, known, full) || found;
    } else if constexpr (kind != FieldKind::FloatVector && kind != FieldKind::DoubleVector) {
      (known += known.empty() ? "" : ", ") += full;
      if (full == path) {
        if constexpr (std::is_enum_v<V>) out = double(static_cast<std::int64_t>(v));
        else out = double(v);
        found = true;
      }
    }
  });
  return found;
}

class Writer {
 public:
  template <class P>
  void pod(const P& v) {
    static_assert(std::is_trivially_copyable_v<P>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof(P));
  }
  void bytes(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }
  void string(std::string_view s) {
    pod(std::uint64_t(s.size()));
    out_.append(s.data(), s.size());
  }

  /// Appends every field of `state` (its fields() only reads when given a Writer).
  template <class S>
  void state(const S& s) {
    if constexpr (has_write_v<S>) s.write(*this);
    else const_cast<S&>(s).fields([&](const char* name, auto& v) { field(name, v); });
  }

  template <class V>
  void field(const char* name, const V& v) {
    constexpr FieldKind kind = kind_of<V>();
    string(name);
    pod(kind);
    if constexpr (kind == FieldKind::Bool) pod(std::uint8_t(v ? 1 : 0));
    else if constexpr (kind == FieldKind::Int) pod(std::int64_t(v));
    else if constexpr (kind == FieldKind::Float || kind == FieldKind::Double) pod(v);
    else if constexpr (kind == FieldKind::FloatVector || kind == FieldKind::DoubleVector) {
      pod(std::uint64_t(v.size()));
      bytes(v.data(), std::size_t(v.size()) * sizeof(typename V::Scalar));
    } else {
      state(v);
      pod(FieldKind::End);
    }
  }

  const std::string& data() const { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const char* data, std::size_t size) : p_(data), left_(size) {}

  template <class P>
  P pod(const char* what) {
    static_assert(std::is_trivially_copyable_v<P>);
    need(sizeof(P), what);
    P v;
    std::memcpy(&v, p_, sizeof(P));
    advance(sizeof(P));
    return v;
  }
  std::string string(const char* what) {
    const auto n = pod<std::uint64_t>(what);
    need(n, what);
    std::string s(p_, std::size_t(n));
    advance(std::size_t(n));
    return s;
  }
  void bytes(void* dst, std::size_t n, const char* what) {
    need(n, what);
    if (n != 0) std::memcpy(dst, p_, n);
    advance(n);
  }
  std::size_t left() const { return left_; }

  /// Restores every field of `state` in place. Throws CheckpointError on any mismatch; `state` may then be
  /// partly overwritten, so callers read into a copy.
  /// After its fields, a state that declares `check_loaded(fail)` checks what the fields mean together (a
  /// second moment is not negative, a calibration is positive, ...): `fail(parts...)` throws CheckpointError.
  template <class S>
  void state(S& s) {
    if constexpr (has_write_v<S>) s.read(*this);
    else s.fields([&](const char* name, auto& v) { field(name, v); });
    if constexpr (has_check_loaded_v<S>) s.check_loaded([](const auto&... parts) { fail(parts...); });
  }

  template <class V>
  void field(const char* name, V& v) {
    constexpr FieldKind kind = kind_of<V>();
    const std::string got = string("a field name");
    if (got != name) fail("expected field '", name, "' but found '", got, "'");
    const auto k = pod<FieldKind>("a field kind");
    if (k != kind) fail("field '", name, "' has kind ", int(k), ", expected ", int(kind));
    if constexpr (kind == FieldKind::Bool) {
      const auto b = pod<std::uint8_t>(name);
      if (b > 1) fail("field '", name, "' is not a boolean (", int(b), ")");
      v = b == 1;
    } else if constexpr (kind == FieldKind::Int) {
      const auto x = pod<std::int64_t>(name);
      // Shapes are not restored but must match the live state (made for the current parameter).
      if (is_shape(name) && x != std::int64_t(v))
        fail("field '", name, "' is ", x, " in the file but ", std::int64_t(v), " in the live state");
      // Every other integer of a state counts something (steps, skipped steps, switches, a rank).
      if (!is_shape(name) && x < 0) fail("field '", name, "' is ", x, ": a count cannot be negative");
      v = static_cast<V>(x);
    } else if constexpr (kind == FieldKind::Float || kind == FieldKind::Double) {
      v = pod<V>(name);
      if (!std::isfinite(v)) fail("field '", name, "' is not finite (", double(v), ")");
    } else if constexpr (kind == FieldKind::FloatVector || kind == FieldKind::DoubleVector) {
      const auto n = pod<std::uint64_t>(name);
      if (n != std::uint64_t(v.size()))
        fail("field '", name, "' has ", n, " elements in the file but ", v.size(), " in the live state");
      const std::size_t bytes = std::size_t(n) * sizeof(typename V::Scalar);
      need(bytes, name);
      if (bytes != 0) std::memcpy(v.data(), p_, bytes);
      advance(bytes);
      // Steps keep states finite (a non-finite gradient throws, is skipped or zeroed; only a momentum summed past
      // the type's largest value could overflow), and a step on an inf or NaN would spread it: refused.
      for (Eigen::Index i = 0; i < v.size(); ++i)
        if (!std::isfinite(v(i))) fail("field '", name, "' has a non-finite entry (", double(v(i)), ") at index ", i);
    } else {
      state(v);
      if (pod<FieldKind>("an end marker") != FieldKind::End) fail("field '", name, "' does not end where expected");
    }
  }

  template <class... Parts>
  [[noreturn]] static void fail(const Parts&... parts) {
    std::string msg = "matopt checkpoint: ";
    (append(msg, parts), ...);
    throw CheckpointError(msg);
  }

 private:
  static bool is_shape(std::string_view name) { return name == "rows" || name == "cols" || name == "layout"; }
  template <class X>
  static void append(std::string& s, const X& x) {
    if constexpr (std::is_arithmetic_v<X>) s += std::to_string(x);
    else s += x;
  }
  void need(std::uint64_t n, const char* what) const {
    if (n > left_) fail("truncated: ", what, " needs ", n, " bytes but ", left_, " are left");
  }
  void advance(std::size_t n) {
    p_ += n;
    left_ -= n;
  }

  const char* p_;
  std::size_t left_;
};

}  // namespace detail
}  // namespace matopt

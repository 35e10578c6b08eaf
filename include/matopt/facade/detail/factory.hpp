// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: make_optimizer's definition over the preset table, with the presets, AdamW and Lion it builds.
// Included by facade/any_optimizer.hpp in a header-only build. A program linked with matopt::runtime
// (MATOPT_RUNTIME_COMPILED) gets make_optimizer, the presets' models and optimizer_names compiled there
// (src/runtime*.cpp, which include this file), and its own files parse none of the presets' headers: a file that
// builds presets by name compiles in about two thirds of the time (docs/performance.md#compile-time).

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "matopt/adamw.hpp"
#include "matopt/facade/any_optimizer.hpp"
#include "matopt/lion.hpp"
#include "matopt/presets.hpp"

namespace matopt {

namespace detail {
template <class Opt>
AnyOptimizer<typename Opt::Scalar> configured(const Config& config) {
  AnyOptimizer<typename Opt::Scalar> any{Opt{}};
  // A named schedule replaces the whole schedule, so it goes before the keys that adjust it.
  if (auto it = config.find("ns_schedule"); it != config.end()) any.set(it->first, it->second);
  for (const auto& [key, value] : config)
    if (key != "ns_schedule") any.set(key, value);
  return any;
}
}  // namespace detail

/// The elementwise presets of the facade (not matopt::Optimizer; their defaults are in adamw.hpp and lion.hpp), as
/// X(Alias, facade name, runtime part), beside the matrix presets' table (presets.hpp).
#define MATOPT_ELEMENTWISE_PRESETS(X) X(AdamW, "adamw", elementwise) X(Lion, "lion", elementwise)
/// Every preset make_optimizer builds, as X(Alias, facade name, ...): the matrix table, then AdamW and Lion.
#define MATOPT_FACADE_PRESETS(X) MATOPT_MATRIX_PRESETS(X) MATOPT_ELEMENTWISE_PRESETS(X)

/// A table row's facade name.
#define MATOPT_FACADE_NAME(Alias, facade_name, ...) facade_name,
/// Builds a table row's preset when it answers the name and options.
#define MATOPT_MAKE_PRESET(Alias, facade_name, ...) \
  if (detail::FacadeName(facade_name).selects(name, config)) return detail::configured<Alias<T>>(config);

namespace detail {
/// A facade name of the preset table: "name", or "name?key=value" for a row built only when the options hold
/// key=value (muon?ns_steps=auto: MuonAutoSteps); such a row goes before its name's plain one.
struct FacadeName {
  std::string_view name, key, value;
  explicit FacadeName(std::string_view row) : name(row) {
    const auto q = row.find('?'), eq = row.find('=');
    if (q == std::string_view::npos || eq == std::string_view::npos || eq < q) return;
    name = row.substr(0, q);
    key = row.substr(q + 1, eq - q - 1);
    value = row.substr(eq + 1);
  }
  bool selects(std::string_view requested, const Config& config) const {
    if (requested != name) return false;
    if (key.empty()) return true;
    const auto it = config.find(key);
    return it != config.end() && it->second == value;
  }
};
/// The facade names of the preset table, each once, in its order ("muon, moonlight_muon, rmnp, ...").
inline std::string preset_names() {
  const char* rows[] = {MATOPT_FACADE_PRESETS(MATOPT_FACADE_NAME)};
  std::vector<std::string_view> seen;
  std::string names;
  for (const char* row : rows) {
    const std::string_view name = FacadeName(row).name;
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
    seen.push_back(name);
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  return names;
}
}  // namespace detail

#if !defined(MATOPT_RUNTIME_COMPILED)  // else in facade/any_optimizer.hpp, from the library
inline const std::string optimizer_names = detail::preset_names();
#endif

template <class T>
AnyOptimizer<T> make_optimizer(std::string_view name, const Config& config) {
  MATOPT_FACADE_PRESETS(MATOPT_MAKE_PRESET)
  detail::fail("matopt::make_optimizer", "unknown optimizer '", name, "' (known: ", optimizer_names, ")");
}
#undef MATOPT_FACADE_NAME
#undef MATOPT_MAKE_PRESET

namespace detail {
/// HybridOptimizer's default second optimizer, AdamW with its defaults (a function, so that matopt::runtime can
/// compile it once).
template <class T>
AnyOptimizer<T> default_adamw() {
  return AnyOptimizer<T>(AdamW<T>{});
}
}  // namespace detail

#if defined(MATOPT_RUNTIME_COMPILED)
// Each preset's model is compiled in one of src/runtime_*.cpp, so that the library builds in parallel.
#define MATOPT_EXTERN_PRESET(Preset, ...)                                                  \
  extern template AnyOptimizer<float> detail::configured<Preset<float>>(const Config&); \
  extern template AnyOptimizer<double> detail::configured<Preset<double>>(const Config&);
MATOPT_FACADE_PRESETS(MATOPT_EXTERN_PRESET)
#undef MATOPT_EXTERN_PRESET
#endif

}  // namespace matopt

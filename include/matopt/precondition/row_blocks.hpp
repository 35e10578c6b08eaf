#pragma once
// Structure-aware orthogonalization (issue 20; ../shared/design/variants.md §11): a weight whose rows are
// several matrices is orthogonalized block by block, each block scaled by its own shape.
//   heads = H:          W of (H hd) x d is H blocks of hd rows (the heads of a q, k or v projection; dion
//                       `num_heads`), each block's step that of an hd x d matrix.
//   split_sizes = r_i:  contiguous row blocks of r_i rows (packed QKV, unequal under GQA: q_dim, kv_dim,
//                       kv_dim; dion `split_sizes`, NVIDIA's contiguous split of the EO docstring).
// The scaling then sees each block as the parameter: s(r_i, d) (dion: adjust_lr on the block's shape).
// The momentum stays one buffer. Blocks run one after another (each uses every thread in its products).

#include <string>
#include <string_view>
#include <vector>

#include "matopt/config.hpp"
#include "matopt/core/errors.hpp"
#include "matopt/core/parse.hpp"

namespace matopt {

struct RowBlocks {
  int heads = 1;                   ///< H equal blocks of rows (1: the whole matrix)
  std::vector<Index> split_sizes;  ///< or explicit block heights, summing to the rows (empty: none)

  bool blocked() const { return heads > 1 || !split_sizes.empty(); }
  /// Whether m rows split as asked.
  bool fits(Index m) const {
    if (!split_sizes.empty()) {
      Index total = 0;
      for (Index r : split_sizes) total += r;
      return total == m;
    }
    return m % heads == 0;
  }
  /// f(first_row, rows) for each block of an m-row matrix that fits().
  template <class F>
  void for_each(Index m, F&& f) const {
    Index first = 0;
    if (!split_sizes.empty()) {
      for (Index r : split_sizes) {
        f(first, r);
        first += r;
      }
    } else {
      for (int h = 0; h < heads; ++h) f(Index(h) * (m / heads), m / heads);
    }
  }
  /// Rows of the first block (the shape effective_lr reports).
  Index first_rows(Index m) const { return !split_sizes.empty() ? split_sizes.front() : m / heads; }

  void validate(std::string_view where) const {
    if (heads < 1) detail::fail(where, "heads must be >= 1 (got ", heads, ")");
    if (heads > 1 && !split_sizes.empty())
      detail::fail(where, "heads (", heads, ") and split_sizes are exclusive: give one of them");
    for (Index r : split_sizes)
      if (r < 1) detail::fail(where, "split_sizes must be >= 1 (got ", r, ")");
  }
  /// A matrix of m rows must split as asked (checked before a step writes anything).
  void check(Index m, Index n, std::string_view where) const {
    if (fits(m)) return;
    if (!split_sizes.empty()) {
      std::string sizes;
      for (Index r : split_sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(r);
      detail::fail(where, "split_sizes (", sizes, ") do not add up to the rows of W (", detail::shape_string(m, n), ")");
    }
    detail::fail(where, "heads = ", heads, " does not divide the rows of W (", detail::shape_string(m, n), ")");
  }

  bool set_option(std::string_view key, std::string_view value) {
    if (key == "heads") {
      heads = detail::parse_int(key, value);
    } else if (key == "split_sizes") {  // "512,128,128"; "" clears
      split_sizes.clear();
      std::string_view rest = value;
      while (!rest.empty()) {
        const std::size_t comma = rest.find(',');
        split_sizes.push_back(detail::parse_int(key, rest.substr(0, comma)));
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    } else {
      return false;
    }
    return true;
  }
  static constexpr const char* option_keys() { return "heads, split_sizes"; }
};

}  // namespace matopt

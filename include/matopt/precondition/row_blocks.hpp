// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// RowBlocks: per-head and split-QKV orthogonalization, a weight's rows stepped as several matrices.
// Structure-aware orthogonalization (docs/math.md#row-blocks-per-head-and-split-qkv): a weight whose rows are
// several matrices is orthogonalized block by block, each block scaled by its own shape.
//   heads = H:          W of (H hd) x d is H blocks of hd rows (the heads of a q, k or v projection; dion
//                       `num_heads`), each block's step that of an hd x d matrix.
//   split_sizes = r_i:  contiguous row blocks of r_i rows (packed QKV, unequal under GQA: q_dim, kv_dim,
//                       kv_dim; dion `split_sizes`, NVIDIA's contiguous split of the EO docstring).
//   split_sizes = r_i with split_groups = G: Megatron's interleaved linear_qkv (muon_split_qkv; TensorParallel-
//                       Muon.orthogonalize): the rows are G query groups of sum(r_i) rows each, [hpg dk | dk | dk];
//                       block i is slice i of every group (all the Q rows, all the K rows, all the V rows), of
//                       G r_i rows in group order, orthogonalized once and scaled by s(G r_i, d).
// The scaling then sees each block as the parameter: s(rows, d) (dion: adjust_lr on the block's shape). A
// stateful preconditioner (SecondMoment: per-head NorMuon) keeps its state per block. The momentum stays one
// buffer. On the host, blocks run in parallel, each on one thread (Optimizer::parallel_blocks).

#include <string>
#include <string_view>
#include <vector>

#include "matopt/config.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/options.hpp"

namespace matopt {

/// The rows of one block: `groups` runs of `rows` consecutive rows, run k starting at row first + k * stride.
/// An index list for Eigen's indexed views (size() and operator[]): W's block is w(set, Eigen::all).
struct RowSet {
  /// First row of run 0; rows per run; distance between runs' starts; number of runs.
  /// @{
  Index first = 0, rows = 0, stride = 0, groups = 1;
  /// @}
  /// Number of rows in the set, rows * groups.
  Index size() const { return rows * groups; }
  /// The i-th row index of the set (i < size()).
  Index operator[](Index i) const { return groups == 1 ? first + i : first + (i / rows) * stride + i % rows; }
};

/// Options that split W's rows into blocks, each orthogonalized and scaled as a matrix of its own shape (base of
/// Orthogonalize's options): `heads` equal blocks (the heads of a q, k or v projection), or contiguous blocks of
/// `split_sizes` rows (packed QKV), or with `split_groups` = G, Megatron's interleaved QKV (block i is slice i of
/// every one of G groups). The momentum stays one buffer; a stateful preconditioner keeps its state per block.
struct RowBlocks {
  int heads = 1;                   ///< H equal blocks of rows (1: the whole matrix)
  std::vector<Index> split_sizes;  ///< or explicit block heights (within a group), summing to the group's rows
  int split_groups = 1;            ///< G > 1: split_sizes repeat G times, block i = slice i of every group (Megatron)

  /// Whether the rows are split at all (heads > 1 or split_sizes given).
  bool blocked() const { return heads > 1 || !split_sizes.empty(); }
  /// Whether m rows split as asked.
  bool fits(Index m) const {
    if (!split_sizes.empty()) return group_rows() * split_groups == m;
    return m % heads == 0;
  }
  /// Number of blocks.
  Index count() const { return split_sizes.empty() ? Index(heads) : Index(split_sizes.size()); }
  /// Block i (< count()) of an m-row matrix that fits().
  RowSet block(Index m, Index i) const {
    if (split_sizes.empty()) return RowSet{i * (m / heads), m / heads, m, 1};
    Index first = 0;
    for (Index k = 0; k < i; ++k) first += split_sizes[std::size_t(k)];
    return RowSet{first, split_sizes[std::size_t(i)], group_rows(), split_groups};
  }
  /// f(RowSet) for each block of an m-row matrix that fits(), in order.
  template <class F>
  void for_each(Index m, F&& f) const {
    for (Index i = 0; i < count(); ++i) f(block(m, i));
  }
  /// Rows of the shape effective_lr reports for an m-row W: the first block's where the rows split, else m.
  Index first_rows(Index m) const {
    if (!blocked() || !fits(m)) return m;
    return !split_sizes.empty() ? split_sizes.front() * split_groups : m / heads;
  }
  /// Whether an m-row W splits into two or more blocks, all of one shape (heads, or equal split sizes).
  bool equal_blocks(Index m) const {
    if (!blocked() || !fits(m) || count() < 2) return false;
    for (Index i = 1; i < count(); ++i)
      if (block(m, i).size() != block(m, 0).size()) return false;
    return true;
  }

  /// The options (core/options.hpp): heads, split_sizes, split_groups; heads and split_sizes exclusive,
  /// split_groups only with split_sizes.
  template <class O, class D>
  static void describe(O& o, D& d) {
    d("heads", o.heads, checks::AtLeast{1}, "H equal blocks of rows, each orthogonalized alone (per-head)");
    d("split_sizes", o.split_sizes, SplitSizes{}, "contiguous blocks of these heights (split QKV)");
    d("split_groups", o.split_groups, checks::AtLeast{1}, "G interleaved groups of split_sizes (Megatron's QKV)");
    d.rule([&o](std::string_view where) {
      if (o.heads > 1 && !o.split_sizes.empty())
        detail::fail(where, "heads (", o.heads, ") and split_sizes are exclusive: give one of them");
      if (o.split_groups > 1 && o.split_sizes.empty())
        detail::fail(where, "split_groups (", o.split_groups, ") needs split_sizes (the rows of one group's blocks)");
    });
  }
  /// A matrix of m rows must split as asked (checked before a step writes anything).
  void check(Index m, Index n, std::string_view where) const {
    if (fits(m)) return;
    if (!split_sizes.empty()) {
      std::string sizes;
      for (Index r : split_sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(r);
      if (split_groups > 1)
        detail::fail(where, "split_groups = ", split_groups, " groups of split_sizes (", sizes,
                     ") do not add up to the rows of W (", detail::shape_string(m, n), ")");
      detail::fail(where, "split_sizes (", sizes, ") do not add up to the rows of W (", detail::shape_string(m, n), ")");
    }
    detail::fail(where, "heads = ", heads, " does not divide the rows of W (", detail::shape_string(m, n), ")");
  }

 private:
  /// split_sizes: comma-separated integers, each >= 1 ("" clears).
  struct SplitSizes {
    void operator()(std::string_view where, std::string_view, const std::vector<Index>& sizes) const {
      for (Index r : sizes)
        if (r < 1) detail::fail(where, "split_sizes must be >= 1 (got ", r, ")");
    }
    static std::string text() { return "comma-separated integers >= 1"; }
  };
  Index group_rows() const {
    Index total = 0;
    for (Index r : split_sizes) total += r;
    return total;
  }
};

}  // namespace matopt

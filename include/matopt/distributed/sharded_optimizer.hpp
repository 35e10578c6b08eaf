// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// ShardedOptimizer: data-parallel training with the optimizer state sharded ZeRO-1 style (arXiv 1910.02054).
// ShardedOptimizer<Opt>: data-parallel training with the optimizer state sharded ZeRO-1 style
// (Rajbhandari et al., arXiv 1910.02054): every rank holds all parameters and computes a local gradient;
// each piece of optimizer state lives on exactly one rank. Per step, collectively:
//   1. gradients: every rank packs its local gradients by destination rank, then reduce_scatter
//      (GradSync::ReduceScatter) or all_reduce (GradSync::AllReduce); the reduced gradient is the sum over
//      ranks or, by default, the mean (GradReduction::Average: sum / size, i.e. local gradients are means
//      over each rank's share of the batch);
//   2. the holder of each piece steps it with the wrapped optimizer;
//   3. the updated pieces are all-gathered (one MPI_Allgatherv over a packed buffer) into every replica.
// Two ways to cut the state (ShardMode):
//   Owner      each matrix whole on one owner rank, chosen by a deterministic greedy plan balancing the
//              preconditioning cost (m n min(m,n) for Orthogonalize/AutoSteps/ExactPolar/Adaptive, the second
//              moments and PolarGrad of those, and Dion; m n otherwise).
//              Any optimizer (Muon, OrScale, RMNP, ...): the owner runs Opt's own (batched) step, so a
//              matrix's update is exactly the single-process one. This is the owner-based distributed Muon
//              (no extra gather of gradient shards, unlike Moonlight's, arXiv 2502.16982 §2.3).
//   RowSharded every matrix cut along the normalized dimension across all ranks: rows for RowNormalize
//              (RMNP, arXiv 2603.20527), columns for ColNormalize. Momentum and the normalization are
//              local to a row (column), so each rank steps its slice with no preconditioner communication.
//              Needs Static scaling (the factor s(m, n) uses the full shape) and a momentum buffer.
// Trust-ratio scaling (OrScale) needs ||W||_F and ||D'||_F of whole matrices; it runs owner-based, where
// the owner has them locally (no scalar all-reduce). Cutting OrScale by rows would add one batched
// all-reduce of 2 scalars per matrix per step; it is not offered.
//
// Errors: a bad gradient count, shape or layout, or options that do not fit a parameter's shape (row blocks, a
// scale s(m, n) or decay factor that is not finite), throw std::invalid_argument on every rank, before any
// communication. Under NonFinite::Throw (the default) a non-finite reduced gradient throws on
// every rank, naming the parameter and the rank that holds it, and nothing is written; so does an owner's state
// that no longer fits options changed since it was made: one all_gather of one double per rank per step makes the
// decision collective. Owner mode honours NonFinite::Skip and Zero (the owner sees the whole matrix); RowSharded
// requires Throw.
//
// Checkpoints (save_checkpoint / load_checkpoint, collective): one file in matopt's checkpoint format
// (serialization/checkpoint.hpp) with every parameter's whole-matrix state in parameter order, written
// atomically by rank 0. It does not depend on the world size or mode: load it on any number of ranks
// (the plan is recomputed), or into a plain Opt with matopt::load_checkpoint. Rank 0 reads it and
// broadcasts it, so no shared file system is needed.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "matopt/config.hpp"
#include "matopt/core/detail/driver.hpp"
#include "matopt/core/detail/engine.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/traits.hpp"
#include "matopt/core/step_policy.hpp"
#include "matopt/core/view.hpp"
#include "matopt/distributed/communicator.hpp"
#include "matopt/distributed/plan.hpp"
#include "matopt/precondition/col_normalize.hpp"
#include "matopt/precondition/detail/engine_workspace.hpp"
#include "matopt/precondition/row_normalize.hpp"
#include "matopt/serialization/checkpoint.hpp"

namespace matopt {


/// How ShardedOptimizer cuts the state: `Owner` (each matrix whole on one rank, by a balanced greedy plan; any
/// optimizer, the update bitwise the single-process one) or `RowSharded` (every matrix cut along its normalized
/// dimension across all ranks: RowNormalize or ColNormalize with Static scaling and a momentum buffer).
enum class ShardMode { Owner, RowSharded };
/// How gradients are reduced: `ReduceScatter` (each rank receives the pieces it steps) or `AllReduce`.
enum class GradSync { ReduceScatter, AllReduce };
/// The reduced gradient: `Average` (the sum over ranks / size: local gradients are means over each rank's share of
/// the batch) or `Sum`.
enum class GradReduction { Average, Sum };

/// Options of ShardedOptimizer's distribution.
struct ShardOptions {
  /// How the state is cut (default Owner).
  ShardMode mode = ShardMode::Owner;
  /// The gradient collective (default ReduceScatter).
  GradSync sync = GradSync::ReduceScatter;
  /// Mean or sum of the ranks' gradients (default Average).
  GradReduction reduction = GradReduction::Average;
};

/// Data-parallel training with `Opt`'s state sharded ZeRO-1 style (Rajbhandari et al., arXiv 1910.02054): every
/// rank holds all parameters and computes a local gradient; each piece of optimizer state lives on one rank. A
/// step reduces the gradients (GradSync), the holder of each piece steps it with Opt, and the updated pieces are
/// all-gathered into every replica. Checkpoints are one file independent of the world size and ShardMode.
/// @tparam Opt the wrapped optimizer (a preset or a composition).
template <class Opt>
class ShardedOptimizer {
  using Preconditioner = typename Opt::PreconditionerType;
  using Scaling = typename Opt::ScalingType;
  using Momentum = typename Opt::MomentumType;
  /// The checks and one-pass step of Opt's steps (core/detail/driver.hpp).
  using Driver = detail::Driver<typename Opt::Scalar, Preconditioner, Momentum, Scaling, typename Opt::Options,
                                detail::HostStore, StepReport<typename Opt::Scalar>>;

 public:
  /// The scalar type.
  using T = typename Opt::Scalar;
  /// The scalar type.
  using Scalar = T;
  /// Opt's per-parameter state.
  using State = typename Opt::State;
  /// Opt's options.
  using Options = typename Opt::Options;

  /// RowSharded cuts rows for RowNormalize, columns for ColNormalize: the one-pass step of a momentum buffer under
  /// Static scaling (Driver::fused_lines), each line normalized on its own.
  static constexpr bool row_shardable = Driver::fused_lines;
  /// Whether RowSharded mode cuts columns (ColNormalize) rather than rows.
  static constexpr bool split_columns = [] {
    if constexpr (row_shardable) return Preconditioner::columns;
    else return false;
  }();

  /// `params`: this rank's replica of every parameter (the same shapes, layouts and order on every rank;
  /// the buffers stay the caller's and must outlive this object). Collective only in that every rank must
  /// construct it with the same arguments; no communication happens here.
  ShardedOptimizer(Communicator& comm, std::vector<MatrixView<T>> params, const Options& options = Options{},
                   ShardOptions shard = {})
      : comm_(comm), params_(std::move(params)), shard_(shard), opt_(options), ranks_(comm.size()),
        me_(comm.rank()) {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i];
      if (p.rows < 0 || p.cols < 0 || (p.data == nullptr && p.size() != 0))
        detail::fail(where(), "parameter ", i, " (", detail::shape_string(p.rows, p.cols),
                     ") has a negative shape or null data (rank ", me_, ")");
    }
    if (shard_.mode == ShardMode::RowSharded) {
      if constexpr (!row_shardable)
        detail::fail(where(), "ShardMode::RowSharded needs a RowNormalize or ColNormalize optimizer with Static "
                     "scaling and momentum; ", Opt::identity(), " runs with ShardMode::Owner");
      require_throw_policy();
    }
    build_pieces();
    if (shard_.mode == ShardMode::Owner) {
      for (std::size_t i = 0; i < params_.size(); ++i)
        if (plan_.owner[i] == me_) {
          owned_.push_back(i);
          states_.push_back(detail::with_map(params_[i], [&](const auto& w) { return opt_.make_state(w); }));
        }
    } else {
      for (std::size_t i = 0; i < params_.size(); ++i) states_.push_back(slice_state(i));
    }
  }

  /// One step from this rank's local gradients (grads[i] matches params[i] in shape and layout).
  /// Collective. On return every rank's parameters hold the same updated values.
  void step(const std::vector<MatrixView<const T>>& grads) {
    const CommCounters before = comm_.counters();
    check_grads(grads);
    const Options& o = opt_.options();
    Opt::validate(o, where());
    if (shard_.mode == ShardMode::RowSharded) require_throw_policy();
    // Every parameter's shape against the options on every rank: all ranks refuse alike, before any communication
    // (a check on its owner alone would leave the other ranks waiting in a collective).
    for (const auto& p : params_) Driver::check(o, p.rows, p.cols, o.lr, o.weight_decay, where());
    const double refused = check_owned_states();

    // 1. Gradients, packed by destination rank, reduced.
    for (const Piece& pc : pieces_) copy_out(grads[pc.param], pc, send_.data() + displ_[std::size_t(pc.rank)] + pc.offset);
    T* mine = nullptr;
    if (shard_.sync == GradSync::ReduceScatter) {
      comm_.reduce_scatter(send_.data(), recv_.data(), counts_);
      mine = recv_.data();
    } else {
      comm_.all_reduce(send_.data(), send_.size());
      mine = send_.data() + displ_[std::size_t(me_)];
    }
    const std::size_t my_count = counts_[std::size_t(me_)];
    if (shard_.reduction == GradReduction::Average && ranks_ > 1)
      for (std::size_t k = 0; k < my_count; ++k) mine[k] /= T(ranks_);  // exact when the sum is a multiple of ranks_
    agree(mine, refused);

    // 2. This rank's pieces, stepped into the gather buffer (owner mode steps the caller's buffers in place).
    T* out = gather_.data() + displ_[std::size_t(me_)];
    if (shard_.mode == ShardMode::Owner) {
      std::vector<MatrixView<T>> w;
      std::vector<MatrixView<const T>> g;
      for (std::size_t k = 0; k < owned_.size(); ++k) {
        const Piece& pc = pieces_[owned_[k]];  // owner mode: piece i is parameter i
        const auto& p = params_[pc.param];
        w.push_back(p);
        g.push_back({mine + pc.offset, p.rows, p.cols, p.layout});
      }
      opt_.step(w, g, states_);
      for (std::size_t i : owned_) copy_out(params_[i], pieces_[i], out + pieces_[i].offset);
    } else if constexpr (row_shardable) {
      step_slices(mine, out);
    }

    // 3. Every rank's pieces into every replica.
    comm_.all_gather(out, gather_.data(), counts_);
    for (const Piece& pc : pieces_)
      if (pc.rank != me_ || shard_.mode == ShardMode::RowSharded)
        copy_in(params_[pc.param], pc, gather_.data() + displ_[std::size_t(pc.rank)] + pc.offset);
    last_step_ = comm_.counters() - before;
  }

  /// Collective: writes every parameter's whole-matrix state to `path` (rank 0 writes; see the file comment).
  void save_checkpoint(const std::string& path) {
    // Each rank serializes the whole-matrix states it can form: owner mode its owned ones; RowSharded
    // gathers momentum slices first, then rank 0 forms them all.
    std::string mine;
    auto record = [&](std::size_t i, const State& s) {
      detail::Writer w;
      w.state(s);
      detail::Writer head;
      head.pod(std::uint64_t(i));
      head.pod(std::uint64_t(w.data().size()));
      mine += head.data();
      mine += w.data();
    };
    if (shard_.mode == ShardMode::Owner) {
      for (std::size_t k = 0; k < owned_.size(); ++k) record(owned_[k], states_[k]);
    } else {
      T* out = gather_.data() + displ_[std::size_t(me_)];
      for (const Piece& pc : pieces_)
        if (pc.rank == me_) {
          const auto& v = states_[pc.param].momentum;  // the slice, packed like its piece
          std::copy(v.data(), v.data() + v.size(), out + pc.offset);
        }
      comm_.all_gather(out, gather_.data(), counts_);
      if (me_ == 0)
        for (std::size_t i = 0; i < params_.size(); ++i) {
          State s = whole_state(i);
          const MatrixView<T> v{s.momentum.data(), s.rows, s.cols, params_[i].layout};
          for (const Piece& pc : pieces_)
            if (pc.param == i) copy_in(v, pc, gather_.data() + displ_[std::size_t(pc.rank)] + pc.offset);
          s.steps = states_[i].steps;
          s.skipped = states_[i].skipped;
          s.zeroed = states_[i].zeroed;
          record(i, s);
        }
    }
    std::vector<double> sizes(std::size_t(ranks_), 0.0);
    sizes[std::size_t(me_)] = double(mine.size());
    comm_.all_gather(sizes.data() + me_, sizes.data(), std::vector<std::size_t>(std::size_t(ranks_), 1));
    std::vector<std::size_t> byte_counts(static_cast<std::size_t>(ranks_), 0);
    for (std::size_t r = 0; r < byte_counts.size(); ++r) byte_counts[r] = std::size_t(sizes[r]);
    std::string all(std::accumulate(byte_counts.begin(), byte_counts.end(), std::size_t(0)), '\0');
    std::size_t my_offset = 0;
    for (int r = 0; r < me_; ++r) my_offset += byte_counts[std::size_t(r)];
    std::copy(mine.begin(), mine.end(), all.begin() + std::ptrdiff_t(my_offset));
    comm_.all_gather(reinterpret_cast<const std::byte*>(all.data() + my_offset), reinterpret_cast<std::byte*>(all.data()),
                     byte_counts);
    double status = 0;
    std::string error;
    if (me_ == 0) {
      try {
        write_records(path, all);
      } catch (const std::exception& e) {
        status = 1;
        error = e.what();
      }
    }
    comm_.broadcast(&status, 1, 0);  // also orders the write before any rank's later load
    if (status != 0)
      throw std::runtime_error(me_ == 0 ? error
                                        : "matopt::ShardedOptimizer: rank 0 failed to write checkpoint '" + path + "'");
  }

  /// Collective: restores the states saved by save_checkpoint (at any world size and mode) or by
  /// matopt::save_checkpoint(path, opt, states) for these parameters. Throws CheckpointError on every
  /// rank, states unchanged, if the file does not fit.
  void load_checkpoint(const std::string& path) {
    std::string file;
    double size = -1;
    if (me_ == 0) {
      try {
        file = detail::read_file(path);
        size = double(file.size());
      } catch (const std::exception&) {
        size = -1;
      }
    }
    comm_.broadcast(&size, 1, 0);
    if (size < 0) throw CheckpointError("matopt checkpoint: rank 0 cannot open '" + path + "'");
    file.resize(std::size_t(size));
    comm_.broadcast(reinterpret_cast<std::byte*>(file.data()), file.size(), 0);

    detail::Reader r = detail::unseal(file, sizeof(T));
    const std::string id = r.string("the optimizer identity");
    if (id != Opt::identity())
      detail::Reader::fail("written by optimizer '", id, "' but loaded into '", Opt::identity(), "'");
    const auto n = r.pod<std::uint64_t>("the state count");
    if (n != params_.size())
      detail::Reader::fail("the file holds ", n, " parameter states but ", params_.size(), " parameters are sharded");
    std::vector<State> loaded = states_;
    std::size_t k = 0;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      State s = whole_state(i);
      r.state(s);
      if (shard_.mode == ShardMode::Owner) {
        if (plan_.owner[i] == me_) loaded[k++] = std::move(s);
      } else {
        State& slice = loaded[i];
        const Piece& pc = pieces_[i * std::size_t(ranks_) + std::size_t(me_)];
        copy_out(MatrixView<T>{s.momentum.data(), s.rows, s.cols, params_[i].layout}, pc, slice.momentum.data());
        slice.steps = s.steps;
        slice.skipped = s.skipped;
        slice.zeroed = s.zeroed;
      }
    }
    if (r.left() != 0) detail::Reader::fail(r.left(), " unread bytes after the last state");
    states_ = std::move(loaded);
    scratch_.reset();
  }

  /// The wrapped optimizer (the one that steps this rank's pieces).
  Opt& optimizer() { return opt_; }
  /// The wrapped optimizer (read-only).
  const Opt& optimizer() const { return opt_; }
  /// Opt's options, mutable between steps.
  Options& options() { return opt_.options(); }
  /// The distribution options.
  const ShardOptions& shard_options() const { return shard_; }
  /// Owner mode: the plan (empty in RowSharded mode).
  const ShardPlan& plan() const { return plan_; }
  /// Parameter indices whose state lives here (owner mode), in order; every index in RowSharded mode.
  std::vector<std::size_t> local_parameters() const {
    if (shard_.mode == ShardMode::Owner) return owned_;
    std::vector<std::size_t> all(params_.size());
    std::iota(all.begin(), all.end(), std::size_t(0));
    return all;
  }
  /// This rank's states (owner mode: of local_parameters(); RowSharded: one slice per parameter).
  const std::vector<State>& states() const { return states_; }
  /// Bytes of optimizer state held on this rank.
  std::size_t state_bytes() const {
    std::size_t b = 0;
    for (const auto& s : states_) b += s.bytes();
    return b;
  }
  /// Elements of all parameters (Psi in docs/distributed.md).
  std::size_t parameter_elements() const { return send_.size(); }
  /// Communication of the most recent step on this rank.
  const CommCounters& last_step_traffic() const { return last_step_; }

 private:
  /// A contiguous block of a parameter held by one rank: rows (columns for ColNormalize) [begin, end) of
  /// parameter `param`, at `offset` elements into that rank's segment of the packed buffers. Owner mode:
  /// one piece per parameter, the whole matrix. RowSharded: one per parameter and rank, in that order.
  struct Piece {
    std::size_t param = 0;
    int rank = 0;
    Index begin = 0, end = 0;
    std::size_t offset = 0;
  };

  static constexpr const char* where() { return "matopt::ShardedOptimizer"; }

  Index extent(std::size_t i) const { return split_columns ? params_[i].cols : params_[i].rows; }
  Index other(std::size_t i) const { return split_columns ? params_[i].rows : params_[i].cols; }

  void build_pieces() {
    counts_.assign(std::size_t(ranks_), 0);
    if (shard_.mode == ShardMode::Owner) {
      std::vector<double> costs;
      for (const auto& p : params_) costs.push_back(preconditioner_cost<Preconditioner>(p.rows, p.cols));
      plan_ = ShardPlan::greedy(costs, ranks_);
      for (std::size_t i = 0; i < params_.size(); ++i) {
        const auto r = std::size_t(plan_.owner[i]);
        pieces_.push_back({i, int(r), 0, extent(i), counts_[r]});
        counts_[r] += std::size_t(params_[i].size());
      }
    } else {
      for (std::size_t i = 0; i < params_.size(); ++i)
        for (int r = 0; r < ranks_; ++r) {
          // Balanced contiguous cut: rank r gets [L r / p, L (r + 1) / p).
          const Index b = extent(i) * r / ranks_, e = extent(i) * (r + 1) / ranks_;
          pieces_.push_back({i, r, b, e, counts_[std::size_t(r)]});
          counts_[std::size_t(r)] += std::size_t((e - b) * other(i));
        }
    }
    displ_.assign(std::size_t(ranks_), 0);
    for (std::size_t r = 1; r < displ_.size(); ++r) displ_[r] = displ_[r - 1] + counts_[r - 1];
    const std::size_t total = displ_.back() + counts_.back();
    send_.assign(total, T(0));
    gather_.assign(total, T(0));
    recv_.assign(counts_[std::size_t(me_)], T(0));
  }

  /// The block of `v` described by `pc`, as a matrix in v's storage order.
  template <class V, class F>
  void with_block(V v, const Piece& pc, F&& f) const {
    detail::with_map(v, [&](auto& full) {
      if constexpr (split_columns) {
        auto b = full.middleCols(pc.begin, pc.end - pc.begin);
        f(b);
      } else {
        auto b = full.middleRows(pc.begin, pc.end - pc.begin);
        f(b);
      }
    });
  }
  /// Packs block `pc` of v into `buf` (contiguous, v's storage order).
  template <class V>
  void copy_out(V v, const Piece& pc, T* buf) const {
    with_block(v, pc, [&](const auto& b) {
      using Plain = detail::DynamicMatrix<T, detail::layout_of_v<decltype(b)>>;
      Eigen::Map<Plain>(buf, b.rows(), b.cols()) = b;
    });
  }
  void copy_in(MatrixView<T> v, const Piece& pc, const T* buf) const {
    with_block(v, pc, [&](auto& b) {
      using Plain = detail::DynamicMatrix<T, detail::layout_of_v<decltype(b)>>;
      b = Eigen::Map<const Plain>(buf, b.rows(), b.cols());
    });
  }

  /// A whole-matrix state for parameter i, made by a scratch optimizer (so that opt_'s workspaces are not
  /// grown for parameters this rank never steps).
  State whole_state(std::size_t i) {
    if (!scratch_) scratch_.emplace(opt_.options());
    return detail::with_map(params_[i], [&](const auto& w) { return scratch_->make_state(w); });
  }

  /// RowSharded: the state of this rank's slice of parameter i (momentum of the slice's shape).
  State slice_state(std::size_t i) {
    const Piece& pc = pieces_[i * std::size_t(ranks_) + std::size_t(me_)];
    State s;
    s.rows = split_columns ? params_[i].rows : pc.end - pc.begin;
    s.cols = split_columns ? pc.end - pc.begin : params_[i].cols;
    s.layout = params_[i].layout;
    s.momentum.setZero(s.rows * s.cols);
    if constexpr (row_shardable) Preconditioner::reserve(ws_, opt_.options().precondition, s.rows, s.cols);
    return s;
  }

  /// RowSharded step of this rank's slices: the optimizer's one-pass normalization step (Driver::fused_step) on each
  /// slice with the whole matrix's scaling coefficients; the result goes to `out` for the all-gather.
  void step_slices(const T* mine, T* out) {
    const Options& o = opt_.options();
    detail::HostEngine e;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const Piece& pc = pieces_[i * std::size_t(ranks_) + std::size_t(me_)];
      State& s = states_[i];
      const auto& p = params_[i];
      T* w = out + pc.offset;
      copy_out(p, pc, w);
      if (s.momentum.size() != 0)
        Driver::fused_step(e, ws_, o, detail::strided(w, s.rows, s.cols, p.layout),
                           detail::strided(mine + pc.offset, s.rows, s.cols, p.layout),
                           detail::strided(s.momentum.data(), s.rows, s.cols, p.layout), o.lr, o.weight_decay, p.rows,
                           p.cols);
      ++s.steps;
    }
  }

  void check_grads(const std::vector<MatrixView<const T>>& grads) const {
    if (grads.size() != params_.size())
      detail::fail(where(), "got ", grads.size(), " gradients for ", params_.size(), " parameters (rank ", me_, ")");
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const auto& g = grads[i];
      const auto& p = params_[i];
      if (g.rows != p.rows || g.cols != p.cols)
        detail::fail(where(), "parameter ", i, ": G is ", detail::shape_string(g.rows, g.cols), " but W is ",
                     detail::shape_string(p.rows, p.cols), " (rank ", me_, ")");
      if (!detail::same_layout(g.layout, p.layout, p.rows, p.cols))
        detail::fail(where(), "parameter ", i, ": G is ", detail::layout_name(g.layout), " but W is ",
                     detail::layout_name(p.layout), " (rank ", me_, ")");
      if (g.data == nullptr && g.size() != 0)
        detail::fail(where(), "parameter ", i, ": G has null data (rank ", me_, ")");
    }
  }

  void require_throw_policy() const {
    if (opt_.options().non_finite != NonFinite::Throw)
      detail::fail(where(), "ShardMode::RowSharded needs options.non_finite = throw (a skipped or zeroed "
                   "slice would desynchronize the rows of a matrix)");
  }

  /// Owner mode: this rank's states checked against the options, which may have changed since make_state (Dion's
  /// rank_fraction, say); -2 - i for the first parameter i whose state does not fit (its error kept for agree), else
  /// -1.
  double check_owned_states() {
    refusal_.clear();
    if (shard_.mode != ShardMode::Owner) return -1;
    const Options& o = opt_.options();
    detail::HostEngine e;
    for (std::size_t k = 0; k < owned_.size(); ++k) {
      const auto& p = params_[owned_[k]];
      const auto w = detail::Strided<const T>(detail::strided(p.data, p.rows, p.cols, p.layout));
      try {
        Driver::check_step(e, o, states_[k], w, w, p.layout, p.layout, o.lr, o.weight_decay, o.non_finite, true,
                           where());
      } catch (const std::invalid_argument& error) {
        refusal_ = error.what();  // "matopt::ShardedOptimizer: ...", which agree's message says once
        const std::string_view prefix = "matopt::ShardedOptimizer: ";
        if (refusal_.compare(0, prefix.size(), prefix) == 0) refusal_.erase(0, prefix.size());
        return -2.0 - double(owned_[k]);
      }
    }
    return -1;
  }

  /// Every rank learns whether a rank refused its step (check_owned_states: `refused`) or, under NonFinite::Throw,
  /// holds a non-finite reduced gradient piece, and all throw together before anything is written. One all_gather
  /// of one double per rank.
  void agree(const T* mine, double refused) {
    double verdict = refused;
    if (verdict == -1 && opt_.options().non_finite == NonFinite::Throw)
      for (const Piece& pc : pieces_) {
        if (pc.rank != me_) continue;
        const std::size_t n = std::size_t((pc.end - pc.begin) * other(pc.param));
        const Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>> g(mine + pc.offset, Index(n));
        if (!detail::all_finite(g)) {
          verdict = double(pc.param);
          break;
        }
      }
    std::vector<double> all(std::size_t(ranks_), -1.0);
    all[std::size_t(me_)] = verdict;
    comm_.all_gather(all.data() + me_, all.data(), std::vector<std::size_t>(std::size_t(ranks_), 1));
    for (int r = 0; r < ranks_; ++r) {
      const double v = all[std::size_t(r)];
      if (v == -1) continue;
      const auto i = std::size_t(v >= 0 ? v : -v - 2);
      const std::string shape = detail::shape_string(params_[i].rows, params_[i].cols);
      if (v >= 0)
        detail::fail(where(), "the reduced gradient of parameter ", i, " (", shape, ", held by rank ", r,
                     ") contains a non-finite value; parameters and states are unchanged on every rank "
                     "(options.non_finite = throw)");
      detail::fail(where(), "parameter ", i, " (", shape, ", held by rank ", r, "): ",
                   r == me_ ? refusal_ : std::string("its state does not fit the options (rank ") +
                                             std::to_string(r) + " says why)",
                   "; parameters and states are unchanged on every rank");
    }
  }

  /// Rank 0: the gathered records (index, length, state bytes) as one checkpoint in parameter order.
  void write_records(const std::string& path, const std::string& all) const {
    std::vector<std::string> states(params_.size());
    std::vector<bool> seen(params_.size(), false);
    detail::Reader r(all.data(), all.size());
    while (r.left() != 0) {
      const auto i = r.pod<std::uint64_t>("a parameter index");
      const auto n = r.pod<std::uint64_t>("a state length");
      if (i >= params_.size() || seen[i] || n > r.left())
        throw std::logic_error("matopt::ShardedOptimizer: inconsistent state records while saving");
      states[i].resize(std::size_t(n));
      r.bytes(states[i].data(), std::size_t(n), "a state");
      seen[i] = true;
    }
    if (std::find(seen.begin(), seen.end(), false) != seen.end())
      throw std::logic_error("matopt::ShardedOptimizer: a parameter's state is missing while saving");
    detail::Writer w;
    w.string(Opt::identity());
    w.pod(std::uint64_t(params_.size()));
    for (const auto& s : states) w.bytes(s.data(), s.size());
    detail::write_file_atomically(path, detail::seal(w.data(), sizeof(T)));
  }

  Communicator& comm_;
  std::vector<MatrixView<T>> params_;
  ShardOptions shard_;
  Opt opt_;
  int ranks_, me_;
  ShardPlan plan_;
  std::vector<Piece> pieces_;
  std::vector<std::size_t> counts_, displ_;  ///< per rank: elements in, and offset of, its packed segment
  std::vector<T> send_, recv_, gather_;
  std::vector<std::size_t> owned_;
  std::vector<State> states_;
  detail::host_workspace_t<Preconditioner, T> ws_{};  ///< the row-sharded fused step's
  std::optional<Opt> scratch_;
  CommCounters last_step_;
  std::string refusal_;  ///< this step's refusal of an owned state (check_owned_states)
};

}  // namespace matopt

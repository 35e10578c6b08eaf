// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// QK-clip (qk_clip.hpp) on W_q and W_k in device memory, scaled by a device engine.
// QK-clip (qk_clip.hpp; MuonClip, Kimi K2 arXiv 2507.20534) on W_q and W_k in device memory: the host's rule
// (detail::qk_clip_groups: checks, the groups above tau and their factors eta^alpha, eta^(1 - alpha)), each
// group's rows scaled by the device engine (ThrustEngine, or a DeviceOptimizer's engine(): the CUDA engine
// queues on its stream).
//
//   matopt::ThrustEngine e;                          // or opt.engine() of a device optimizer
//   matopt::qk_clip(e, w_q.view(), w_k.view(), max_logits, kv_heads);   // after the optimizer's step

#include <vector>

#include "matopt/backend/device_matrix.hpp"
#include "matopt/backend/device_optimizer.hpp"
#include "matopt/qk_clip.hpp"

namespace matopt {

/// qk_clip (qk_clip.hpp) for device matrices: W_q (H d_head) x d_model and W_k (KV d_head) x d_model in any
/// storage order, scaled in place by `engine`. Returns the number of query groups scaled; on an error it throws
/// std::invalid_argument and changes nothing.
template <class Engine, class T>
Index qk_clip(Engine& engine, DeviceMatrixView<T> w_q, DeviceMatrixView<T> w_k, const std::vector<double>& max_logits,
              Index kv_heads, const QkClipOptions& o = {}) {
  detail::check_device_view<T>("matopt::qk_clip", w_q, "W_q");
  detail::check_device_view<T>("matopt::qk_clip", w_k, "W_k");
  const auto groups = detail::qk_clip_groups(w_q.rows, w_q.cols, w_k.rows, w_k.cols, max_logits, kv_heads, o);
  for (const detail::QkClipGroup& g : groups) {
    engine.scale(detail::rows_of(detail::strided(w_q), g.q_first, g.q_rows), T(g.q_scale));
    engine.scale(detail::rows_of(detail::strided(w_k), g.k_first, g.k_rows), T(g.k_scale));
  }
  return Index(groups.size());
}

}  // namespace matopt

// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// QK-clip (MuonClip; Kimi K2, arXiv 2507.20534): rescales the query and key projections whose logits grow too large.
// QK-clip (MuonClip; Kimi K2, arXiv 2507.20534; NVIDIA Megatron-LM clip_qk; docs/math.md#qk-clip),
// applied after an optimizer step to the query and key projections of one attention layer.
// Layout: W_q is (H d_head) x d_model and W_k (KV d_head) x d_model, each head a contiguous block of d_head
// rows (torch.nn.Linear weights of separate q and k projections); query heads g H/KV ... (g + 1) H/KV - 1 read
// KV head g (repeat_interleave of the KV heads, as LLaMA's GQA). Any Eigen dense matrix works, either order;
// device matrices through backend/device_qk_clip.hpp (the same rule, qk_clip_groups).

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include <Eigen/Core>

#include "matopt/config.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/traits.hpp"

namespace matopt {

/// Options of qk_clip(): per query group g, eta = min(1, tau / max_h S_h), W_q rows *= eta^alpha, W_k rows *=
/// eta^(1 - alpha), so that the group's largest logit becomes tau.
/// S_h is head h's largest pre-softmax logit over the batch, q_i . k_j / sqrt(d_head) (the scale included); a group
/// is one KV head and the H / KV query heads that read it (KV = H for multi-head attention: one head per group).
/// Every logit of group g is multiplied by eta. Only groups with a logit above tau change; W_v and W_o are
/// untouched. Defaults: tau = 100 (Kimi K2); alpha = 0.5 (Megatron's qk_clip_alpha; the paper's sqrt of gamma on
/// each side for MHA).
struct QkClipOptions {
  double tau = 100.0;   ///< the largest logit a head may keep
  double alpha = 0.5;   ///< the share of the clip taken by W_q (W_k takes 1 - alpha)
};

namespace detail {

/// One query group's clip: W_q rows [q_first, q_first + q_rows) scale by q_scale, W_k rows [k_first, k_first +
/// k_rows) by k_scale.
struct QkClipGroup {
  Index q_first, q_rows, k_first, k_rows;
  double q_scale, k_scale;
};

/// Checks the arguments (W_q q_rows x q_cols, W_k k_rows x k_cols) and returns the groups to scale: the one rule
/// behind qk_clip on Eigen matrices and on device matrices (backend/device_qk_clip.hpp).
inline std::vector<QkClipGroup> qk_clip_groups(Index q_rows, Index q_cols, Index k_rows, Index k_cols,
                                               const std::vector<double>& max_logits, Index kv_heads,
                                               const QkClipOptions& o) {
  constexpr std::string_view where = "matopt::qk_clip";
  const Index heads = Index(max_logits.size());
  if (!(o.tau > 0) || !std::isfinite(o.tau)) fail(where, "tau must be finite and > 0 (got ", o.tau, ")");
  if (!(o.alpha >= 0 && o.alpha <= 1)) fail(where, "alpha must be in [0, 1] (got ", o.alpha, ")");
  if (heads < 1) fail(where, "max_logits is empty: one logit per query head is needed");
  if (kv_heads < 1 || heads % kv_heads != 0)
    fail(where, "kv_heads = ", kv_heads, " must be >= 1 and divide the ", heads, " query heads");
  if (q_rows % heads != 0)
    fail(where, "W_q (", shape_string(q_rows, q_cols), ") has no whole rows per head for ", heads, " heads");
  const Index head_dim = q_rows / heads;
  if (k_rows != kv_heads * head_dim || k_cols != q_cols)
    fail(where, "W_k is ", shape_string(k_rows, k_cols), " but ", kv_heads, " KV heads of W_q's head size ", head_dim,
         " need ", shape_string(kv_heads * head_dim, q_cols));
  for (Index h = 0; h < heads; ++h)
    if (!std::isfinite(max_logits[std::size_t(h)]))
      fail(where, "max_logits[", h, "] = ", max_logits[std::size_t(h)], " is not finite");

  const Index per_group = heads / kv_heads;
  std::vector<QkClipGroup> groups;
  for (Index g = 0; g < kv_heads; ++g) {
    double s_max = max_logits[std::size_t(g * per_group)];
    for (Index h = g * per_group + 1; h < (g + 1) * per_group; ++h) s_max = std::max(s_max, max_logits[std::size_t(h)]);
    if (s_max <= o.tau) continue;
    const double eta = o.tau / s_max;
    groups.push_back({g * per_group * head_dim, per_group * head_dim, g * head_dim, head_dim, std::pow(eta, o.alpha),
                      std::pow(eta, 1 - o.alpha)});
  }
  return groups;
}

}  // namespace detail

/// Clips W_q and W_k in place from the heads' largest logits `max_logits` (one per query head, H of them)
/// with `kv_heads` key/value heads (H for MHA, fewer under GQA; H must be a multiple). Returns the number of
/// query groups that were scaled. Checks everything first: on an error (bad shapes, a non-finite logit, tau
/// <= 0, alpha outside [0, 1]) it throws std::invalid_argument and changes nothing.
template <class QMat, class KMat>
Index qk_clip(QMat&& w_q, KMat&& w_k, const std::vector<double>& max_logits, Index kv_heads,
              const QkClipOptions& o = {}) {
  static_assert(detail::is_eigen_matrix_v<QMat> && detail::is_eigen_matrix_v<KMat>,
                "matopt::qk_clip: W_q and W_k must be Eigen matrices (Matrix, Map, Ref, Block)");
  using T = typename detail::remove_cvref_t<QMat>::Scalar;
  const auto groups = detail::qk_clip_groups(w_q.rows(), w_q.cols(), w_k.rows(), w_k.cols(), max_logits, kv_heads, o);
  for (const detail::QkClipGroup& g : groups) {
    w_q.middleRows(g.q_first, g.q_rows) *= T(g.q_scale);
    w_k.middleRows(g.k_first, g.k_rows) *= T(g.k_scale);
  }
  return Index(groups.size());
}

}  // namespace matopt

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Golden data for matopt's optimizer variants, from an independent implementation in PyTorch (float64).

m, n are the rows and columns of W; NS is Newton-Schulz (wide orientation, X / (|X|_F + 1e-7)) with the
Jordan coefficients K5 or the per-step quintic coefficients Q5; scale(m, n) = max(1, m/n)^0.5.
  * muon_cautious: Muon (EMA + Nesterov, NS K5, scale) with cautious weight decay (arXiv 2510.12402,
    microsoft/dion `cautious_wd`): W -= lr wd [U W >= 0] W + lr U, the mask from W before the step.
  * muon_independent: Muon with weight decay independent of lr: W = W (1 - wd) - lr U.
  * muon_sqrt_max: Muon with U = NS(.) 0.2 sqrt(max(m, n)), decoupled weight decay.
  * rmnp_sqrt_ratio: RMNP (sum momentum + Nesterov, rows to unit l2) with U = D sqrt(m/n).
  * rmnp_cautious: RMNP (U = D scale) with cautious weight decay.
  * normuon: zichongli5/NorMuon `normuon_update`: O = NS(.), S (m x 1) = lerp(S, mean_row(O^2), 1 - b2),
    O' = O / (sqrt S + 1e-10) rescaled to |O|_F, U = O' scale, decoupled weight decay.
  * normuon_longer: as normuon, averaging over the longer axis (rows when m >= n, else columns; S 1 x n).
  * adamuon: Chongjie-Si/AdaMuon: O = NS(sign(.)), S = b S + (1 - b) O^2, O' = O / (sqrt S + 1e-8),
    U = O' 0.2 sqrt(mn) / (|O'|_F + 1e-8), decoupled weight decay.
  * namo: NVIDIA Emerging-Optimizers AdaptiveMuon (moment2_method="namo"): EMA momentum without Nesterov,
    O = NS(M, Q5), scalar S = lerp(S, |G|_F^2, 1 - b2), U = O |M|_F / (sqrt S + 1e-8) sqrt(max(m, n)).
  * polargrad: timlautk/polargrad (polar_first=False): EMA momentum, exact polar factor U_p = P Q^T of
    M = P S Q^T, nu = <M, U_p> (nuclear norm), W = W (1 - lr wd) - lr nu U_p.
  * turbo_muon: thib-s/flash-newton-schulz turbo_muon_torch.py (arXiv 2512.04632): Muon whose NS has no
    Frobenius normalization but AOL row scaling s = rsqrt(max(sum_j |A_ij|, 1e-6)) from A = X X^T (X <- s X,
    A <- s A s, reused by the first step), then 4 steps Q5[-4:].
  * muon_heads: Muon per head (dion num_heads): 4 heads of 5 rows (tall), 3 of 4 (wide), each block NS'd and
    scaled by scale(block rows, n).
  * muon_split: Muon per block of split sizes (dion split_sizes) (8, 6, 6) / (6, 3, 3), each block scaled by
    sqrt(rows_i / n) (the sqrt_ratio rule, dion's "spectral_norm").
  * normuon_heads: NorMuon per head (microsoft/dion NorMuon with num_heads): each block of rows (HEADS) is a
    parameter of its own: its own S (rows of the block x 1), its own Frobenius rescale, scale(block rows, n).
  * normuon_heads_longer: the same with the longer-side axis per head (modded-nanogpt's paired-head NorMuon: a
    block of fewer rows than columns averages over its columns, S 1 x n per head).
  * adamuon_heads / namo_heads: AdaMuon (elementwise S per head) and NAMO (a scalar S and |G_head|_F, |M_head|_F per
    head) per head.
  * muon_qkv_groups: Megatron's interleaved linear_qkv (TensorParallelMuon.orthogonalize, split_qkv): G = 2 query
    groups of [q, k, v] rows ((6, 2, 2) tall, (4, 1, 1) wide, (4, 2, 2) square); Q = the q rows of every group in
    group order, K and V likewise; each gets one NS and scale(its rows, n); the rows go back to their places.
  * normuon_split / normuon_split_longer / adamuon_split / namo_split: the second moments per block of split sizes
    (dion split_sizes with NorMuon): each contiguous block of SPLITS rows is a parameter of its own, as per head:
    its own S, its own Frobenius rescale (NorMuon), its own |G_block|_F and |M_block|_F (NAMO), the RMS target
    0.2 sqrt(rows_i n) (AdaMuon) and scale(rows_i, n). Unequal blocks: S of block i starts after the states of
    blocks 0..i-1, whose sizes differ (AdaMuon), which equal heads cannot tell from other offsets.
  * normuon_qkv_groups / normuon_qkv_groups_longer / adamuon_qkv_groups / namo_qkv_groups: the same per block of
    Megatron's interleaved QKV (QKV_GROUPS): block i gathers slice i of every group in group order (as
    muon_qkv_groups), steps as a parameter of G r_i rows, and its rows go back to their places. |G_block|_F is over
    the block's interleaved runs. The tall Q block is 12 x 12: the longer-axis tie-break (rows when m >= n) per block.
  * dion / dion_half: microsoft/dion dion_reference.py (arXiv 2504.05295), rank min(m, n) and ceil(min / 2):
    M += G; B = M (m >= n) or M^T; P = QR(B Q).Q; R = B^T P; M -= (1 - mu) P R^T (in W's orientation);
    Q = R / (|R|_col + 1e-8); W = W (1 - lr wd) - lr sqrt(m/n) P Q^T; mu 0.95, lr 0.01, wd 0.01. Its own
    data (dion_data/...) and starting Q (.../Q0, randn), from a second generator.
  * rmnp_reference: microsoft/dion rmnp.py with its defaults (arXiv 2603.20527): M = mu M + G (no Nesterov),
    D_i = M_i / max(|M_i|, 1e-12) (dion: M_i / (|M_i| + 1e-8), on M rounded to bfloat16; docs/optimizers/
    rmnp_reference.md), no lr adjustment, W = W (1 - lr wd) - lr D; mu 0.95, lr 0.01, wd 0.01. Written last, for
    tall, wide and square (their data above).
  * lion: google/automl lion_pytorch.py: W *= 1 - lr wd; W -= lr sign(b1 M + (1 - b1) g);
    M = b2 M + (1 - b2) g.

Shapes: tall 20 x 12 and wide 12 x 28 (one generator, seed 20261201, shared with Lion's data), and square 16 x 16
with every variant above, Dion included (its own generator, seed 20261203, so that the other shapes' and Lion's
random numbers stay as they were). A square W pins each m == n tie-break: the NS orientation (transpose when
m > n) is symmetric in exact arithmetic, but Turbo-Muon's AOL scaling (rows of the untransposed X), NorMuon's
longer axis (rows when m >= n) and Dion's B = M (m >= n) are not. Blocks added after the first version of this
file are written after it (the row-block second moments of tall and wide, then square), so that the earlier
blocks keep their places. Another machine's BLAS / LAPACK can change the last digits of a few blocks (SVD, QR and
some products: about 1e-16 relative); the random data do not change.

Usage: python3 scripts/make_golden_variants.py tests/golden/variants.txt
Format: blocks "matrix <name> <rows> <cols>" followed by rows*cols values, row-major, %.17g.
"""
import sys

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

K5 = [(3.4445, -4.7750, 2.0315)] * 5
Q5 = [
    (4.0848, -6.8946, 2.9270),
    (3.9505, -6.3029, 2.6377),
    (3.7418, -5.5913, 2.3037),
    (2.8769, -3.1427, 1.2046),
    (2.8366, -3.0525, 1.2012),
]


def newton_schulz(G, coeffs, eps=1e-7):
    X = G.mT if G.size(-2) > G.size(-1) else G
    X = X / (X.norm() + eps)
    for a, b, c in coeffs:
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    return X.mT if G.size(-2) > G.size(-1) else X


def muon_scale(m, n):
    return max(1, m / n) ** 0.5


def ema_nesterov(state, G, beta):
    M = state.setdefault("M", torch.zeros_like(G))
    M.lerp_(G, 1 - beta)
    return G.lerp(M, beta)


def ema(state, G, beta):
    M = state.setdefault("M", torch.zeros_like(G))
    M.lerp_(G, 1 - beta)
    return M


def sum_nesterov(state, G, beta):
    M = state.setdefault("M", torch.zeros_like(G))
    M.mul_(beta).add_(G)
    return G + beta * M


def muon_cautious(W, G, state, lr=0.02, wd=0.1):
    m, n = W.shape
    U = newton_schulz(ema_nesterov(state, G, 0.95), K5) * muon_scale(m, n)
    mask = (U * W >= 0).to(W.dtype)
    return W - lr * wd * mask * W - lr * U


def muon_independent(W, G, state, lr=0.02, wd=0.001):
    m, n = W.shape
    U = newton_schulz(ema_nesterov(state, G, 0.95), K5) * muon_scale(m, n)
    return W * (1 - wd) - lr * U


def muon_sqrt_max(W, G, state, lr=0.02, wd=0.01):
    m, n = W.shape
    U = newton_schulz(ema_nesterov(state, G, 0.95), K5) * 0.2 * max(m, n) ** 0.5
    return W * (1 - lr * wd) - lr * U


def rmnp_sqrt_ratio(W, G, state, lr=0.02, wd=0.01):
    m, n = W.shape
    D = F.normalize(sum_nesterov(state, G, 0.95), dim=-1, eps=1e-12)
    U = D * (m / n) ** 0.5
    return W * (1 - lr * wd) - lr * U


def rmnp_cautious(W, G, state, lr=0.02, wd=0.1):
    m, n = W.shape
    D = F.normalize(sum_nesterov(state, G, 0.95), dim=-1, eps=1e-12)
    U = D * muon_scale(m, n)
    mask = (U * W >= 0).to(W.dtype)
    return W - lr * wd * mask * W - lr * U


def normuon(W, G, state, lr=0.02, wd=0.01, beta2=0.95):
    m, n = W.shape
    O = newton_schulz(ema_nesterov(state, G, 0.95), K5)
    S = state.setdefault("S", torch.zeros(m, 1))
    S.lerp_((O * O).mean(dim=-1, keepdim=True), 1 - beta2)
    O_hat = O / (S.sqrt() + 1e-10)
    O_hat = O_hat * O.norm() / (O_hat.norm() + 1e-10)
    U = O_hat * muon_scale(m, n)
    return W * (1 - lr * wd) - lr * U


def normuon_longer(W, G, state, lr=0.02, wd=0.01, beta2=0.95):
    m, n = W.shape
    O = newton_schulz(ema_nesterov(state, G, 0.95), K5)
    dim = -1 if m >= n else -2
    S = state.setdefault("S", torch.zeros(m, 1) if m >= n else torch.zeros(1, n))
    S.lerp_((O * O).mean(dim=dim, keepdim=True), 1 - beta2)
    O_hat = O / (S.sqrt() + 1e-10)
    O_hat = O_hat * O.norm() / (O_hat.norm() + 1e-10)
    U = O_hat * muon_scale(m, n)
    return W * (1 - lr * wd) - lr * U


def adamuon(W, G, state, lr=0.02, wd=0.01, beta=0.95):
    m, n = W.shape
    O = newton_schulz(torch.sign(ema_nesterov(state, G, beta)), K5)
    S = state.setdefault("S", torch.zeros(m, n))
    S.mul_(beta).add_((1 - beta) * O * O)
    O_hat = O / (S.sqrt() + 1e-8)
    U = O_hat * 0.2 * (m * n) ** 0.5 / (O_hat.norm() + 1e-8)
    return W * (1 - lr * wd) - lr * U


def namo(W, G, state, lr=1e-3, wd=0.01, beta2=0.95):
    m, n = W.shape
    M = ema(state, G, 0.95)
    O = newton_schulz(M, Q5)
    S = state.setdefault("S", torch.zeros(()))
    S.lerp_(G.norm() ** 2, 1 - beta2)
    alpha = M.norm() / (S.sqrt() + 1e-8)
    U = O * alpha * max(m, n) ** 0.5
    return W * (1 - lr * wd) - lr * U


def polar_factor(M):
    P, _, Qh = torch.linalg.svd(M, full_matrices=False)
    return P @ Qh


def polargrad(W, G, state, lr=0.02, wd=0.01):
    M = ema(state, G, 0.95)
    U_p = polar_factor(M)
    nu = (M * U_p).sum()
    return W * (1 - lr * wd) - lr * nu * U_p


def turbo_newton_schulz(G, eps=1e-6):
    # thib-s/flash-newton-schulz turbo_muon_torch.py (variant "turbo"): no Frobenius normalization; AOL row
    # scaling from the Gram matrix, which then feeds the first of the 4 steps Q5[-4:].
    X = G.mT if G.size(-2) > G.size(-1) else G
    A = X @ X.mT
    s = A.abs().sum(dim=-1).clamp_min(eps).rsqrt()
    X = s[:, None] * X
    A = s[:, None] * A * s[None, :]
    for k, (a, b, c) in enumerate(Q5[-4:]):
        if k > 0:
            A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    return X.mT if G.size(-2) > G.size(-1) else X


def turbo_muon(W, G, state, lr=0.02, wd=0.01):
    m, n = W.shape
    U = turbo_newton_schulz(ema_nesterov(state, G, 0.95)) * muon_scale(m, n)
    return W * (1 - lr * wd) - lr * U


# Row blocks (dion num_heads / split_sizes): each block of rows is orthogonalized and scaled as a matrix of its
# own shape; one momentum buffer. Blocks per shape: heads 4 (tall, 5 rows each), 3 (wide, 4 rows each) and 4
# (square, 4 rows each); split sizes (8, 6, 6), (6, 3, 3) and (8, 5, 3).
HEADS = {20: 4, 12: 3, 16: 4}
SPLITS = {20: (8, 6, 6), 12: (6, 3, 3), 16: (8, 5, 3)}


def muon_heads(W, G, state, lr=0.02, wd=0.01):
    m, n = W.shape
    U_in = ema_nesterov(state, G, 0.95)
    hd = m // HEADS[m]
    U = torch.cat([newton_schulz(B, K5) * muon_scale(hd, n) for B in U_in.split(hd, dim=0)], dim=0)
    return W * (1 - lr * wd) - lr * U


def muon_split(W, G, state, lr=0.02, wd=0.01):
    m, n = W.shape
    U_in = ema_nesterov(state, G, 0.95)
    U = torch.cat([newton_schulz(B, K5) * (B.size(0) / n) ** 0.5 for B in U_in.split(SPLITS[m], dim=0)], dim=0)
    return W * (1 - lr * wd) - lr * U


def per_head(step):
    """A per-block variant: `step` on each block of HEADS rows with a state of its own, one momentum for W."""
    def run(W, G, state, **kw):
        m, _ = W.shape
        hd = m // HEADS[m]
        blocks = state.setdefault("blocks", [{} for _ in range(HEADS[m])])
        return torch.cat([step(Wb, Gb, sb, **kw) for Wb, Gb, sb in zip(W.split(hd), G.split(hd), blocks)], dim=0)
    return run


QKV_GROUPS = {20: (2, (6, 2, 2)), 12: (2, (4, 1, 1)), 16: (2, (4, 2, 2))}


def muon_qkv_groups(W, G, state, lr=0.02, wd=0.01):
    m, n = W.shape
    groups, sizes = QKV_GROUPS[m]
    U_in = ema_nesterov(state, G, 0.95)
    # Megatron: view (G, sum, n), split dim 1, reshape each to (G * size, n): block rows in group order.
    parts = U_in.view(groups, sum(sizes), n).split(sizes, dim=1)
    U_parts = [newton_schulz(p.reshape(-1, n), K5) * muon_scale(groups * r, n) for p, r in zip(parts, sizes)]
    U = torch.cat([u.view(groups, r, n) for u, r in zip(U_parts, sizes)], dim=1).reshape(m, n)
    return W * (1 - lr * wd) - lr * U


def per_rows(blocks_of, step):
    """`step` on each block of rows (a list of row indices, blocks_of(m)) as a parameter of its own: the block's
    rows of W and G gathered in order, a state of its own, the result put back in the block's rows."""
    def run(W, G, state, **kw):
        rows = blocks_of(W.size(0))
        blocks = state.setdefault("blocks", [{} for _ in rows])
        out = torch.empty_like(W)
        for r, sb in zip(rows, blocks):
            idx = torch.tensor(r)
            out[idx] = step(W[idx], G[idx], sb, **kw)
        return out
    return run


def split_rows(m):
    """dion split_sizes: contiguous blocks of SPLITS[m] rows."""
    starts = [sum(SPLITS[m][:i]) for i in range(len(SPLITS[m]))]
    return [list(range(s, s + r)) for s, r in zip(starts, SPLITS[m])]


def qkv_group_rows(m):
    """Megatron's interleaved linear_qkv: block i = slice i of every group, in group order (muon_qkv_groups)."""
    groups, sizes = QKV_GROUPS[m]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [[g * sum(sizes) + s + k for g in range(groups) for k in range(r)] for s, r in zip(starts, sizes)]


def per_split(step):
    return per_rows(split_rows, step)


def per_qkv_group(step):
    return per_rows(qkv_group_rows, step)


def dion(W, G, state, lr=0.01, wd=0.01, mu=0.95, eps=1e-8):
    # microsoft/dion dion_reference.py dion_update, one power iteration, Householder QR: B = M (m >= n) or M^T.
    m, n = W.shape
    M = state.setdefault("M", torch.zeros_like(G))
    M.add_(G)
    B = M if m >= n else M.mT
    Q = state["Q"]
    if M.abs().max() == 0:
        P, R = torch.zeros(B.size(0), Q.size(1)), Q
    else:
        P = torch.linalg.qr(B @ Q, mode="reduced").Q
        R = B.mT @ P
    M.sub_((1 - mu) * (P @ R.mT if m >= n else R @ P.mT))
    state["Q"] = R / (R.norm(dim=0, keepdim=True) + eps)
    D = P @ state["Q"].mT if m >= n else state["Q"] @ P.mT
    return W * (1 - lr * wd) - lr * (m / n) ** 0.5 * D


def rmnp_reference(W, G, state, lr=0.01, wd=0.01, mu=0.95):
    M = state.setdefault("M", torch.zeros_like(G))
    M.mul_(mu).add_(G)
    return W * (1 - lr * wd) - lr * F.normalize(M, dim=-1, eps=1e-12)


VARIANTS = {
    "muon_cautious": muon_cautious,
    "muon_independent": muon_independent,
    "muon_sqrt_max": muon_sqrt_max,
    "rmnp_sqrt_ratio": rmnp_sqrt_ratio,
    "rmnp_cautious": rmnp_cautious,
    "normuon": normuon,
    "normuon_longer": normuon_longer,
    "adamuon": adamuon,
    "namo": namo,
    "polargrad": polargrad,
    "turbo_muon": turbo_muon,
    "muon_heads": muon_heads,
    "muon_split": muon_split,
    "normuon_heads": per_head(normuon),
    "normuon_heads_longer": per_head(normuon_longer),
    "adamuon_heads": per_head(adamuon),
    "namo_heads": per_head(namo),
    "muon_qkv_groups": muon_qkv_groups,
}
# Second moments on unequal row blocks: written after the first version's blocks (tall, wide), and for square.
ROW_BLOCK_MOMENTS = {
    "normuon_split": per_split(normuon),
    "normuon_split_longer": per_split(normuon_longer),
    "adamuon_split": per_split(adamuon),
    "namo_split": per_split(namo),
    "normuon_qkv_groups": per_qkv_group(normuon),
    "normuon_qkv_groups_longer": per_qkv_group(normuon_longer),
    "adamuon_qkv_groups": per_qkv_group(adamuon),
    "namo_qkv_groups": per_qkv_group(namo),
}
SHAPES = {"tall": (20, 12), "wide": (12, 28)}
SQUARE = (16, 16)


def lion(W, g, M, lr=1e-2, wd=0.1, beta1=0.9, beta2=0.99):
    W = W * (1 - lr * wd)
    W = W - lr * torch.sign(beta1 * M + (1 - beta1) * g)
    M.mul_(beta2).add_((1 - beta2) * g)
    return W


def write(out, name, t):
    t = t.reshape(t.size(0), -1) if t.dim() > 1 else t.reshape(1, -1)
    out.write(f"matrix {name} {t.size(0)} {t.size(1)}\n")
    for row in t.tolist():
        out.write(" ".join(f"{v:.17g}" for v in row) + "\n")


def shape_data(gen, m, n):
    w0 = torch.randn(m, n, generator=gen) / n ** 0.5
    grads = [torch.randn(m, n, generator=gen) for _ in range(3)]
    grads[1] += 2.0 * torch.randn(m, 1, generator=gen) @ torch.randn(1, n, generator=gen)
    return w0, grads


def write_data(out, shape_name, w0, grads):
    write(out, f"{shape_name}/W0", w0)
    for k, g in enumerate(grads, 1):
        write(out, f"{shape_name}/G{k}", g)


def write_variants(out, shape_name, w0, grads, variants):
    for name, step in variants.items():
        W, state = w0.clone(), {}
        for k, g in enumerate(grads, 1):
            W = step(W, g, state)
            write(out, f"{shape_name}/{name}/W{k}", W)


def write_dion(out, shape_name, m, n, gen_dion):
    """Dion with rank_fraction 1 and 0.5: the starting Q (min(m, n) x r, randn as dion's) is written too."""
    w0 = torch.randn(m, n, generator=gen_dion) / n ** 0.5
    grads = [torch.randn(m, n, generator=gen_dion) for _ in range(3)]
    write(out, f"{shape_name}/dion_data/W0", w0)
    for k, g in enumerate(grads, 1):
        write(out, f"{shape_name}/dion_data/G{k}", g)
    for name, rank in (("dion", min(m, n)), ("dion_half", (min(m, n) + 1) // 2)):
        state = {"Q": torch.randn(min(m, n), rank, generator=gen_dion)}
        write(out, f"{shape_name}/{name}/Q0", state["Q"])
        W = w0.clone()
        for k, g in enumerate(grads, 1):
            W = dion(W, g, state)
            write(out, f"{shape_name}/{name}/W{k}", W)


def main(path):
    gen = torch.Generator().manual_seed(20261201)
    with open(path, "w") as out:
        out.write("# matopt golden data: scripts/make_golden_variants.py, torch %s, float64\n" % torch.__version__)
        data = {}
        for shape_name, (m, n) in SHAPES.items():
            data[shape_name] = shape_data(gen, m, n)
            write_data(out, shape_name, *data[shape_name])
            write_variants(out, shape_name, *data[shape_name], VARIANTS)
        for shape_name, (m, n) in SHAPES.items():
            write_dion(out, shape_name, m, n, torch.Generator().manual_seed(20261202))
        for name, shape in (("vector", (7,)), ("matrix", (5, 3))):
            W = torch.randn(*shape, generator=gen)
            M = torch.zeros(*shape)
            write(out, f"lion/{name}/W0", W)
            for k in range(1, 4):
                g = torch.randn(*shape, generator=gen)
                write(out, f"lion/{name}/G{k}", g)
                W = lion(W, g, M)
                write(out, f"lion/{name}/W{k}", W)
        # Added later, after the first version's blocks: the row-block second moments on tall and wide (the same
        # data), then the square shape with every variant and Dion, from a generator of its own.
        for shape_name in SHAPES:
            write_variants(out, shape_name, *data[shape_name], ROW_BLOCK_MOMENTS)
        gen_square = torch.Generator().manual_seed(20261203)
        w0, grads = shape_data(gen_square, *SQUARE)
        write_data(out, "square", w0, grads)
        write_variants(out, "square", w0, grads, {**VARIANTS, **ROW_BLOCK_MOMENTS})
        write_dion(out, "square", *SQUARE, gen_square)
        # Added after the square blocks: RMNP as microsoft/dion runs it, on the data above.
        data["square"] = (w0, grads)
        for shape_name in ("tall", "wide", "square"):
            write_variants(out, shape_name, *data[shape_name], {"rmnp_reference": rmnp_reference})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/golden/variants.txt")

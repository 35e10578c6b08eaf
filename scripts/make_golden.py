#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Golden data for matopt's tests, from an independent implementation in PyTorch (float64).

Each optimizer below is written the way its reference code writes it:
  * Muon: KellerJordan/Muon `muon_update` + `zeropower_via_newtonschulz5` (EMA momentum via lerp,
    Nesterov, Jordan NS5 with eps 1e-7, scale max(1, m/n)^0.5, decoupled weight decay), in float64
    instead of bfloat16.
  * RMNP: Sum momentum (buf = beta buf + g), Nesterov (g + beta buf), F.normalize over the input dimension
    (rows, eps 1e-12), scale max(1, m/n)^0.5, decoupled weight decay.
  * ColNorm: as RMNP with F.normalize over the output dimension (columns), scale max(1, n/m)^0.5.
  * AdamW: torch.optim.AdamW itself.
  * MoonlightMuon: Sum momentum, Nesterov, Jordan NS5, scale 0.2 sqrt(max(m, n)), decoupled weight decay.
  * OrScale (NUS-HPC-AI-Lab/OrScale, spec 3.2): Sum momentum, Nesterov, Polar Express NS (input divided by
    1.02 ||X||_F + 1e-6, the last coefficient repeating), D = wd W + Q (coupled decay), r = ||W|| / (c ||D|| + 1e-6)
    clipped, W <- W - lr r D; c = 1, or ||W0|| / ||D0|| at the first step (OrScale-LM, "calibrate").
Shapes: tall 20x12, wide 12x28 (inputs from torch.randn); and, with inputs from a splitmix64 generator that the
test re-implements (so that large inputs need not be stored): gram_tall 48x10 and gram_wide 10x44 (max/min >= 4,
where matopt picks Gram Newton-Schulz), row 1x9, col 9x1, tiles 270x300 (min(m, n) > 256: several of the Eigen
engine's 256-tiles). Of the tiles shape only sketches are stored: rows 0, 256, 269 of W_3 and of NS(G1), (W_k - W0) z and
(W_k - W0)^T y for generator vectors z, y, and ||W_k - W0||_F.

Usage: python3 scripts/make_golden.py tests/golden/golden.txt
Format: blocks "matrix <name> <rows> <cols>" followed by rows*cols values, row-major, %.17g.
"""
import sys

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

LR, WD, BETA = 0.02, 0.01, 0.95


def newton_schulz(G, coeffs, safety, eps):
    """X / (safety ||X||_F + eps), then X <- a X + (b A + c A^2) X with A = X X^T per coefficient triple, on the
    wide orientation (KellerJordan/Muon's zeropower_via_newtonschulz5, modded-nanogpt's polar_express)."""
    X = G.clone()
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) * safety + eps)
    for a, b, c in coeffs:
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


def zeropower_via_newtonschulz5(G, steps=5):
    return newton_schulz(G, [(3.4445, -4.7750, 2.0315)] * steps, 1.0, 1e-7)


def zeropower_polar_express(G):
    coeffs = [(8.156554524902461, -22.48329292557795, 15.878769915207462),
              (4.042929935166739, -2.808917465908714, 0.5000178451051316),
              (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
              (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
              (2.3465413258596377, -1.7097828382687081, 0.42323551169305323)]
    return newton_schulz(G, coeffs, 1.02, 1e-6)


def moonlight_step(p, grad, buf):
    buf.mul_(BETA).add_(grad)
    update = zeropower_via_newtonschulz5(grad.add(buf, alpha=BETA))
    update *= 0.2 * max(p.size(0), p.size(1)) ** 0.5
    p.mul_(1 - LR * WD)
    p.add_(update, alpha=-LR)


def orscale_step(clip, calibrate):
    cal = {}

    def step(p, grad, buf):
        buf.mul_(BETA).add_(grad)
        d = WD * p + zeropower_polar_express(grad.add(buf, alpha=BETA))
        wn, dn = p.norm().item(), d.norm().item()
        if calibrate and "c" not in cal:
            cal["c"] = wn / dn
        r = min(max(wn / (cal.get("c", 1.0) * dn + 1e-6), clip[0]), clip[1])
        p.add_(d, alpha=-LR * r)
    return step


def muon_step(p, grad, buf):
    buf.lerp_(grad, 1 - BETA)
    update = grad.clone().lerp_(buf, BETA)
    update = zeropower_via_newtonschulz5(update)
    update *= max(1, grad.size(-2) / grad.size(-1)) ** 0.5
    p.mul_(1 - LR * WD)
    p.add_(update, alpha=-LR)


def normalized_step(dim, scale):
    def step(p, grad, buf):
        buf.mul_(BETA).add_(grad)
        update = grad.add(buf, alpha=BETA)
        update = F.normalize(update, dim=dim, eps=1e-12)
        p.mul_(1 - LR * WD)
        p.add_(update, alpha=-LR * scale(p.size(0), p.size(1)))
    return step


OPTIMIZERS = {
    "muon": muon_step,
    "rmnp": normalized_step(-1, lambda m, n: max(1, m / n) ** 0.5),
    "colnorm": normalized_step(0, lambda m, n: max(1, n / m) ** 0.5),
}
# Written for the extended shapes (and, for tall and wide, after the three above so that their data keep their
# places). orscale_clip's upper bound 1.0 is below r on every shape here, so the clip acts.
EXTENDED = {
    "moonlight_muon": moonlight_step,
    "orscale": lambda: orscale_step((0.5, 1.5), False),
    "orscale_lm": lambda: orscale_step((0.1, 5.0), True),
    "orscale_clip": lambda: orscale_step((0.5, 1.0), False),
}
GENERATED_SHAPES = {"gram_tall": (48, 10), "gram_wide": (10, 44), "row": (1, 9), "col": (9, 1), "tiles": (270, 300)}
SKETCH_ROWS = (0, 256, 269)


class SplitMix64:
    """splitmix64 (Steele, Lea, Flood 2014); uniform doubles in [-1, 1) from the top 53 bits (exact)."""

    def __init__(self, seed):
        self.x = seed

    def next(self):
        self.x = (self.x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def uniform(self, m, n):
        """An m x n matrix filled row by row."""
        return torch.tensor([[(self.next() >> 11) * 2.0 ** -53 * 2 - 1 for _ in range(n)] for _ in range(m)])


def generated_inputs(m, n):
    """W0 with entries of variance 1/n; G1, G3 uniform; G2 uniform plus a rank-one term 2 a b^T."""
    rng = SplitMix64(m * 1000 + n)
    w0 = rng.uniform(m, n) * (3.0 / n) ** 0.5
    grads = [rng.uniform(m, n) for _ in range(3)]
    grads[1] += 2.0 * rng.uniform(m, 1) @ rng.uniform(1, n)
    return w0, grads, rng.uniform(n, 1), rng.uniform(m, 1)
SHAPES = {"tall": (20, 12), "wide": (12, 28)}


def write(out, name, t):
    t = t.reshape(t.size(0), -1) if t.dim() > 1 else t.reshape(1, -1)
    out.write(f"matrix {name} {t.size(0)} {t.size(1)}\n")
    for row in t.tolist():
        out.write(" ".join(f"{v:.17g}" for v in row) + "\n")


def main(path):
    gen = torch.Generator().manual_seed(20260529)
    with open(path, "w") as out:
        out.write("# matopt golden data: scripts/make_golden.py, torch %s, float64\n" % torch.__version__)
        out.write(f"# lr {LR} weight_decay {WD} beta {BETA} nesterov\n")
        for shape_name, (m, n) in SHAPES.items():
            w0 = torch.randn(m, n, generator=gen) / n ** 0.5
            grads = [torch.randn(m, n, generator=gen) for _ in range(3)]
            # A gradient whose Gram matrix is far from diagonal, so RMNP and Muon differ visibly.
            grads[1] += 2.0 * torch.randn(m, 1, generator=gen) @ torch.randn(1, n, generator=gen)
            write(out, f"{shape_name}/W0", w0)
            for k, g in enumerate(grads, 1):
                write(out, f"{shape_name}/G{k}", g)
            for name, step in OPTIMIZERS.items():
                p, buf = w0.clone(), torch.zeros_like(w0)
                for k, g in enumerate(grads, 1):
                    step(p, g.clone(), buf)
                    write(out, f"{shape_name}/{name}/W{k}", p)
            run_all(out, shape_name, w0, grads, only_extended=True)
        # AdamW (torch.optim.AdamW) on a vector and a matrix, three steps.
        for name, shape in (("vector", (7,)), ("matrix", (5, 3))):
            p = torch.nn.Parameter(torch.randn(*shape, generator=gen))
            write(out, f"adamw/{name}/W0", p.detach())
            opt = torch.optim.AdamW([p], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
            for k in range(1, 4):
                g = torch.randn(*shape, generator=gen)
                write(out, f"adamw/{name}/G{k}", g)
                p.grad = g.clone()
                opt.step()
                write(out, f"adamw/{name}/W{k}", p.detach())
        for shape_name, (m, n) in GENERATED_SHAPES.items():
            w0, grads, z, y = generated_inputs(m, n)
            run_all(out, shape_name, w0, grads, only_extended=False, sketch=(z, y) if shape_name == "tiles" else None)


def run_all(out, shape_name, w0, grads, only_extended, sketch=None):
    """Every optimizer over three steps (W1, W2, W3), and the matrix-level NS of G1 (Jordan, Polar Express)."""
    def emit(name, p, base):
        if sketch is None:
            write(out, name, p)
            return
        z, y = sketch
        if not name.endswith(("/W1", "/W2")):
            write(out, name + "/rows", p[list(SKETCH_ROWS)])
        write(out, name + "/sketch", (p - base) @ z)
        write(out, name + "/sketchT", (p - base).mT @ y)
        write(out, name + "/norm", (p - base).norm().reshape(1, 1))

    steps = dict(EXTENDED) if only_extended else {**OPTIMIZERS, **EXTENDED}
    for name, step in steps.items():
        step = step() if name.startswith("orscale") else step
        p, buf = w0.clone(), torch.zeros_like(w0)
        for k, g in enumerate(grads, 1):
            step(p, g.clone(), buf)
            emit(f"{shape_name}/{name}/W{k}", p, w0)
    zero = torch.zeros_like(w0)
    emit(f"{shape_name}/ns_jordan", zeropower_via_newtonschulz5(grads[0]), zero)
    emit(f"{shape_name}/ns_polar_express", zeropower_polar_express(grads[0]), zero)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/golden/golden.txt")

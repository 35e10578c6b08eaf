#!/usr/bin/env python3
"""Golden data for matopt's tests, from an independent implementation in PyTorch (float64).

Each optimizer below is written the way its reference code writes it:
  * Muon: KellerJordan/Muon `muon_update` + `zeropower_via_newtonschulz5` (EMA momentum via lerp,
    Nesterov, Jordan NS5 with eps 1e-7, scale max(1, m/n)^0.5, decoupled weight decay), in float64
    instead of bfloat16.
  * RMNP: Sum momentum (buf = beta buf + g), Nesterov (g + beta buf), F.normalize over the input dimension
    (rows, eps 1e-12), scale max(1, m/n)^0.5, decoupled weight decay.
  * ColNorm: as RMNP with F.normalize over the output dimension (columns), scale max(1, n/m)^0.5.
  * AdamW: torch.optim.AdamW itself.

Usage: python3 scripts/make_golden.py tests/golden/golden.txt
Format: blocks "matrix <name> <rows> <cols>" followed by rows*cols values, row-major, %.17g.
"""
import sys

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

LR, WD, BETA = 0.02, 0.01, 0.95


def zeropower_via_newtonschulz5(G, steps=5):
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.clone()
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


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
                    if k in (1, 3):
                        write(out, f"{shape_name}/{name}/W{k}", p)
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


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/golden/golden.txt")

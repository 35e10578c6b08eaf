#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The GPT example (examples/gpt) in PyTorch: the reference matopt's GPT timings are measured against.

The same byte-level GPT (examples/gpt/model.hpp: pre-LN blocks, separate q, k, v, o projections without bias,
causal softmax attention, a GELU MLP d -> 4d -> d, learned position embeddings, an untied head; GPT-2's init),
trained on the same text (examples/gpt/corpus.hpp: the `fortunes` files in sorted name order, bytes, the first
90% for training), with Muon as KellerJordan/Muon (muon.py) writes it on the hidden matrices and
torch.optim.AdamW on everything else, routed as matopt::TorchOptimizer routes gpt's parameters:

  Muon   blocks.<i>.{q,k,v,o,fc,proj}.weight  (momentum buffer lerp, beta 0.95, Nesterov,
         zeropower_via_newtonschulz5 (3.4445, -4.7750, 2.0315) x 5, update times max(1, rows/cols)^0.5, lr 0.02)
  AdamW  tok_emb, pos_emb, head, every LayerNorm weight and bias  (betas (0.9, 0.95), eps 1e-8, no weight decay,
         lr --adam-lr)

with gpt's schedule (linear warm-up over --warmup steps, default 5% of the steps, then linear decay to
1/(steps - warmup)), applied to both groups. --ns-dtype bfloat16 runs Newton-Schulz as KellerJordan/Muon does
(X = G.bfloat16(), every product in bf16, the bf16 update added to the fp32 weight); float32 runs the same code
in fp32.

Timing as gpt's train(): `forward+backward` is zero_grad, the forward pass with the loss, and backward;
`optimizer` is the optimizer step alone (Muon and AdamW together, as matopt::TorchOptimizer's step() does both
routes); the batch assembly, the lr update, loss.item() and the evaluations are outside both. gpt subtracts its
diagnostics' telemetry from its optimizer time; this script has none.

Exact, not approximate:
  - the batches: gpt draws each window offset with std::uniform_int_distribution<int64_t> over std::mt19937_64
    seeded with seed + 1; both are replicated here in pure Python (the engine, and libstdc++'s distribution:
    Lemire's nearly divisionless method with a 128-bit product, libstdc++ of GCC 11 and later, Debian 12's
    GCC 12 included). Checked against a C++ build of the same two lines: identical offsets.
  - the initial weights: torch.manual_seed(seed), then the modules built in gpt's order (each nn.Linear's and
    nn.Embedding's default init draws from the same generator as libtorch's) and GPT-2's init over
    named_parameters() in the same order; the same ATen (Debian's libtorch 1.13) under both.
  - the validation windows (--eval-batches x --batch windows evenly spaced over the validation text).
Checked with --d-model 64 --steps 20 --eval-every 1 --eval-batches 4 against gpt --optimizers muon with the same
flags: in float32, all 20 training and 20 validation losses equal gpt's to the 6 digits gpt writes (largest
difference 5.4e-6); in bfloat16, within 1.8e-3 of them. Rounding alone separates them: matopt's Newton-Schulz
runs the Gram variant on fc and proj (aspect 4 >= gram_aspect 4) and folds its products differently.

  python3 bench/gpt_torch.py [--d-model 128] [--layers 4] [--heads 4] [--context 64] [--batch 16] [--steps 600]
      [--seed 0] [--threads 0] [--warmup N] [--adam-lr 2e-3] [--lr 0.02 | --lr muon=0.02] [--eval-every 50]
      [--eval-batches 16] [--ns-dtype float32|bfloat16] [--quick] [--data DIR] [--json FILE]
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------------------------------------------
# gpt's batch sampling: std::mt19937_64 and libstdc++'s std::uniform_int_distribution<std::int64_t>


class MT19937_64:
    """std::mt19937_64 (Matsumoto and Nishimura's 64-bit Mersenne Twister, the C++ standard's parameters)."""

    N, M = 312, 156
    UPPER, LOWER = 0xFFFFFFFF80000000, 0x7FFFFFFF

    def __init__(self, seed):
        mt = [seed & MASK64]
        for i in range(1, self.N):
            mt.append((6364136223846793005 * (mt[-1] ^ (mt[-1] >> 62)) + i) & MASK64)
        self.mt, self.index = mt, self.N

    def _twist(self):
        mt, n, m = self.mt, self.N, self.M
        for i in range(n):
            x = (mt[i] & self.UPPER) | (mt[(i + 1) % n] & self.LOWER)
            xa = (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
            mt[i] = mt[(i + m) % n] ^ xa
        self.index = 0

    def __call__(self):
        if self.index >= self.N:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK64


def uniform_int(rng, lo, hi):
    """std::uniform_int_distribution<std::int64_t>(lo, hi)(rng) as libstdc++ (GCC 11 and later) computes it for a
    64-bit engine: Lemire's nearly divisionless method (arXiv 1805.10941) with a 128-bit product."""
    rng_range = hi - lo + 1
    product = rng() * rng_range
    low = product & MASK64
    if low < rng_range:
        threshold = ((1 << 64) - rng_range) % rng_range
        while low < threshold:
            product = rng() * rng_range
            low = product & MASK64
    return (product >> 64) + lo


# ---------------------------------------------------------------------------------------------------
# The text (examples/gpt/corpus.hpp)


def load_corpus(folder, train_fraction=0.9):
    """Every plain file without an extension (not a link) of `folder`, in sorted name order, as bytes."""
    if not os.path.isdir(folder):
        sys.exit(f"gpt_torch: the fortunes folder '{folder}' does not exist (apt-get install fortunes, "
                 "or set MATOPT_FORTUNES_DIR)")
    names = sorted((e.name for e in os.scandir(folder)
                    if not e.is_symlink() and e.is_file(follow_symlinks=False) and "." not in e.name),
                   key=lambda s: s.encode())
    if not names:
        sys.exit(f"gpt_torch: no fortune files in '{folder}'")
    text = b"".join(open(os.path.join(folder, n), "rb").read() for n in names)
    train_bytes = int(float(len(text)) * train_fraction)
    return text, names, train_bytes


def bytes_tensor(b):
    return torch.frombuffer(bytearray(b), dtype=torch.uint8).to(torch.int64)


def windows(text, offsets, T):
    """x = text[o, o + T), y = text[o + 1, o + T + 1) for each offset."""
    idx = torch.tensor(offsets, dtype=torch.int64).unsqueeze(1) + torch.arange(T, dtype=torch.int64)
    return text[idx], text[idx + 1]


def schedule(t, total, warm):
    """gpt's: linear warm-up to 1 over `warm` steps, then linear decay to 1/(total - warm) at the last step."""
    if t < warm:
        return (t + 1) / warm
    return (total - t) / (total - warm)


# ---------------------------------------------------------------------------------------------------
# The model (examples/gpt/model.hpp); modules are created in gpt's order, so that the default inits draw the
# same numbers from the generator


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d, bias=False)
        self.proj = nn.Linear(4 * d, d, bias=False)

    def forward(self, x, causal):
        B, T, d = x.shape
        hd = d // self.heads
        h = self.ln1(x)

        def split(t):
            return t.view(B, T, self.heads, hd).transpose(1, 2)

        qh, kh, vh = split(self.q(h)), split(self.k(h)), split(self.v(h))
        att = torch.matmul(qh, kh.transpose(-2, -1)) / math.sqrt(float(hd))
        att = torch.softmax(att.masked_fill(causal[:T, :T], float("-inf")), -1)
        y = torch.matmul(att, vh).transpose(1, 2).contiguous().view(B, T, d)
        a = x + self.o(y)
        return a + self.proj(F.gelu(self.fc(self.ln2(a))))


class Gpt(nn.Module):
    def __init__(self, vocab, d_model, layers, heads, context):
        super().__init__()
        self.vocab, self.layers = vocab, layers
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList([Block(d_model, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.causal = torch.ones(context, context, dtype=torch.bool).triu(1)  # True: may not attend
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        """GPT-2's: normal(0, 0.02) for every matrix and embedding, o and proj by 1/sqrt(2 layers) more."""
        residual = 0.02 / math.sqrt(2.0 * self.layers)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                is_residual = ".o.weight" in name or ".proj.weight" in name
                nn.init.normal_(p, 0.0, residual if is_residual else 0.02)
            elif "bias" in name:
                nn.init.zeros_(p)
            else:
                nn.init.ones_(p)

    def forward(self, idx):
        T = idx.size(1)
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T, dtype=torch.int64))
        for b in self.blocks:
            x = b(x, self.causal)
        return self.head(self.ln_f(x))

    def loss(self, x, y):
        return F.cross_entropy(self.forward(x).view(-1, self.vocab), y.reshape(-1))


def is_hidden(name, p):
    """matopt::TorchOptimizer's routing: a module component containing "emb" (or named wte, wpe) is an embedding,
    one named head, lm_head or classifier an output head, both AdamW; otherwise a tensor of two or more dimensions
    with more than one row and column is a hidden matrix (Muon), anything else a vector (AdamW)."""
    parts = name.split(".")[:-1]
    if any("emb" in c or c in ("wte", "wpe") for c in parts):
        return False
    if any(c in ("head", "lm_head", "classifier") for c in parts):
        return False
    return p.dim() >= 2 and p.size(0) > 1 and p.numel() // p.size(0) > 1


# ---------------------------------------------------------------------------------------------------
# Muon as KellerJordan/Muon (muon.py: zeropower_via_newtonschulz5, muon_update, SingleDeviceMuon)


def zeropower_via_newtonschulz5(G, steps, dtype=torch.bfloat16):
    """KellerJordan/Muon's quintic Newton-Schulz; `dtype` bfloat16 is KellerJordan's (X = G.bfloat16())."""
    assert G.ndim >= 2
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.to(dtype)
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


def muon_update(grad, momentum, beta=0.95, ns_steps=5, nesterov=True, dtype=torch.bfloat16):
    momentum.lerp_(grad, 1 - beta)
    update = grad.lerp_(momentum, beta) if nesterov else momentum
    if update.ndim == 4:
        update = update.view(len(update), -1)
    update = zeropower_via_newtonschulz5(update, steps=ns_steps, dtype=dtype)
    update *= max(1, grad.size(-2) / grad.size(-1)) ** 0.5
    return update


class SingleDeviceMuon(torch.optim.Optimizer):
    """KellerJordan/Muon's SingleDeviceMuon, with the Newton-Schulz dtype as an option."""

    def __init__(self, params, lr=0.02, weight_decay=0.0, momentum=0.95, ns_dtype=torch.bfloat16):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum))
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                state = self.state[p]
                if len(state) == 0:
                    state["momentum_buffer"] = torch.zeros_like(p)
                update = muon_update(p.grad, state["momentum_buffer"], beta=group["momentum"], dtype=self.ns_dtype)
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update.reshape(p.shape), alpha=-group["lr"])


# ---------------------------------------------------------------------------------------------------


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d-model", type=int, default=None, help="default 128 (64 with --quick)")
    ap.add_argument("--layers", type=int, default=None, help="default 4 (2 with --quick)")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=None, help="default 600 (120 with --quick)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="0: torch's default")
    ap.add_argument("--warmup", type=int, default=-1, help="default: 5%% of the steps, at least 1")
    ap.add_argument("--adam-lr", type=float, default=2e-3)
    ap.add_argument("--lr", default="0.02", help="Muon's lr: a number, or muon=X as gpt takes it")
    ap.add_argument("--eval-every", type=int, default=None, help="default 50 (30 with --quick)")
    ap.add_argument("--eval-batches", type=int, default=None, help="default 16 (8 with --quick)")
    ap.add_argument("--ns-dtype", choices=("float32", "bfloat16"), default="float32")
    ap.add_argument("--quick", action="store_true", help="gpt's --quick defaults")
    ap.add_argument("--data", default="", help="the fortunes folder (default $MATOPT_FORTUNES_DIR, else Debian's)")
    ap.add_argument("--json", help="write the numbers here")
    a = ap.parse_args()
    q = a.quick
    a.d_model = a.d_model if a.d_model is not None else (64 if q else 128)
    a.layers = a.layers if a.layers is not None else (2 if q else 4)
    a.steps = a.steps if a.steps is not None else (120 if q else 600)
    a.eval_every = a.eval_every if a.eval_every is not None else (30 if q else 50)
    a.eval_batches = a.eval_batches if a.eval_batches is not None else (8 if q else 16)
    lr = a.lr.split("=", 1)
    if len(lr) == 2 and lr[0] != "muon":
        ap.error(f"--lr: this script runs Muon only (got '{a.lr}')")
    a.lr = float(lr[-1])
    for key in ("d_model", "layers", "heads", "batch", "steps", "eval_every", "eval_batches"):
        if getattr(a, key) < 1:
            ap.error(f"--{key.replace('_', '-')} must be >= 1")
    if a.context < 2:
        ap.error("--context must be >= 2")
    if a.d_model % a.heads:
        ap.error("--d-model must be a multiple of --heads")
    if not (a.lr > 0 and a.adam_lr > 0):
        ap.error("--lr and --adam-lr must be > 0")
    if a.warmup < 0:
        a.warmup = max(1, a.steps // 20)
    if a.warmup >= a.steps:
        ap.error("--warmup must be below --steps")
    if not a.data:
        a.data = os.environ.get("MATOPT_FORTUNES_DIR") or "/usr/share/games/fortunes"
    return a


def main():
    a = parse()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    threads = torch.get_num_threads()
    text, names, train_bytes = load_corpus(a.data)
    train, val = bytes_tensor(text[:train_bytes]), bytes_tensor(text[train_bytes:])
    print(f"torch {torch.__version__}; threads {threads}")
    print(f"text: {len(names)} files from {a.data}, {len(text)} bytes ({train.numel()} training, "
          f"{val.numel()} validation)")

    torch.manual_seed(a.seed)
    model = Gpt(256, a.d_model, a.layers, a.heads, a.context)
    hidden = [(n, p) for n, p in model.named_parameters() if is_hidden(n, p)]
    other = [(n, p) for n, p in model.named_parameters() if not is_hidden(n, p)]
    ns_dtype = torch.bfloat16 if a.ns_dtype == "bfloat16" else torch.float32
    muon = SingleDeviceMuon([p for _, p in hidden], lr=a.lr, ns_dtype=ns_dtype)
    adamw = torch.optim.AdamW([p for _, p in other], lr=a.adam_lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    optimizers = (muon, adamw)
    base_lr = [[g["lr"] for g in o.param_groups] for o in optimizers]
    with torch.no_grad():
        checksum = sum(float(p.double().sum()) for p in model.parameters())
    print(f"model: d_model {a.d_model}, {a.layers} layers, {a.heads} heads, context {a.context}; batch {a.batch}, "
          f"{a.steps} steps (warm-up {a.warmup}), seed {a.seed}; Muon (NS in {a.ns_dtype}) on {len(hidden)} hidden "
          f"matrices, AdamW on {len(other)} other tensors; initial weights' sum {checksum:.9g}")

    rng = MT19937_64(a.seed + 1)
    T = a.context
    n_val = a.eval_batches * a.batch
    val_offsets = [i * (val.numel() - T - 2) // max(1, n_val - 1) for i in range(n_val)]

    def validation_loss():
        model.eval()
        total = 0.0
        with torch.no_grad():
            for b in range(a.eval_batches):
                x, y = windows(val, val_offsets[b * a.batch:(b + 1) * a.batch], T)
                total += model.loss(x, y).item()
        model.train()
        return total / a.eval_batches

    optimizer_s = fwd_bwd_s = 0.0
    window_loss, window, final_val, evals = 0.0, 0, float("nan"), []
    for step in range(a.steps):
        x, y = windows(train, [uniform_int(rng, 0, train.numel() - T - 2) for _ in range(a.batch)], T)
        t0 = time.perf_counter()
        for o in optimizers:
            o.zero_grad(set_to_none=False)  # libtorch 1.13's zero_grad(): zeroes the gradients in place
        loss = model.loss(x, y)
        loss.backward()
        fwd_bwd_s += time.perf_counter() - t0
        f = schedule(step, a.steps, a.warmup)
        for o, lrs in zip(optimizers, base_lr):
            for g, lr in zip(o.param_groups, lrs):
                g["lr"] = lr * f
        t1 = time.perf_counter()
        for o in optimizers:
            o.step()
        optimizer_s += time.perf_counter() - t1
        window_loss += loss.item()
        window += 1
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            final_val = validation_loss()
            evals.append({"step": step + 1, "train_loss": window_loss / window, "val_loss": final_val,
                          "optimizer_seconds": optimizer_s, "fwd_bwd_seconds": fwd_bwd_s})
            print(f"step {step + 1:5d}  train loss {window_loss / window:.6f}  val loss {final_val:.6f}", flush=True)
            window_loss, window = 0.0, 0

    opt_ms, fb_ms = 1e3 * optimizer_s / a.steps, 1e3 * fwd_bwd_s / a.steps
    print(f"optimizer ms/step: {opt_ms:.3f}")
    print(f"forward+backward ms/step: {fb_ms:.3f}")
    print(f"optimizer / forward+backward: {opt_ms / fb_ms:.3f}")
    print(f"final validation loss: {final_val:.6f}")
    print(f"torch version: {torch.__version__}")
    print(f"threads: {threads}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"optimizer_ms_per_step": opt_ms, "fwd_bwd_ms_per_step": fb_ms, "ratio": opt_ms / fb_ms,
                       "final_val_loss": final_val, "torch": torch.__version__, "threads": threads,
                       "optimizer_seconds": optimizer_s, "fwd_bwd_seconds": fwd_bwd_s, "ns_dtype": a.ns_dtype,
                       "config": {"d_model": a.d_model, "layers": a.layers, "heads": a.heads, "context": a.context,
                                  "batch": a.batch, "steps": a.steps, "warmup": a.warmup, "seed": a.seed,
                                  "lr": a.lr, "adam_lr": a.adam_lr, "eval_every": a.eval_every,
                                  "eval_batches": a.eval_batches},
                       "initial_weights_sum": checksum, "evals": evals}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs matopt's CPU benchmark and a PyTorch CPU reference of the same steps in one invocation and prints
the ratios of docs/performance.md (targets and cost model there). Uses Debian's python3-torch (fp32, same thread count).

  python3 bench/compare.py [--bench build/bench/matopt_bench] [--threads 2] [--repetitions 5] [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

SHAPES = [(1024, 1024), (1024, 4096), (4096, 1024), (2048, 2048)]
BETA, LR = 0.95, 0.02


def zeropower_via_newtonschulz5(G, steps=5):
    # KellerJordan/Muon, in fp32 on the CPU.
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G
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


def muon_step(p, g, buf):
    buf.lerp_(g, 1 - BETA)
    u = g.lerp(buf, BETA)
    u = zeropower_via_newtonschulz5(u)
    p.add_(u, alpha=-LR * max(1, p.size(0) / p.size(1)) ** 0.5)


def rmnp_step(p, g, buf):
    buf.mul_(BETA).add_(g)
    u = F.normalize(g.add(buf, alpha=BETA), dim=-1, eps=1e-12)
    p.add_(u, alpha=-LR * max(1, p.size(0) / p.size(1)) ** 0.5)


def colnorm_step(p, g, buf):
    buf.mul_(BETA).add_(g)
    u = F.normalize(g.add(buf, alpha=BETA), dim=0, eps=1e-12)
    p.add_(u, alpha=-LR * max(1, p.size(1) / p.size(0)) ** 0.5)


def ns_only(p, g, buf):
    zeropower_via_newtonschulz5(g)


def time_torch(fn, m, n, repetitions):
    p, g, buf = torch.randn(m, n), torch.randn(m, n), torch.zeros(m, n)
    fn(p, g, buf)  # warm-up
    samples = []
    for _ in range(repetitions):
        iters, start = 0, time.perf_counter()
        while True:
            fn(p, g, buf)
            iters += 1
            elapsed = time.perf_counter() - start
            if elapsed > 0.3:
                break
        samples.append(elapsed / iters)
    return statistics.median(samples)


def run_matopt(bench, threads, repetitions):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([bench, "--benchmark_format=json", f"--benchmark_repetitions={repetitions}",
                          "--benchmark_report_aggregates_only=true", "--benchmark_min_time=0.2"],
                         env=env, check=True, capture_output=True, text=True).stdout
    data = json.loads(out)
    medians = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") == "median":
            medians[b["run_name"].removesuffix("/real_time")] = b
    return data, medians


def seconds(b):
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]]
    return b["real_time"] * scale


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/bench/matopt_bench")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--json", help="write matopt's raw benchmark JSON and the torch timings here")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    raw, mo = run_matopt(args.bench, args.threads, args.repetitions)
    engine = next(k for k in mo if k.startswith("BM_Gemm/")).split("/")[1]
    gemm_rate = max(b["flops"] for k, b in mo.items() if k.startswith("BM_Gemm/"))
    stream_rate = mo["BM_Stream/elements:4194304"]["bytes"]

    torch_times = {}
    for m, n in SHAPES:
        for name, fn in (("muon", muon_step), ("rmnp", rmnp_step), ("colnorm", colnorm_step), ("ns", ns_only)):
            torch_times[(name, m, n)] = time_torch(fn, m, n, args.repetitions)

    ctx = raw["context"]
    print(f"machine: {ctx.get('num_cpus')} CPUs at {ctx.get('mhz_per_cpu')} MHz, threads {args.threads}, "
          f"torch {torch.__version__}, matopt GEMM engine {engine}")
    print(f"same-run references: {engine} SGEMM {gemm_rate / 1e9:.1f} GFLOP/s, "
          f"stream (20 B/element) {stream_rate / 1e9:.1f} GB/s\n")
    print(f"{'shape':>11} | {'step':8} | {'matopt ms':>9} | {'torch ms':>9} | {'speed-up':>8} | rate vs roofline")
    print("-" * 88)
    results = []
    for m, n in SHAPES:
        key = f"m:{m}/n:{n}"
        for name in ("ns", "muon", "rmnp", "colnorm"):
            bname = ("BM_NS/jordan/" if name == "ns" else f"BM_Step/{name}/") + key
            b = mo[bname]
            t_mo, t_pt = seconds(b), torch_times[(name, m, n)]
            if name in ("ns", "muon"):
                roof = f"naive FLOP/s = {b['flops'] / gemm_rate:.2f} x SGEMM"
            else:
                roof = f"bytes/s = {b['bytes'] / stream_rate:.2f} x stream"
            print(f"{m:>5}x{n:<5} | {name:8} | {t_mo * 1e3:9.3f} | {t_pt * 1e3:9.3f} | {t_pt / t_mo:7.2f}x | {roof}")
            results.append({"shape": [m, n], "step": name, "matopt_s": t_mo, "torch_s": t_pt})
    t_rmnp = seconds(mo["BM_Step/rmnp/m:2048/n:2048"])
    t_muon = seconds(mo["BM_Step/muon/m:2048/n:2048"])
    print(f"\nRMNP step vs Muon step at 2048x2048: {t_muon / t_rmnp:.0f}x faster")
    big = mo["BM_Step/muon/m:2048/n:2048"]["flops"]
    batch = mo["BM_StepBatch/muon/count:64/m:256/n:256"]["flops"]
    print(f"batched 64 x (256x256) Muon: {batch / big:.2f}x the naive FLOP rate of one 2048x2048")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"matopt": raw, "torch": results, "threads": args.threads}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs matopt's CPU benchmark and a PyTorch CPU reference of the same steps in one invocation and prints
the ratios of docs/performance.md (targets and cost model there). Uses Debian's python3-torch (fp32, same thread count).
Where matopt_bench has its bfloat16 Newton-Schulz benchmarks (BM_NS/jordan_bf16, BM_Step/muon_bf16: built with
oneDNN), also the PyTorch bf16 reference (KellerJordan/Muon's zeropower_via_newtonschulz5, X = G.bfloat16(), on the
CPU) and the bf16 targets. Run OpenBLAS with its own choice of kernel:

  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
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


# KellerJordan/Muon's zeropower_via_newtonschulz5, as the GPT reference (bench/gpt_torch.py) runs it: in fp32 here,
# and in bf16 (X = G.bfloat16(), every product in bf16, a bf16 result) for the bf16 rows.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import zeropower_via_newtonschulz5  # noqa: E402
from machine import machine_lines  # noqa: E402


def muon_step(p, g, buf):
    buf.lerp_(g, 1 - BETA)
    u = g.lerp(buf, BETA)
    u = zeropower_via_newtonschulz5(u, 5, dtype=torch.float32)
    p.add_(u, alpha=-LR * max(1, p.size(0) / p.size(1)) ** 0.5)


def muon_bf16_step(p, g, buf):
    # muon_step with KellerJordan/Muon's bf16 Newton-Schulz; the bf16 update is added to the fp32 weight.
    buf.lerp_(g, 1 - BETA)
    u = g.lerp(buf, BETA)
    u = zeropower_via_newtonschulz5(u, 5, dtype=torch.bfloat16)
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
    zeropower_via_newtonschulz5(g, 5, dtype=torch.float32)


def ns_bf16_only(p, g, buf):
    zeropower_via_newtonschulz5(g, 5, dtype=torch.bfloat16)


# matopt's bf16 targets (docs/performance.md): its bf16 Muon step against PyTorch's fp32 and bf16 Muon steps, its bf16
# Newton-Schulz against its own fp32 one.
TARGET_MUON_VS_TORCH_FP32, TARGET_MUON_VS_TORCH_BF16 = 2.5, 1.3
TARGET_NS_VS_FP32 = {(2048, 2048): 1.8}  # the other shapes: TARGET_NS_VS_FP32_OTHER
TARGET_NS_VS_FP32_OTHER = 1.5


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
    cpu, lines = machine_lines()
    print("\n".join(lines), flush=True)
    raw, mo = run_matopt(args.bench, args.threads, args.repetitions)
    engine = next(k for k in mo if k.startswith("BM_Gemm/")).split("/")[1]
    gemm_rate = max(b["flops"] for k, b in mo.items() if k.startswith("BM_Gemm/"))
    stream_rate = mo["BM_Stream/elements:4194304"]["bytes"]

    torch_times = {}
    for m, n in SHAPES:
        for name, fn in (("muon", muon_step), ("rmnp", rmnp_step), ("colnorm", colnorm_step), ("ns", ns_only)):
            torch_times[(name, m, n)] = time_torch(fn, m, n, args.repetitions)
    # the bf16 rows: where matopt_bench has both of a shape's bf16 benchmarks (a build without oneDNN has none)
    bf16_shapes = [(m, n) for m, n in SHAPES
                   if f"BM_NS/jordan_bf16/m:{m}/n:{n}" in mo and f"BM_Step/muon_bf16/m:{m}/n:{n}" in mo]
    for m, n in bf16_shapes:
        for name, fn in (("muon_bf16", muon_bf16_step), ("ns_bf16", ns_bf16_only)):
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
        names = ("ns", "muon", "rmnp", "colnorm") + (("ns_bf16", "muon_bf16") if (m, n) in bf16_shapes else ())
        for name in names:
            bname = {"ns": "BM_NS/jordan/", "ns_bf16": "BM_NS/jordan_bf16/"}.get(name, f"BM_Step/{name}/") + key
            b = mo[bname]
            t_mo, t_pt = seconds(b), torch_times[(name, m, n)]
            if name.endswith("_bf16"):  # torch ms: PyTorch's bf16 Newton-Schulz
                roof = f"naive FLOP/s = {b['flops'] / gemm_rate:.2f} x SGEMM" if "flops" in b else ""
            elif name in ("ns", "muon"):
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
    targets = []
    if not bf16_shapes:
        print("\nbf16 rows skipped: this matopt_bench has no BM_NS/jordan_bf16 or BM_Step/muon_bf16 benchmarks "
              "(built without oneDNN)")
    else:
        missing = [f"{m}x{n}" for m, n in SHAPES if (m, n) not in bf16_shapes]
        if missing:
            print(f"\nbf16 rows skipped at {', '.join(missing)}: matopt_bench has no bf16 benchmarks there")
        print("\nbf16 targets (torch ms of the rows ns_bf16, muon_bf16 above: PyTorch's bf16 Newton-Schulz)")
        print(f"{'shape':>11} | {'matopt muon_bf16 vs torch fp32 muon':>35} | {'vs torch bf16 muon':>24} | "
              f"{'matopt ns_bf16 vs matopt fp32 ns':>32}")
        print("-" * 114)

        def mark(ratio, target):
            return f"{ratio:6.2f}x {'pass' if ratio >= target else 'FAIL'} (>= {target}x)"

        for m, n in bf16_shapes:
            key = f"m:{m}/n:{n}"
            t_muon16 = seconds(mo["BM_Step/muon_bf16/" + key])
            t_ns16, t_ns32 = seconds(mo["BM_NS/jordan_bf16/" + key]), seconds(mo["BM_NS/jordan/" + key])
            r32 = torch_times[("muon", m, n)] / t_muon16
            r16 = torch_times[("muon_bf16", m, n)] / t_muon16
            rns = t_ns32 / t_ns16
            t_ns = TARGET_NS_VS_FP32.get((m, n), TARGET_NS_VS_FP32_OTHER)
            print(f"{m:>5}x{n:<5} | {mark(r32, TARGET_MUON_VS_TORCH_FP32):>35} | "
                  f"{mark(r16, TARGET_MUON_VS_TORCH_BF16):>24} | {mark(rns, t_ns):>32}")
            targets.append({"shape": [m, n], "muon_bf16_vs_torch_fp32_muon": r32,
                            "muon_bf16_vs_torch_bf16_muon": r16, "ns_bf16_vs_matopt_fp32_ns": rns,
                            "pass": {"muon_bf16_vs_torch_fp32_muon": r32 >= TARGET_MUON_VS_TORCH_FP32,
                                     "muon_bf16_vs_torch_bf16_muon": r16 >= TARGET_MUON_VS_TORCH_BF16,
                                     "ns_bf16_vs_matopt_fp32_ns": rns >= t_ns}})
    if args.json:
        out = {"matopt": raw, "torch": results, "threads": args.threads, "cpu": cpu}
        if targets:
            out["bf16_targets"] = targets
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())

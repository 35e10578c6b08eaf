#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Old against new: two matopt_bench binaries, benchmark by benchmark, alternating.

    python3 bench/ab.py --old OLD/matopt_bench --new build/bench/matopt_bench [--filter REGEX] [--rounds 5]
                        [--threads 2]

Each benchmark the new binary lists and REGEX matches runs once per round in each binary, old then new, and the best
time of each is kept: on a shared 2-vCPU VM whose speed drifts by 2x over minutes, adjacent runs compare where runs
minutes apart do not. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for the benchmarks (OpenBLAS picks its own
kernel); the CPU model, its bf16 flags and the kernel are printed first.
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_lines  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--filter", default=".")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.environ.pop("OPENBLAS_CORETYPE", None)  # before OpenBLAS is loaded, here and in the benchmarks
    os.environ.pop("OPENBLAS_L2_SIZE", None)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    for line in machine_lines()[1]:
        print(line)
    listed = subprocess.run([args.new, "--benchmark_list_tests"], capture_output=True, text=True, env=env, check=True)
    names = [n for n in listed.stdout.split() if re.search(args.filter, n)]
    unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    print(f"threads {args.threads}, best of {args.rounds} alternating runs per benchmark (ms)")
    for name in names:
        best = {}
        for _ in range(args.rounds):
            for which, binary in (("old", args.old), ("new", args.new)):
                out = subprocess.run([binary, f"--benchmark_filter=^{re.escape(name)}$", "--benchmark_format=json",
                                      "--benchmark_min_time=0.2"], capture_output=True, text=True, env=env, check=True)
                b = json.loads(out.stdout)["benchmarks"][0]
                best[which] = min(best.get(which, float("inf")), b["real_time"] * unit[b["time_unit"]])
        print(f"{name:50s} old {best['old']:10.3f}  new {best['new']:10.3f}  new speed {best['old'] / best['new']:.2f}x",
              flush=True)


if __name__ == "__main__":
    main()

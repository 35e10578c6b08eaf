#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The machine lines of matopt's benchmark scripts (bench/compare.py, bench/ab.py): CPU model, bf16 flags and the
kernel OpenBLAS picks in this process."""
import ctypes
import os
import subprocess


def machine_lines():
    """The CPU's model name (lscpu), its bf16 flags (/proc/cpuinfo), OpenBLAS's kernel in this process, and
    warnings for the environment variables that override that kernel's choice (matopt_bench runs in this
    environment, so it loads the same library with the same choice)."""
    model = "unknown"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next(l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name:"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        pass
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    bf16 = ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in ("avx512_bf16", "amx_bf16"))
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        core = lib.openblas_get_corename().decode()
    except (OSError, AttributeError) as e:
        core = f"unknown ({e})"
    lines = [f"CPU: {model}; bf16 flags: {bf16}; OpenBLAS kernel: {core}"]
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if var in os.environ:
            lines.append(f"warning: {var}={os.environ[var]} is set and overrides OpenBLAS's own choice; run the "
                         "benchmarks under `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`")
    return {"model": model, "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags,
            "openblas_corename": core}, lines

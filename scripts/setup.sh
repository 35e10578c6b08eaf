#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what matopt's build, tests, examples and benchmarks need, from Debian's packages.
# Idempotent: runs apt-get only when something is missing. Needs root (or sudo).
#   ./scripts/setup.sh          build, tests (both GEMM engines, sanitizers, fuzzing, Thrust on the CPU), examples
#                               (Fashion-MNIST data, the fortunes text, gnuplot, libtorch), benchmarks, the API
#                               reference (doxygen)
#   ./scripts/setup.sh bench    also PyTorch, for bench/compare.py and scripts/make_golden.py
set -euo pipefail

packages=(cmake make ninja-build g++ libeigen3-dev doctest-dev libbenchmark-dev libopenblas-dev
          zlib1g-dev dataset-fashion-mnist fortunes gnuplot-nox libtorch-dev clang libclang-rt-14-dev libomp-dev lld
          libopenmpi-dev openmpi-bin
          libthrust-dev libdnnl-dev libgloo-dev doxygen python3)
for group in "$@"; do
  case "$group" in
    bench) packages+=(python3-torch) ;;
    *) echo "setup.sh: unknown group '$group' (known: bench)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "matopt setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

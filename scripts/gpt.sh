#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPT experiment (docs/gpt.md): installs dependencies (scripts/setup.sh: libtorch, the fortunes text,
# gnuplot), builds examples/gpt and trains a byte-level GPT on Debian's fortunes with Muon, RMNP, ColNorm,
# OrScale (hidden matrices; embeddings, head and vectors on AdamW), matopt's AdamW and torch::optim::AdamW, from
# the same weights and batches. Prints a progress bar and a table; writes CSVs and PNG plots to gpt_out/ (or
# $MATOPT_GPT_OUT). Extra arguments go to gpt (e.g. --quick, --sweep 64,128,256 --optimizers muon,rmnp).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build=${MATOPT_BUILD_DIR:-build}
out=${MATOPT_GPT_OUT:-gpt_out}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)" --target gpt
"$build/examples/gpt" --out "$out" "$@"

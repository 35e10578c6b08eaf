#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's demo command: installs dependencies (scripts/setup.sh: Eigen, zlib, the Fashion-MNIST data,
# gnuplot), builds the fashion_mnist example and trains a 784-512-512-10 MLP on Fashion-MNIST for 5 epochs
# with Muon, RMNP, ColNorm, OrScale (hidden matrices; head and biases on AdamW) and AdamW alone. Prints a
# progress bar, then test accuracy, train loss and optimizer time per optimizer; writes CSVs and PNG plots
# to fashion_mnist_out/ (or $MATOPT_DEMO_OUT). Extra arguments go to fashion_mnist (e.g. --epochs 1).
# About 10 minutes on 2 idle cores, most of it in Muon's and OrScale's Newton–Schulz steps (docs/fashion_mnist.md).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build=${MATOPT_BUILD_DIR:-build}
out=${MATOPT_DEMO_OUT:-fashion_mnist_out}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)" --target fashion_mnist
"$build/examples/fashion_mnist" --out "$out" "$@"
echo "Plots and CSVs: $out/ (loss.png, accuracy.png, optimizer_time.png, dominance.png, summary.csv)"

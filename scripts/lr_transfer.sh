#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The lr-transfer grid of docs/gpt.md ("Learning rate across width"): examples/gpt --lr-grid over d_model 64, 128
# and 256 (4 layers) for eight configurations, six lrs each (seven for RMNP and ColNorm, whose optimum sits low), a factor of 2 apart around each one's expected optimum:
#   muon@muon_original  Muon, s = max(1, m/n)^1/2 (KellerJordan/Muon; the Muon preset's own rule)
#   muon@moonlight      Muon, s = 0.2 sqrt(max(m, n)) (Moonlight's AdamW RMS matching: lr_rule sqrt_max times 0.2)
#   muon@sqrt_ratio     Muon, s = sqrt(m/n) (dion's default, Scion)
#   rmnp, colnorm       RMNP and ColNorm under their preset rules (max(1, m/n)^1/2, max(1, n/m)^1/2)
#   rmnp@unit, colnorm@unit   the same under s = 1 (dion's RMNP has no shape factor)
#   adamw               matopt's AdamW on every parameter, the baseline
# Every run starts from the same weights and sees the same batches; embeddings, head and vectors of the matrix
# optimizers' runs are on AdamW at --adam-lr 2e-3 at every width.
#
#   scripts/lr_transfer.sh OUT_DIR [extra gpt arguments]
#
# Resumable: each run appends a row to OUT_DIR/lr_transfer.csv as it ends, and a run already there is skipped, so
# the same command continues a killed grid. gpt refuses a folder written under other settings (--steps, --layers,
# ...). Environment: LR_TRANSFER_STEPS (default 300), LR_TRANSFER_WIDTHS (default 64,128,256), LR_TRANSFER_THREADS
# (default 1; libtorch's and matopt's threads), MATOPT_BUILD_DIR (default build; gpt is built there if missing),
# LR_TRANSFER_GRID (full, the default, or narrow: below).
# OpenBLAS settings (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE, ...) are taken from the environment as they are.
# The ranking check at 600 steps on one width: LR_TRANSFER_STEPS=600 LR_TRANSFER_WIDTHS=128 scripts/lr_transfer.sh DIR2
set -euo pipefail
if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: $0 OUT_DIR [extra gpt arguments]" >&2
  exit 2
fi
out=$1
shift
cd "$(dirname "$0")/.."
build=${MATOPT_BUILD_DIR:-build}
if [[ ! -x "$build/examples/gpt" ]]; then
  cmake --build "$build" --target gpt
fi
mkdir -p "$out"
# LR_TRANSFER_GRID=narrow: five lrs per configuration, a factor of 2 apart around the optima found at d_model 64
# and 128 (what ran at d_model 256, for time: 40 runs instead of 52).
if [[ "${LR_TRANSFER_GRID:-full}" == narrow ]]; then
  muon_lrs=0.005,0.01,0.02,0.04,0.08 moon_lrs=0.0025,0.005,0.01,0.02,0.04 norm_lrs=0.00025,0.0005,0.001,0.002,0.004
  col_lrs=0.0005,0.001,0.002,0.004,0.008 adam_lrs=0.0005,0.001,0.002,0.004,0.008
else
  muon_lrs=0.005,0.01,0.02,0.04,0.08,0.16 moon_lrs=0.00125,0.0025,0.005,0.01,0.02,0.04
  norm_lrs=0.00025,0.0005,0.001,0.002,0.004,0.008,0.016 col_lrs=$norm_lrs adam_lrs=0.0005,0.001,0.002,0.004,0.008,0.016
fi
"$build/examples/gpt" --steps "${LR_TRANSFER_STEPS:-300}" --sweep "${LR_TRANSFER_WIDTHS:-64,128,256}" \
  --threads "${LR_TRANSFER_THREADS:-1}" \
  --lr-grid muon@muon_original=$muon_lrs \
  --option muon@muon_original:lr_rule=muon_original \
  --lr-grid muon@moonlight=$moon_lrs \
  --option muon@moonlight:lr_rule=sqrt_max --option muon@moonlight:extra_scale_factor=0.2 \
  --lr-grid muon@sqrt_ratio=$muon_lrs \
  --option muon@sqrt_ratio:lr_rule=sqrt_ratio \
  --lr-grid rmnp=$norm_lrs \
  --lr-grid colnorm=$col_lrs \
  --lr-grid adamw=$adam_lrs \
  --lr-grid rmnp@unit=$norm_lrs \
  --option rmnp@unit:lr_rule=unit \
  --lr-grid colnorm@unit=$norm_lrs \
  --option colnorm@unit:lr_rule=unit \
  --out "$out" "$@" 2>&1 | tee -a "$out/lr_transfer.log"

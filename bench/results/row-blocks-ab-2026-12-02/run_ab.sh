#!/bin/bash
# SPDX-License-Identifier: MIT
# A/B of BM_StepHeads and BM_StepBatch: fe58db3 (before parallel row blocks / serial_products; b8cf46f's bench_step.cpp),
# 382360e (before the batched step's small-product parallel part), and HEAD; alternately, twice each.
set -e
out=/tmp/benchres; mkdir -p $out
gpid=$(pgrep -f 'examples/gpt' | head -1); [ -n "$gpid" ] && kill -STOP $gpid
trap '[ -n "$gpid" ] && kill -CONT $gpid' EXIT
export -n OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
echo "openblas core: $(/tmp/corename)"; lscpu | grep -E 'Model name|^CPU family|^Model:|^Flags' | cut -c1-2000 > $out/lscpu.txt
for rep in 1 2; do
  for b in fe58db3 382360e head; do
    filt='BM_StepHeads'
    [ $b = 382360e ] && filt='BM_StepBatch/muon'
    [ $b = head ] && filt='BM_StepHeads|BM_StepBatch/muon'
    /tmp/benchbin/bench_$b --benchmark_filter="$filt" --benchmark_min_time=0.5 --benchmark_format=json > $out/${b}_$rep.json 2>/dev/null
    echo "done $b $rep"
  done
done

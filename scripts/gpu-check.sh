#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The CUDA backend's check on a machine with an NVIDIA GPU (issue 4), in one command: configure a CUDA build,
# build the GPU suites and the GPU benchmark with every core, run the benchmark (JSON output), the two suites,
# and print a short table last. Sized for an H200 with 16 cores: under 8 minutes.
#
#   scripts/gpu-check.sh                                 # build directory build-gpu (MATOPT_GPU_BUILD_DIR overrides)
#   OUT=/some/dir scripts/gpu-check.sh                   # results in $OUT, else in the build directory
#   scripts/gpu-check.sh -DCMAKE_CUDA_ARCHITECTURES=80   # extra arguments go to the configure step
#   scripts/gpu-check.sh --dry-run                       # no GPU needed: build everything the run needs (nvcc),
#                                                        # then list what would run, in order
#   scripts/gpu-check.sh --pack FILE.tar.xz [cmake args] # no GPU needed: build, then pack the three executables,
#                                                        # the libraries they need beyond glibc, libstdc++ and
#                                                        # CUDA's, and the golden data
#   scripts/gpu-check.sh --run-packed FILE.tar.xz        # on the GPU machine: run a pack (no build, no packages:
#                                                        # it needs the CUDA driver, cuBLAS and the CUDA runtime)
#
# A GPU machine without Debian's packages (a cluster's GPU node, a container with only CUDA): --pack on a build
# machine with the same CUDA major version, then --run-packed there. `--pack FILE -DMATOPT_ONEDNN=OFF
# -DMATOPT_GEMM_ENGINE=eigen` keeps the pack small (oneDNN and OpenBLAS then stay out of the host references).
#
# Order of the run: the benchmark first, so that nothing else uses the GPU while it times; then the suites run
# their own executables (doctest), the two no-allocation cases alone (they read the device's free memory), then
# the rest of the CUDA suite and the Thrust suite (Thrust's CUDA system) side by side. Building here, the Thrust
# suite's one slow file compiles in the background meanwhile. Files in the results directory: cuda-noalloc.log,
# cuda.log and thrust.log (every case with its duration; the NS cases print their measured errors),
# bench_gpu.json (Google Benchmark, medians of 5 repetitions), bench_gpu.log, gpu_summary.txt, and the build logs.
# Exit status: non-zero if a build, a suite or the benchmark failed; the table is printed whenever a suite ran.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=run
pack=""
case "${1:-}" in
  --dry-run) mode=dry-run; shift ;;
  --pack | --run-packed)
    mode=${1#--}
    pack=${2:?"scripts/gpu-check.sh $1 needs a FILE.tar.xz"}
    shift 2 ;;
esac
jobs=$(nproc)
t0=$(date +%s)

# run_checks CUDA_TESTS THRUST_TESTS BENCH OUT [THRUST_BUILD_PID]: the benchmark, then the suites, then the table.
run_checks() {
  local cuda=$1 thrust=$2 bench=$3 out=$4 thrust_build=${5:-}
  local bench_rc=0 cuda_rc=0 thrust_rc=0 t_bench t_test
  if [ -x "$bench" ]; then
    MATOPT_GPU_SUMMARY="$out/gpu_summary.txt" "$bench" --benchmark_repetitions=5 \
      --benchmark_report_aggregates_only=true --benchmark_min_time=0.2 --benchmark_out="$out/bench_gpu.json" \
      --benchmark_out_format=json > "$out/bench_gpu.log" 2>&1 || bench_rc=$?
  else
    bench_rc=1
    echo "GPU benchmark not built: the suites run without it" | tee "$out/bench_gpu.log"
  fi
  t_bench=$(date +%s)
  local noalloc='*allocate* no device memory*'  # "step allocates ...", "steps allocate ..."
  "$cuda" --test-case="$noalloc" --duration=true > "$out/cuda-noalloc.log" 2>&1 || cuda_rc=$?
  "$cuda" --test-case-exclude="$noalloc" --duration=true > "$out/cuda.log" 2>&1 &
  local cuda_pid=$!
  if [ -n "$thrust_build" ]; then wait "$thrust_build" || thrust_rc=$?; fi
  if [ "$thrust_rc" -eq 0 ]; then
    "$thrust" --duration=true > "$out/thrust.log" 2>&1 || thrust_rc=$?
  else
    echo "Thrust suite: build failed (see $out/build-thrust-suite.log)" | tee "$out/thrust.log"
  fi
  wait "$cuda_pid" || cuda_rc=$?
  t_test=$(date +%s)
  echo
  echo "========================= matopt GPU check ========================="
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/  GPU: /' || true
  if [ -s "$out/gpu_summary.txt" ]; then
    cat "$out/gpu_summary.txt"
  else
    echo "  benchmark: no summary (exit $bench_rc; see $out/bench_gpu.log)"
  fi
  grep -h "worst relative error" "$out/cuda.log" | sed -E 's/^.*MESSAGE: /  /' | sort -u || true
  for log in cuda-noalloc cuda thrust; do
    printf '  %-13s' "$log:"
    grep -hE "^\[doctest\] test cases:" "$out/$log.log" | sed 's/\[doctest\] //' || echo " did not finish"
  done
  echo "  exit: CUDA suite $cuda_rc, Thrust suite $thrust_rc, benchmark $bench_rc; time: benchmark" \
    "$((t_bench - t0)) s (with any build), suites $((t_test - t_bench)) s"
  echo "  files: $out/{cuda-noalloc.log,cuda.log,thrust.log,bench_gpu.json,bench_gpu.log,gpu_summary.txt}"
  [ "$cuda_rc" -eq 0 ] && [ "$thrust_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
}

if [ "$mode" = "run-packed" ]; then
  dir=$(mktemp -d)
  tar -xJf "$pack" -C "$dir"
  out=${OUT:-$dir/results}
  mkdir -p "$out"
  # cuBLAS and the CUDA runtime of the GPU machine's toolkit, and the pack's own libraries.
  cuda_lib=""
  for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
    if [ -e "$d/libcublas.so.13" ] || [ -e "$d/libcublas.so.12" ]; then cuda_lib=$d; break; fi
  done
  export LD_LIBRARY_PATH="$dir/lib${cuda_lib:+:$cuda_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export MATOPT_GOLDEN_DIR="$dir/golden"
  echo "pack $(cat "$dir/commit"), unpacked in $dir; cuBLAS from ${cuda_lib:-the default library path}"
  if ldd "$dir/bin/matopt_gpu_cuda_tests" | grep "not found"; then
    echo "gpu-check: libraries missing (set LD_LIBRARY_PATH to CUDA's lib64)" >&2
    exit 1
  fi
  run_checks "$dir/bin/matopt_gpu_cuda_tests" "$dir/bin/matopt_gpu_thrust_tests" "$dir/bin/matopt_bench_gpu" "$out"
  exit
fi

./scripts/setup.sh  # cmake, Eigen, doctest, Google Benchmark, ... (apt-get only for what is missing)
build=${MATOPT_GPU_BUILD_DIR:-build-gpu}
# Ninja for a new build tree, as scripts/test.sh.
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}; fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMATOPT_WERROR=ON -DMATOPT_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMATOPT_BUILD_GPU=ON -DMATOPT_ENABLE_MPI=OFF -DMATOPT_BUILD_EXAMPLES=OFF "$@"
out=${OUT:-$build}
mkdir -p "$out"
cuda_tests=$build/tests/gpu/matopt_gpu_cuda_tests
thrust_tests=$build/tests/gpu/matopt_gpu_thrust_tests
bench=$build/bench/matopt_bench_gpu

if [ "$mode" != "run" ]; then
  # Everything, in the foreground, in one build (the targets' files compile side by side). Nothing here touches a GPU.
  rc=0
  cmake --build "$build" -j "$jobs" --target matopt_gpu_cuda_tests matopt_gpu_thrust_tests matopt_bench_gpu \
    > "$out/build-gpu.log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "build failed (exit $rc; see $out/build-gpu.log)"
    tail -n 20 "$out/build-gpu.log"
    exit "$rc"
  fi
  if [ "$mode" = "pack" ]; then
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/bin" "$stage/lib" "$stage/golden"
    cp "$cuda_tests" "$thrust_tests" "$bench" "$stage/bin/"
    strip "$stage"/bin/*
    # Shared libraries beyond glibc, libstdc++, libgcc and CUDA's own (the GPU machine has those).
    ldd "$cuda_tests" "$thrust_tests" "$bench" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
      grep -vE '^(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|libcu[A-Za-z]*|libnv[A-Za-z_]*)\.so' |
      while read -r _ path; do cp -L "$path" "$stage/lib/"; done
    cp tests/golden/*.txt "$stage/golden/"
    git rev-parse --short HEAD > "$stage/commit" 2>/dev/null || echo unknown > "$stage/commit"
    tar -cJf "$pack" -C "$stage" .
    echo "packed $(du -h "$pack" | cut -f1) in $pack (built in $(( $(date +%s) - t0 )) s): bin/ $(ls "$stage/bin" | tr '\n' ' ')"
    echo "lib/ $(ls "$stage/lib" | tr '\n' ' '); on the GPU machine: scripts/gpu-check.sh --run-packed $pack"
    exit 0
  fi
  echo
  echo "========================= matopt GPU check: plan (--dry-run) ========================="
  echo "  built in $(( $(date +%s) - t0 )) s; on the GPU machine the script runs, in this order:"
  echo "  1. $bench (5 repetitions, min time 0.2 s; nothing else on the GPU meanwhile)"
  echo "  2. $cuda_tests, the no-allocation cases alone:" \
    "$("$cuda_tests" --list-test-cases --test-case='*allocate* no device memory*' | grep -c '^cuda')" "cases"
  echo "  3. the rest of it ($("$cuda_tests" --list-test-cases | grep -c '^cuda') cases in all), beside" \
    "$thrust_tests ($("$thrust_tests" --list-test-cases | grep -c '^thrust') cases)"
  echo "  then the table of the benchmark's summary, the NS cases' worst errors and the counts"
  exit 0
fi

cmake --build "$build" -j "$jobs" --target matopt_gpu_thrust_tests > "$out/build-thrust-suite.log" 2>&1 &
thrust_build=$!
cmake --build "$build" -j "$jobs" --target matopt_gpu_cuda_tests
# The benchmark needs Google Benchmark (libbenchmark-dev); without it (or if it fails to build) the suites still run.
cmake --build "$build" -j "$jobs" --target matopt_bench_gpu > "$out/build-bench.log" 2>&1 || bench=""
run_checks "$cuda_tests" "$thrust_tests" "$bench" "$out" "$thrust_build"

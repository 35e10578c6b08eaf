#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The CUDA backend's check on a machine with an NVIDIA GPU (issue 4), in one command: configure a CUDA build,
# build only the GPU tests and the GPU benchmark with every core, run `ctest -L gpu`, run the benchmark with
# JSON output, and print a short table last. Sized for an H200 with 16 cores: under 8 minutes.
#
#   scripts/gpu-check.sh                                 # build directory build-gpu (MATOPT_GPU_BUILD_DIR overrides)
#   OUT=/some/dir scripts/gpu-check.sh                   # results in $OUT, else in the build directory
#   scripts/gpu-check.sh -DCMAKE_CUDA_ARCHITECTURES=80   # extra arguments go to the configure step
#   scripts/gpu-check.sh --dry-run                       # no GPU needed: build everything the run needs (nvcc),
#                                                        # then list what would run, in order, with its budget
#
# Run --dry-run on the build machine first: the device's minutes then go to running. (A build tree is not
# relocatable; on a GPU machine with another checkout path the script configures and builds there again.)
#
# Order: the Thrust suite's one file is the slowest to compile, so it builds in the background while the CUDA
# suite and the benchmark build and run (disjoint targets of one build tree); the benchmark runs before any test
# so that nothing else uses the GPU while it times. Files in the results directory: ctest-gpu.log (every test's
# output), bench_gpu.json (Google Benchmark, medians of 5 repetitions), bench_gpu.log, gpu_summary.txt,
# build-thrust-suite.log, build-bench.log. Exit status: non-zero if a build, a test or the benchmark failed; the
# table is printed whenever the CUDA suite built.
set -euo pipefail
cd "$(dirname "$0")/.."
dry_run=0
if [ "${1:-}" = "--dry-run" ]; then
  dry_run=1
  shift
fi
./scripts/setup.sh  # cmake, Eigen, doctest, Google Benchmark, ... (apt-get only for what is missing)
build=${MATOPT_GPU_BUILD_DIR:-build-gpu}
jobs=$(nproc)
# Ninja for a new build tree, as scripts/test.sh.
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}; fi
t0=$(date +%s)

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMATOPT_WERROR=ON -DMATOPT_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMATOPT_BUILD_GPU=ON -DMATOPT_ENABLE_MPI=OFF -DMATOPT_BUILD_EXAMPLES=OFF "$@"
out=${OUT:-$build}
mkdir -p "$out"

if [ "$dry_run" -eq 1 ]; then
  # Everything, in the foreground, then the plan. Nothing here touches a GPU.
  rc=0
  for target in matopt_gpu_cuda_tests matopt_gpu_thrust_tests matopt_bench_gpu; do
    cmake --build "$build" -j "$jobs" --target "$target" > "$out/build-$target.log" 2>&1 || {
      rc=$?
      echo "build of $target failed (exit $rc; see $out/build-$target.log)"
      tail -n 20 "$out/build-$target.log"
    }
  done
  count() { ctest --test-dir "$build" -N "$@" 2>/dev/null | sed -nE 's/^Total Tests: ([0-9]+)/\1/p'; }
  echo
  echo "========================= matopt GPU check: plan (--dry-run) ========================="
  echo "  built in $(( $(date +%s) - t0 )) s, exit $rc; on the GPU machine the script runs, in this order:"
  echo "  1. $build/bench/matopt_bench_gpu (5 repetitions, min time 0.2 s; nothing else on the GPU meanwhile)"
  echo "  2. ctest -L gpu -R '^gpu-cuda:.*allocates? no device memory' alone: $(count -L gpu -R '^gpu-cuda:.*allocates? no device memory') tests"
  echo "  3. ctest -L gpu -R '^gpu-cuda:' (the rest, -j 8): $(count -L gpu -R '^gpu-cuda:' -E 'allocates? no device memory') tests"
  echo "  4. ctest -L gpu -R '^gpu-thrust:' (-j 8): $(count -L gpu -R '^gpu-thrust:') tests"
  echo "  budget: each test's timeout 600 s; sized for an H200 with 16 cores, under 8 minutes in all (build included)"
  echo "  then the table of the benchmark's summary, the NS tests' worst errors and the counts"
  exit "$rc"
fi

cmake --build "$build" -j "$jobs" --target matopt_gpu_thrust_tests > "$out/build-thrust-suite.log" 2>&1 &
thrust_build=$!
cmake --build "$build" -j "$jobs" --target matopt_gpu_cuda_tests
# The benchmark needs Google Benchmark (libbenchmark-dev); without it (or if it fails to build) the tests still run.
bench_rc=0
cmake --build "$build" -j "$jobs" --target matopt_bench_gpu > "$out/build-bench.log" 2>&1 || bench_rc=$?
t_build=$(date +%s)

if [ "$bench_rc" -eq 0 ]; then
  MATOPT_GPU_SUMMARY="$out/gpu_summary.txt" "$build/bench/matopt_bench_gpu" \
    --benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_min_time=0.2 \
    --benchmark_out="$out/bench_gpu.json" --benchmark_out_format=json > "$out/bench_gpu.log" 2>&1 || bench_rc=$?
else
  echo "GPU benchmark not built (exit $bench_rc; see $out/build-bench.log): running the tests without it" |
    tee "$out/bench_gpu.log"
fi
t_bench=$(date +%s)

# The no-allocation test reads the device's free memory, so it runs alone; the rest in parallel. -V keeps every
# test's output (the NS tests print their measured errors).
test_rc=0
run_ctest() { ctest --test-dir "$build" -L gpu -V --timeout 600 "$@" >> "$out/ctest-gpu.log" 2>&1 || test_rc=$?; }
: > "$out/ctest-gpu.log"
run_ctest -R "^gpu-cuda:.*allocates? no device memory"          # "step allocates ...", "steps allocate ..."
run_ctest -R "^gpu-cuda:" -E "allocates? no device memory" -j 8
thrust_rc=0
wait "$thrust_build" || thrust_rc=$?
if [ "$thrust_rc" -eq 0 ]; then
  run_ctest -R "^gpu-thrust:" -j 8
else
  echo "Thrust suite: build failed (see $out/build-thrust-suite.log)" | tee -a "$out/ctest-gpu.log"
  tail -n 30 "$out/build-thrust-suite.log"
fi
t_test=$(date +%s)
grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|\\*\\*\\*Failed|Timeout" "$out/ctest-gpu.log" | tail -n 80 || true

passed=0
failed=0
while IFS= read -r line; do  # "100% tests passed, 0 tests failed out of 37", once per ctest run
  total=${line##* out of }
  f=$(echo "$line" | sed -E 's/.* ([0-9]+) tests failed out of.*/\1/')
  passed=$((passed + total - f))
  failed=$((failed + f))
done < <(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$out/ctest-gpu.log" || true)

echo
echo "========================= matopt GPU check ========================="
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/  GPU: /' || true
if [ -s "$out/gpu_summary.txt" ]; then
  cat "$out/gpu_summary.txt"
else
  echo "  benchmark: no summary (exit $bench_rc; see $out/bench_gpu.log)"
fi
grep -h "worst relative error" "$out/ctest-gpu.log" | sed -E 's/^.*MESSAGE: /  /' | sort -u || true
echo "  tests (ctest -L gpu): $passed passed, $failed failed; ctest exit $test_rc," \
  "Thrust suite build exit $thrust_rc, benchmark exit $bench_rc"
echo "  time: build $((t_build - t0)) s, benchmark $((t_bench - t_build)) s, tests $((t_test - t_bench)) s," \
  "total $((t_test - t0)) s"
echo "  files: $out/{ctest-gpu.log,bench_gpu.json,bench_gpu.log,gpu_summary.txt,build-thrust-suite.log}"
[ "$test_rc" -eq 0 ] && [ "$thrust_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's test command: installs dependencies, then builds and runs every matopt test in two builds, each
# with the compiler that compiles it fastest (docs/reliability.md#ci: Clang 14 at -O0 under ASan + UBSan compiles
# these Eigen-heavy test files about 3x faster than GCC 12 at -O1 without them; GCC is what most users build the
# library with):
#   1. build-suites/  the doctest suites (MATOPT_TEST_SET=suites): Clang, -O0, AddressSanitizer and
#                     UndefinedBehaviorSanitizer, C++20, Eigen's own GEMM engine (matopt's tiled products under the
#                     sanitizers): the math against golden data and closed forms, policies, checkpoints, facade,
#                     hybrid, Thrust on the CPU, MPI, libtorch, c10d (2 processes), the examples' own code; the
#                     checkpoint loader's libFuzzer target, replaying its committed corpus.
#   2. build/         the library as users build it (MATOPT_TEST_SET=library): the default compiler (GCC), C++17,
#                     Release, -Werror: every public header on its own, matopt::runtime, the examples and their
#                     runs, the allocation tests, the engines' Newton–Schulz against a plain reference and
#                     thread-count determinism with -march=native (the default BLAS engine and Eigen's), packaging,
#                     the benchmarks, and every CUDA kernel when nvcc is found.
# The Thrust backend, oneDNN and c10d are required (MATOPT_THRUST_DEVICE_SYSTEM=OMP, MATOPT_ONEDNN=ON,
# MATOPT_C10D=ON: configure fails if Thrust's, oneDNN's or gloo's headers or libtorch are missing, so the device
# suite, the bfloat16 Newton–Schulz tests and the data-parallel libtorch tests cannot drop out silently; setup.sh
# installs libthrust-dev, libdnnl-dev, libtorch-dev and libgloo-dev). Extra arguments go to both
# configure steps after it (e.g. -DMATOPT_THRUST_DEVICE_SYSTEM=CPP). Build directories: MATOPT_BUILD_DIR (default
# build) and MATOPT_SUITES_BUILD_DIR (default build-suites).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build=${MATOPT_BUILD_DIR:-build}
suites=${MATOPT_SUITES_BUILD_DIR:-build-suites}
jobs=$(nproc)
# Ninja for a new build tree (it schedules the whole tree's files at once; with Make, a target's files wait for the
# targets it links: measured, docs/reliability.md#ci). An existing tree keeps its generator.
generator() { if [ ! -f "$1/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then echo -G Ninja; fi; }
# Tests labelled gpu need a CUDA device: they are built whenever nvcc is found, run only when one is present.
gpu_filter=(-LE gpu)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu_filter=(); fi

# The suites link with LLD (the 480 MB sanitized matopt_tests: GNU ld 27.6 s, LLD 4.6 s; all links 78 s → 14 s).
lld=()
if command -v ld.lld >/dev/null 2>&1; then lld=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld); fi

echo "== matopt tests 1/2: the suites (Clang, -O0, ASan + UBSan) in $suites"
CXX=clang++ cmake -S . -B "$suites" $(generator "$suites") "${lld[@]}" -DCMAKE_BUILD_TYPE=Release -DMATOPT_WERROR=ON \
  -DMATOPT_TEST_SET=suites -DCMAKE_CXX_FLAGS_RELEASE=-O0 -DMATOPT_TEST_OPTIMIZATION=-O0 -DCMAKE_CXX_STANDARD=20 \
  -DMATOPT_GEMM_ENGINE=eigen \
  -DMATOPT_SANITIZE=address,undefined -DMATOPT_BUILD_FUZZERS=ON -DMATOPT_ENABLE_CUDA=OFF -DMATOPT_BUILD_RUNTIME=OFF \
  -DMATOPT_BUILD_EXAMPLES=OFF -DMATOPT_BUILD_BENCHMARKS=OFF -DMATOPT_THRUST_DEVICE_SYSTEM=OMP -DMATOPT_ONEDNN=ON -DMATOPT_C10D=ON "$@"
cmake --build "$suites" -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$suites" -j "$jobs" --output-on-failure

echo "== matopt tests 2/2: the library as users build it (${CXX:-default compiler}, Release, -Werror) in $build"
cmake -S . -B "$build" $(generator "$build") -DCMAKE_BUILD_TYPE=Release -DMATOPT_WERROR=ON \
  -DMATOPT_TEST_SET=library -DMATOPT_THRUST_DEVICE_SYSTEM=OMP -DMATOPT_ONEDNN=ON -DMATOPT_C10D=ON "$@"
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" -j "$jobs" --output-on-failure "${gpu_filter[@]}"
[ ${#gpu_filter[@]} -eq 0 ] || echo "matopt: no CUDA device here; tests labelled gpu were built but are not run"

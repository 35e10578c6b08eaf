#!/usr/bin/env bash
# The README's test command: installs dependencies, builds matopt's tests (C++17, warnings as errors) and
# runs them all through CTest. Extra arguments go to the CMake configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build=${MATOPT_BUILD_DIR:-build}
# Ninja for a new build tree (it schedules the whole tree's files at once; with Make, a target's files wait for the
# targets it links: measured, docs/reliability.md#ci). An existing tree keeps its generator.
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}; fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMATOPT_WERROR=ON "$@"
cmake --build "$build" -j "$(nproc)"
# Tests labelled gpu need a CUDA device: they are built whenever nvcc is found, run only when one is present.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  ctest --test-dir "$build" -j "$(nproc)" --output-on-failure
else
  echo "matopt: no CUDA device here; tests labelled gpu were built but are not run"
  ctest --test-dir "$build" -j "$(nproc)" --output-on-failure -LE gpu
fi

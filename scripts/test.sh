#!/usr/bin/env bash
# The README's test command: installs dependencies, builds matopt's tests (C++17, warnings as errors) and
# runs them all through CTest. Extra arguments go to the CMake configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build=${MATOPT_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMATOPT_WERROR=ON "$@"
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure

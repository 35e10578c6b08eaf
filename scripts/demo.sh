#!/usr/bin/env bash
# The README's demo command: installs dependencies, builds the examples and runs the quick-start demo,
# which steps every preset on the same problem and prints loss, time per step and effective lr.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build=${MATOPT_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)" --target 01_quickstart
"$build/examples/01_quickstart"

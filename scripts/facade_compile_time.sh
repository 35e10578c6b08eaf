#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Compile time of a run-time-configured translation unit (bench/compile_time/facade_presets.cpp: every preset
# built by name through the facade and stepped, float and double, plus a HybridOptimizer), header-only and
# against the compiled matopt::runtime target (issue 18). Prints CPU seconds (user + system) of each compile,
# then links the compiled variant against libmatopt_runtime.a and runs it.
#   ./scripts/facade_compile_time.sh [BUILD_DIR]     BUILD_DIR (default build) must have built matopt_runtime
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cxx=${CXX:-g++}
lib=$(find "$build" -maxdepth 2 -name libmatopt_runtime.a | head -n 1)
if [ -z "$lib" ]; then
  echo "facade_compile_time: no libmatopt_runtime.a under $build (cmake --build $build --target matopt_runtime)" >&2
  exit 2
fi
# matopt::matopt's exported definitions (CMakeLists.txt: Eigen's alignment, fixed for every file of a program), then
# the engine and OpenMP as the build configured them (its CMakeCache.txt).
flags=(-std=c++17 -O2 -Iinclude -isystem /usr/include/eigen3 -DEIGEN_MAX_ALIGN_BYTES=64
       -DEIGEN_MAX_STATIC_ALIGN_BYTES=64)
libs=()
if grep -q '^MATOPT_GEMM_ENGINE:STRING=\(auto\|blas\)' "$build/CMakeCache.txt" &&
   grep -q '^MATOPT_CBLAS_INCLUDE_DIR:PATH=/' "$build/CMakeCache.txt"; then
  cblas=$(sed -n 's/^MATOPT_CBLAS_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt")
  flags+=(-DMATOPT_USE_BLAS -isystem "$cblas")
  libs+=(-lopenblas)
fi
# oneDNN (ns_dtype = bfloat16) as the build found it: the runtime's files were compiled with MATOPT_HAS_ONEDNN, and
# every file of one program must agree (core/detail/config_check.hpp).
onednn=$(sed -n 's/^MATOPT_ONEDNN_LIBRARY:FILEPATH=//p' "$build/CMakeCache.txt")
if ! grep -q '^MATOPT_ONEDNN:STRING=OFF' "$build/CMakeCache.txt" && [[ $onednn == /* ]] &&
   grep -q '^MATOPT_ONEDNN_INCLUDE_DIR:PATH=/' "$build/CMakeCache.txt"; then
  flags+=(-DMATOPT_HAS_ONEDNN)
  libs+=("$onednn")
fi
flags+=(-fopenmp)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cpu() {  # cpu LABEL COMMAND...: user + system seconds of one command
  /usr/bin/time -f "%U %S" -o "$tmp/time" "${@:2}"
  awk -v label="$1" '{printf "%-34s %6.2f s CPU\n", label, $1 + $2}' "$tmp/time"
}
echo "compiler: $($cxx --version | head -n 1); flags: ${flags[*]}"
cpu "header-only" "$cxx" "${flags[@]}" -c bench/compile_time/facade_presets.cpp -o "$tmp/header_only.o"
cpu "with matopt::runtime (extern)" "$cxx" "${flags[@]}" -DMATOPT_RUNTIME_COMPILED \
  -c bench/compile_time/facade_presets.cpp -o "$tmp/compiled.o"
"$cxx" -fopenmp "$tmp/compiled.o" "$lib" "${libs[@]}" -o "$tmp/facade_presets"
"$tmp/facade_presets"

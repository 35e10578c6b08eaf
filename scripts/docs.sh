#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds matopt's API reference: Doxygen over include/matopt (Doxyfile at the repository root) into build-docs/html.
# Fails on any Doxygen warning: every public name outside namespace detail must be documented (CI runs this).
# Needs doxygen (Debian: apt-get install doxygen; written against 1.9.4).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -f "$here/Doxyfile" ]; then root=$here; else root=$(dirname "$here"); fi  # scripts/docs.sh -> the repo root
cd "$root"
[ -f Doxyfile ] || { echo "docs.sh: no Doxyfile in $root" >&2; exit 1; }
command -v doxygen >/dev/null || { echo "docs.sh: doxygen not found (Debian: apt-get install doxygen)" >&2; exit 1; }

out=build-docs
rm -rf "$out/html" "$out/warnings.txt"
mkdir -p "$out"
start=$(date +%s%N)
status=0
doxygen Doxyfile || status=$?
ms=$((($(date +%s%N) - start) / 1000000))

if [ -s "$out/warnings.txt" ]; then
  cat "$out/warnings.txt" >&2
  echo "docs.sh: $(grep -c 'warning:\|error:' "$out/warnings.txt") Doxygen warning(s) (listed above, and in $root/$out/warnings.txt)" >&2
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "docs.sh: doxygen failed (exit status $status)" >&2
  exit "$status"
fi
printf 'docs.sh: no warnings (doxygen %s, %d.%03d s); HTML at %s/%s/html/index.html\n' "$(doxygen --version)" \
  $((ms / 1000)) $((ms % 1000)) "$root" "$out"

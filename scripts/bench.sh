#!/usr/bin/env bash
# Runs every benchmark program in BUILD/bin (default build) and writes JSON results to BUILD/bench/.
set -euo pipefail
build=${1:-build}
out="$build/bench"
mkdir -p "$out"
for exe in "$build"/bin/*_bench; do
  [ -x "$exe" ] || continue
  name=$(basename "$exe")
  echo "== $name"
  "$exe" --benchmark_out="$out/$name.json" --benchmark_out_format=json
done
for script in bench/*_peer.sh; do
  [ -x "$script" ] || continue
  echo "== $script"
  "$script" "$build"
done

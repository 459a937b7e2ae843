#!/usr/bin/env bash
# Instructions per DispatchPlanner::plan() call for greedy, stable (prefix scope), sequence (the stable mode
# under sequence scope, the preset before prefix scope) and causal dispatch, and the ratios stable/greedy and
# causal/greedy, over the router_planner_bench grid at T >= 4096 (E in {8, 64, 256}, k in {1, 2, 8}).
# Instruction counts do not depend on what else runs on the machine, unlike wall time
# (docs/results.md section 1: a 15-50 us plan varies up to 2x between runs on a shared VM).
#
# Usage: bench/planner_instructions.sh [BUILD_DIR]      (default: build-callgrind)
#   TOKENS="4096 65536"  batch sizes to count (any of 1 64 4096 65536)
#   JOBS=1               parallel jobs for the build
#
# Needs valgrind (callgrind). Valgrind cannot decode AVX-512, so the script configures BUILD_DIR itself with
# MOE_NATIVE=OFF and -march=x86-64-v3 (AVX2) and builds only router_planner_bench there: the counts are those
# of that build, not of the -march=native one. One callgrind run: --benchmark_min_time=0 makes every case call
# plan() exactly once (a plan is deterministic, so one call is exact), callgrind collects only inside plan()
# and writes one profile per call; the profiles come in the order of --benchmark_list_tests.
#
# Columns: instructions (Ir) per plan() per mode, and the ratios; then the same counts without glibc's memset
# ("-ms"). Caveat: valgrind counts each iteration of the `rep stosb` in glibc's memset as an instruction, so the
# output's initialisation (the same bytes in every mode, 11-20 % of greedy's count at T = 4096, k <= 2) weighs
# far more than on the CPU, and whether the compiler fills an array with memset or with a vector loop (an
# inlining decision) moves the total by thousands of "instructions" without changing the work.
set -euo pipefail
build=${1:-build-callgrind}
tokens=${TOKENS:-4096 65536}
command -v valgrind >/dev/null || { echo "planner_instructions: valgrind not found" >&2; exit 1; }

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMOE_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3 \
    -DMOE_ENABLE_CUDA=OFF -DMOE_ENABLE_MPI=OFF -DMOE_ENABLE_PYTHON=OFF -DMOE_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$build" -j"${JOBS:-1}" --target router_planner_bench >/dev/null

filter="^BM_Plan/(greedy|stable|causal|sequence)/T:(${tokens// /|})/"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/bin/router_planner_bench" --benchmark_list_tests --benchmark_filter="$filter" >"$work/cases"
# (--dump-after needs the leading '*': valgrind 3.19 does not fire on the 'moe::...' spelling.)
valgrind --tool=callgrind --compress-strings=no --callgrind-out-file="$work/cg" --toggle-collect='moe::DispatchPlanner::plan(*' \
  --dump-after='*DispatchPlanner::plan(*' \
  "$build/bin/router_planner_bench" --benchmark_filter="$filter" --benchmark_min_time=0 \
  >/dev/null 2>"$work/log" || { cat "$work/log" >&2; exit 1; }

# Profile i (cg.i, i = 1..) is the i-th plan() call, i.e. the i-th case.
n=$(wc -l <"$work/cases")
i=0
while read -r name; do
  i=$((i + 1))
  f="$work/cg.$i"
  [ -f "$f" ] || { echo "planner_instructions: missing profile $i of $n ($name)" >&2; exit 1; }
  total=$(awk '/^(totals|summary):/ {print $2; exit}' "$f")
  # glibc's memset as valgrind counts it (each byte of a `rep stosb` is an instruction): reported apart.
  # Self cost of the functions named __memset*: cost lines of their fn= blocks, except the inclusive cost
  # line that follows each calls= line.
  mset=$(awk '/^fn=/ {inm = ($0 ~ /__memset/); next} /^calls=/ {skip = 1; next}
              /^[0-9+-]/ {if (skip) {skip = 0; next} if (inm) s += $2} END {print s + 0}' "$f")
  echo "$name $total $mset"
done <"$work/cases" >"$work/counts"
[ ! -f "$work/cg.$((n + 1))" ] || { echo "planner_instructions: more plan() calls than cases" >&2; exit 1; }

awk '
  {
    split($1, a, "/"); key = a[3] " " a[4] " " a[5]; ir[a[2], key] = $2; ms[a[2], key] = $3
    if (!(key in seen)) { seen[key] = 1; keys[++nk] = key }
  }
  END {
    printf "%-21s %11s %11s %11s %11s %13s %13s   %11s %11s %11s\n", "shape", "greedy Ir", "stable Ir",
      "sequence Ir", "causal Ir", "stable/greedy", "causal/greedy", "greedy -ms", "stable -ms", "causal -ms"
    for (i = 1; i <= nk; ++i) {
      k = keys[i]; g = ir["greedy", k]
      printf "%-21s %11d %11d %11d %11d %13.3f %13.3f   %11d %11d %11d\n", k, g, ir["stable", k], ir["sequence", k],
        ir["causal", k],
        ir["stable", k] / g, ir["causal", k] / g, g - ms["greedy", k], ir["stable", k] - ms["stable", k],
        ir["causal", k] - ms["causal", k]
    }
  }' "$work/counts"

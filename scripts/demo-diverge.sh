#!/usr/bin/env bash
# The divergence lab in about a minute: one probe prompt served 10 times among random stranger traffic on the
# small MoE decoder (continuous batching, chunked prefill; */varied rows also vary the engine's chunk size and
# token budget over the trials), per dispatch mode and kernel kind; prints the table
# and writes JSON + SVG under <build>/demo/diverge/. The full experiment (30 trials, capacity-factor sweep) is
# `moe-sim diverge` with no flags; docs/divergence.md explains the columns. Usage: scripts/demo-diverge.sh [build]
set -euo pipefail
BUILD=${1:-build}
OUT="$BUILD/demo/diverge"
if [ -x "$BUILD/bin/moe-sim" ] && "$BUILD/bin/moe-sim" diverge --help >/dev/null 2>&1; then
  CMD=("$BUILD/bin/moe-sim" diverge)
elif [ -x "$BUILD/bin/moe-diverge" ]; then
  CMD=("$BUILD/bin/moe-diverge")
else
  echo "demo-diverge: neither $BUILD/bin/moe-sim (with diverge) nor $BUILD/bin/moe-diverge found; build one first" >&2
  exit 1
fi
THREADS=$(nproc 2>/dev/null || echo 2)
mkdir -p "$OUT"
echo "== divergence lab: same prompt, different answers (10 trials per row; the full run uses 30)"
"${CMD[@]}" --trials 10 --gen-length 24 --modes greedy,request-varied,stable-varied,dropless --kernels fast,invariant \
  --sweep-cf 0.75,1.25,2 --sweep-modes greedy,request,stable --threads "$THREADS" --quiet \
  --json-out "$OUT/diverge.json" --svg-dir "$OUT"
echo
echo "(distinct: distinct completions of the probe over the trials; diverged: trials that differ from the probe"
echo " served alone; same bits: trials whose logits equal the alone run's bit for bit; first min/med: first"
echo " differing token; lost steps: share of the probe's steps in which it lost an expert pair)"
echo "wrote $OUT/diverge.json, $OUT/diverge_length.svg and $OUT/diverge_capacity.svg"

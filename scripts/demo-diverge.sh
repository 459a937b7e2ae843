#!/usr/bin/env bash
# The divergence lab in about 16 s (2 cores), on the trained model (models/kjv-moe, docs/training.md): one KJV prompt
# served 30 times among stranger traffic drawn from the held-out books (continuous batching, chunked prefill),
# per dispatch mode and kernel kind; prints the table and every distinct completion as text, then checks the
# claims: greedy dispatch gives more than one distinct completion of 30, stable (prefix scope + invariant
# kernels, the server varied over the trials: chunk sizes, token budgets, the prefix cache, preemption,
# speculation) exactly one, with bit-identical logits in 30 of 30. Writes JSON + SVG under <build>/demo/diverge/. The full experiment (grid and capacity sweep) is
# `moe-sim diverge` with no flags; docs/divergence.md explains the columns. Usage: scripts/demo-diverge.sh [build]
set -euo pipefail
BUILD=${1:-build}
OUT="$BUILD/demo/diverge"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ -x "$BUILD/bin/moe-sim" ] && "$BUILD/bin/moe-sim" diverge --help >/dev/null 2>&1; then
  CMD=("$BUILD/bin/moe-sim" diverge)
elif [ -x "$BUILD/bin/moe-diverge" ]; then
  CMD=("$BUILD/bin/moe-diverge")
else
  echo "demo-diverge: neither $BUILD/bin/moe-sim (with diverge) nor $BUILD/bin/moe-diverge found; build one first" >&2
  exit 1
fi
# Stranger prompts come from the held-out text: build it when missing (packages from scripts/install-deps.sh).
if [ ! -s "$ROOT/data/kjv/heldout.txt" ]; then
  bash "$ROOT/scripts/fetch-corpus.sh" "$ROOT/data/kjv"
fi
THREADS=$(nproc 2>/dev/null || echo 2)
mkdir -p "$OUT"
echo "== divergence lab: same prompt, different answers (trained KJV model, 30 trials per row)"
"${CMD[@]}" --model kjv --corpus "$ROOT/data/kjv" --trials 30 --gen-length 32 \
  --modes greedy,request-varied,stable-varied --kernels fast,invariant --sweep-cf 1.25,2 --sweep-modes greedy \
  --threads "$THREADS" --quiet --json-out "$OUT/diverge.json" --svg-dir "$OUT"
echo
echo "(distinct: distinct completions of the probe over the trials; diverged: trials that differ from the probe"
echo " served alone; same bits: trials whose logits equal the alone run's bit for bit; first min/med: first"
echo " differing token; lost steps: share of the probe's steps in which it lost an expert pair; @N: the first"
echo " generated token that differs from the alone run, =: the alone run's completion)"
/usr/bin/python3 - "$OUT/diverge.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ok = True
for g in r["grid"]:
    n = r["trials"]
    if g["mode"] == "greedy":
        good = g["distinct"] > 1
        print("check %-24s %2d distinct of %d (want > 1): %s" % (g["config"], g["distinct"], n, "ok" if good else "FAILED"))
    elif g["mode"] == "stable" and g["kernel"] == "invariant":
        good = g["distinct"] == 1 and g["bitwise_same"] == n
        print("check %-24s %2d distinct of %d, bit-identical logits in %d of %d (want 1, %d): %s"
              % (g["config"], g["distinct"], n, g["bitwise_same"], n, n, "ok" if good else "FAILED"))
    else:
        continue
    ok = ok and good
sys.exit(0 if ok else 1)
PY
echo "wrote $OUT/diverge.json, $OUT/diverge_length.svg and $OUT/diverge_capacity.svg"

#!/usr/bin/env bash
# The moe-sim demo: greedy vs stable vs rank-only on one serving scenario (drop rate and probe displacement in
# one table), then the capacity-factor sweep as CSV and SVG under <build>/demo/. Usage: scripts/demo.sh [build]
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIM="$BUILD/bin/moe-sim"
SCENARIO="$ROOT/sim/scenarios/serving.toml"
OUT="$BUILD/demo"
if [ ! -x "$SIM" ]; then
  echo "demo: $SIM not found; build it first (cmake --build $BUILD --target moe-sim)" >&2
  exit 1
fi
mkdir -p "$OUT"

echo "== moe-sim demo: $("$SIM" --version)"
echo "   scenario: $SCENARIO"
echo
# One table: each mode's drop rate over the whole serving run, and how often a probe request's routing
# changed because of strangers in its batch.
for mode in greedy stable rank-only; do
  "$SIM" run --scenario "$SCENARIO" --mode "$mode" --json --quiet >"$OUT/run-$mode.json"
done
"$SIM" probe --scenario "$SCENARIO" --modes greedy,stable,rank-only --json --quiet >"$OUT/probe.json"
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
probe = {r["mode"]: r for r in json.load(open(out + "/probe.json"))["results"]}
rows = [("mode", "scope", "priority", "drop_rate", "step_drop_max", "probe_displacement", "probe_outcomes")]
for mode in ["greedy", "stable", "rank-only"]:
    run = json.load(open("%s/run-%s.json" % (out, mode)))
    p = probe[mode]
    rows.append((mode, run["config"]["policy"]["scope"], run["config"]["policy"]["priority"],
                 "%.4f" % run["drop_rate"], "%.4f" % run["per_step"]["drop_rate_max"],
                 "%.4f" % p["displacement_rate"], "%d/%d" % (p["distinct_outcomes"], p["trials"])))
width = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
for r in rows:
    print("  ".join(r[c].ljust(width[c]) if c == 0 else r[c].rjust(width[c]) for c in range(len(r))))
PY
echo
echo "(drop_rate: dropped pairs / pairs over every step; probe_displacement: share of a probe request's"
echo " (token, choice) pairs whose expert, status or weight changed because of its batch mates;"
echo " probe_outcomes: distinct routings of the probe seen over the trials)"
echo
"$SIM" sweep --scenario "$SCENARIO" --csv "$OUT/sweep.csv" --svg "$OUT/sweep.svg" --quiet
echo
echo "wrote $OUT/sweep.csv and $OUT/sweep.svg"

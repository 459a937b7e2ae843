#!/usr/bin/env bash
# moe-sim under an MPI launcher: `sweep` and `run --seeds` spread their points over the ranks and write the
# same bytes as one process (stdout, --csv, --svg, --json); an error on the ranks ends the job once, with the
# exit status of one process; commands that do not spread refuse a job of several ranks.
# Usage: sim_mpi_test.sh path/to/moe-sim NP mpirun [mpirun options...]
set -uo pipefail
SIM=${1:?usage: sim_mpi_test.sh moe-sim NP mpirun [options...]}
SIM=$(realpath "$SIM")
NP=${2:?NP}
shift 2
MPIRUN=("$@" -np "$NP")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# same NAME ARGS...: moe-sim ARGS in one process and under mpirun -np NP give the same stdout, exit status and
# files (each run in a directory of its own; ARGS name files relative to it).
same() {
  local name=$1; shift
  mkdir -p "$TMP/one" "$TMP/job"
  (cd "$TMP/one" && "$SIM" "$@" >../one.out 2>../one.err)
  local rc1=$?
  (cd "$TMP/job" && "${MPIRUN[@]}" "$SIM" "$@" >../job.out 2>../job.err)
  local rc2=$?
  if [ "$rc1" -ne 0 ] || [ "$rc2" -ne 0 ]; then
    fail "$name: exit $rc1 (one process) / $rc2 (np $NP): $(cat "$TMP/one.err" "$TMP/job.err")"
  elif ! cmp -s "$TMP/one.out" "$TMP/job.out"; then
    fail "$name: stdout differs at np $NP"; diff "$TMP/one.out" "$TMP/job.out" | head -20
  elif ! diff -r "$TMP/one" "$TMP/job" >/dev/null; then
    fail "$name: written files differ at np $NP"; diff -r "$TMP/one" "$TMP/job" | head -20
  else
    pass "$name (np $NP, $(wc -c <"$TMP/one.out") bytes, $(ls "$TMP/one" | wc -l) files)"
  fi
  rm -rf "$TMP/one" "$TMP/job"
}

# Two axis combinations x two modes x three factors: 12 points, so the ranks' blocks cross combinations.
same "sweep json" sweep --axis top-k=1,2 --modes greedy,stable --capacity-factors 0.75,1,1.5 --requests 24 \
  --token-budget 128 --decode-len fixed:8 --json --quiet
same "sweep table, csv, svg" sweep --scopes request,causal --modes greedy --capacity-factors 1,1.25 \
  --csv sweep.csv --svg sweep.svg --quiet
same "sweep of one point (ranks without points)" sweep --modes stable --capacity-factors 1 --quiet
same "sweep scenario" sweep --scenario serving --capacity-factors 1,2 --modes greedy,stable --json --quiet
same "run --seeds table" run --seeds 1,2,3 --token-budget 64 --decode-len uniform:4,16 --quiet
same "run --seeds json" run --seeds 5,6,7,8,9 --mode stable --requests 12 --json --quiet
same "run, one seed" run --requests 20 --json --quiet
# The deployment accounting: per-rank statistics travel with each point's.
same "deployment sweep" sweep --preset deepseek-v3 --requests 16 --prompt-len fixed:48 --decode-len fixed:4 \
  --token-budget 384 --modes greedy,stable --capacity-factors 1,1.5 --axis ep-size=8,32 --placement global \
  --redundant-experts 32 --warmup-steps 1 --a2a normal --json --deploy-csv ranks.csv --deploy-svg step.svg --quiet
same "deployment run --seeds" run --seeds 1,2,3 --preset deepseek-v3 --requests 12 --prompt-len fixed:32 \
  --token-budget 128 --decode-len fixed:4 --ep-size 16 --rank-capacity-factor 1 --quiet

# Errors: once, with one process's exit status.
"${MPIRUN[@]}" "$SIM" sweep --trace "$TMP/none.csv" --quiet >"$TMP/out" 2>"$TMP/err"
rc=$?
n=$(grep -c "moe-sim: error: cannot open trace file" "$TMP/err")
if [ "$rc" -ne 0 ] && [ "$n" -eq 1 ]; then pass "missing trace: one message, failure"; else
  fail "missing trace: exit $rc, $n messages: $(cat "$TMP/err")"; fi
"${MPIRUN[@]}" "$SIM" run --seeds 1,2 --top-k 9 >"$TMP/out" 2>"$TMP/err"
rc=$?
n=$(grep -c "moe-sim: error: router config: top_k (9) exceeds num_experts (8)" "$TMP/err")
if [ "$rc" -ne 0 ] && [ "$n" -eq 1 ]; then pass "usage error: one message, failure"; else
  fail "usage error: exit $rc, $n messages: $(cat "$TMP/err")"; fi
if [ "$NP" -gt 1 ]; then
  "${MPIRUN[@]}" "$SIM" probe --trials 2 >"$TMP/out" 2>"$TMP/err"
  rc=$?
  n=$(grep -c "probe runs in one process: under mpirun only sweep and run" "$TMP/err")
  if [ "$rc" -ne 0 ] && [ "$n" -eq 1 ] && [ ! -s "$TMP/out" ]; then pass "probe refuses $NP ranks"; else
    fail "probe at np $NP: exit $rc, $n messages: $(cat "$TMP/err")"; fi
else
  same "probe in a job of one" probe --trials 5 --json --quiet
fi

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "all moe-sim MPI tests passed at np $NP"

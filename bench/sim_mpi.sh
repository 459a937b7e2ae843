#!/usr/bin/env bash
# moe-sim sweep spread over the ranks of an MPI job (issue 28): one sweep of a DeepSeek-V3-shaped serving
# workload (E 256, k 8; 3 modes x 4 capacity factors = 12 points), in one process (1 and 2 threads) and under
# mpirun -np 1, 2 and 4 (one thread a rank), with the wall time of each (best of REPEATS) and a byte comparison
# of every job's stdout with the one process's. Run on a quiet machine.
#
# Usage: bench/sim_mpi.sh [MOE_SIM]     (default build/bin/moe-sim)
#   REPEATS=2 runs per row; REQUESTS=4000 requests in the workload; MPIRUN=mpirun
# Prints a markdown table: how it ran, ranks x threads, wall s, points/s, M pairs/s, speed-up over one process
# on one thread, and whether the output is byte-identical to the one process's.
set -euo pipefail
sim=$(realpath "${1:-build/bin/moe-sim}")
repeats=${REPEATS:-2}
requests=${REQUESTS:-4000}
read -r -a mpirun <<<"${MPIRUN:-mpirun} --allow-run-as-root --oversubscribe"
# shellcheck disable=SC2054 # the commas are the distributions' own syntax
sweep=(sweep --preset deepseek-v3 --requests "$requests" --prompt-len lognormal:mean=1024,sigma=1,max=8192
  --decode-len uniform:64,256 --token-budget 16384 --arrival-rate 20 --modes greedy,stable,rank-only
  --capacity-factors 1,1.25,1.5,2 --json --quiet)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=bench/best_wall.sh
source "$(dirname "$0")/best_wall.sh"

pairs_and_points=$(cd "$tmp" && "$sim" "${sweep[@]}" --threads 1 | /usr/bin/python3 -c "
import json, sys
points = json.load(sys.stdin)['points']
print(sum(p['pairs'] for p in points), len(points))")
read -r pairs points <<<"$pairs_and_points"
echo "| how | ranks x threads | wall s | points/s | M pairs/s | speed-up | stdout |"
echo "|---|---:|---:|---:|---:|---:|---|"
base=""
row() {
  local how=$1 shape=$2 timing wall verdict
  shift 2
  timing=$(best_wall "$repeats" "$tmp/out.json" "$@")
  wall=${timing% *}
  [ -z "$base" ] && base=$wall && cp "$tmp/out.json" "$tmp/one.json"
  if cmp -s "$tmp/one.json" "$tmp/out.json"; then verdict="byte-identical"; else verdict="DIFFERS"; fi
  printf "| %s | %s | %.2f | %.2f | %.1f | %.2fx | %s |\n" "$how" "$shape" "$wall" \
    "$(echo "$points / $wall" | bc -l)" "$(echo "$pairs / $wall / 1000000" | bc -l)" \
    "$(echo "$base / $wall" | bc -l)" "$verdict"
}
cd "$tmp"
row "one process" "1 x 1" "$sim" "${sweep[@]}" --threads 1
row "one process" "1 x 2" "$sim" "${sweep[@]}" --threads 2
for np in 1 2 4; do
  row "mpirun -np $np" "$np x 1" "${mpirun[@]}" -np "$np" "$sim" "${sweep[@]}" --threads 1
done
echo
echo "$points points, $pairs (token, expert) pairs in all; $(nproc) cores: $(lscpu | sed -n 's/^Model name: *//p')"

#!/usr/bin/env bash
# End-to-end moe-sim throughput (issue 14): the DeepSeek-V3 serving workload (E 256, k 8), the same with the
# deployment accounting on (issue 36: EP 64, EPLB with 64 redundant experts from a 16-step warm-up), and the
# workload at E 8, k 2, on 1 and 2 threads, in M pairs/s of wall time (best of REPEATS runs), and a check
# that --threads 1 and --threads 2 print the same JSON. Run on a quiet machine.
#
# Usage: bench/sim_throughput.sh [MOE_SIM] [BASELINE_MOE_SIM]
#   MOE_SIM           the binary to measure (default build/bin/moe-sim)
#   BASELINE_MOE_SIM  optional second binary (e.g. main's), timed on the same workloads at its one thread
#   REPEATS=3         runs per cell; REQUESTS=2000 requests per workload
#   BASE_THREADS=N    run the baseline with --threads N (a baseline that has the flag); without it, the
#                     baseline runs as it is (a binary from before --threads ran on one thread)
# Prints a markdown table: workload, binary, threads, pairs, wall s (best), M pairs/s, peak RSS MiB (of the
# best run, /usr/bin/time), and the ratio of the baseline's wall time to this one's.
set -euo pipefail
sim=${1:-build/bin/moe-sim}
base=${2:-}
repeats=${REPEATS:-3}
requests=${REQUESTS:-2000}
# shellcheck disable=SC2054 # the commas are the distributions' own syntax
workload=(run --preset deepseek-v3 --requests "$requests" --prompt-len lognormal:mean=1024,sigma=1,max=8192
  --decode-len uniform:64,512 --token-budget 16384 --arrival-rate 20 --mode stable --quiet --json)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=bench/best_wall.sh
source "$(dirname "$0")/best_wall.sh"

echo "| workload | binary | threads | pairs | wall s | M pairs/s | peak RSS MiB | baseline wall / wall |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for shape in "E256 k8:" \
  "E256 k8 EP64:--ep-size 64 --placement global --redundant-experts 64 --warmup-steps 16" \
  "E8 k2:--experts 8 --top-k 2"; do
  name=${shape%%:*}
  read -r -a extra <<<"${shape#*:}"
  base_wall=""
  rows=()
  if [ -n "$base" ]; then
    base_args=()
    [ -n "${BASE_THREADS:-}" ] && base_args=(--threads "$BASE_THREADS")
    # A baseline from before the deployment model runs the workload without its flags.
    base_extra=("${extra[@]}")
    [[ $name == *EP* ]] && base_extra=()
    timing=$(best_wall "$repeats" "$tmp/out.json" "$base" "${workload[@]}" "${base_extra[@]}" "${base_args[@]}")
    read -r base_wall rss <<<"$timing"
    pairs=$(python3 -c "import json; print(json.load(open('$tmp/out.json'))['pairs'])")
    rows+=("$(printf "| %s | %s | %s | %d | %.2f | %.1f | %.0f | 1.0 |" "$name" "$base" "${BASE_THREADS:-1}" \
      "$pairs" "$base_wall" \
      "$(echo "$pairs / $base_wall / 1000000" | bc -l)" "$(echo "$rss / 1024" | bc -l)")")
  fi
  for threads in 1 2; do
    timing=$(best_wall "$repeats" "$tmp/out.json" "$sim" "${workload[@]}" "${extra[@]}" --threads "$threads")
    read -r wall rss <<<"$timing"
    cp "$tmp/out.json" "$tmp/t$threads.json"
    pairs=$(python3 -c "import json; print(json.load(open('$tmp/out.json'))['pairs'])")
    ratio="-"
    [ -n "$base_wall" ] && ratio=$(printf "%.1f" "$(echo "$base_wall / $wall" | bc -l)")
    rows+=("$(printf "| %s | %s | %d | %d | %.2f | %.1f | %.0f | %s |" "$name" "$sim" "$threads" "$pairs" "$wall" \
      "$(echo "$pairs / $wall / 1000000" | bc -l)" "$(echo "$rss / 1024" | bc -l)" "$ratio")")
  done
  cmp -s "$tmp/t1.json" "$tmp/t2.json" || { echo "sim_throughput: --threads 1 and 2 differ ($name)" >&2; exit 1; }
  printf "%s\n" "${rows[@]}"
done

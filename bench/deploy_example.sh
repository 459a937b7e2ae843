#!/usr/bin/env bash
# The deployment model's worked example (issue 36, docs/results.md 5f): DeepSeek-V3 serving (the workload of
# bench/sim_throughput.sh, with the calibrated mixtral-8x7b score model) on 32, 64 and 256 H800s, experts
# placed contiguously, by EPLB without and with redundant experts (32 at EP 32; E + R must be a multiple of
# P, so 64 at EP 64 and 256 at EP 256), under greedy and stable dispatch at capacity factors 1.25 and 2, and
# dropless. EPLB balances the router's choices of a 16-step warm-up, which no row accounts.
#
# Usage: bench/deploy_example.sh [MOE_SIM]      (default build/bin/moe-sim)
#   REQUESTS=2000  requests in the workload
# Prints a markdown table: EP, placement, policy, drop rate, pairs per rank max/mean and per node (step means),
# the modelled step (mean) and its phases, and the network's and NVLink's megabytes per step.
set -euo pipefail
sim=${1:-build/bin/moe-sim}
requests=${REQUESTS:-2000}
PY=${PY:-/usr/bin/python3}
# shellcheck disable=SC2054 # the commas are the distributions' own syntax
workload=(--preset deepseek-v3 --scores mixtral-8x7b --requests "$requests"
  --prompt-len lognormal:mean=1024,sigma=1,max=8192 --decode-len uniform:64,512 --token-budget 16384
  --arrival-rate 20 --warmup-steps 16 --quiet --json)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "| EP | placement | policy | drop rate | pairs / rank max/mean | / node | step us | dispatch / gemm / combine us | RDMA MB / step | NVLink MB / step |"
echo "|---:|---|---|---:|---:|---:|---:|---|---:|---:|"
for case in "32 contiguous 0" "32 global 0" "32 global 32" "64 contiguous 0" "64 global 0" "64 global 64" \
  "256 contiguous 0" "256 global 0" "256 global 256"; do
  read -r ep placement redundant <<<"$case"
  deploy=(--ep-size "$ep" --placement "$placement" --redundant-experts "$redundant")
  "$sim" sweep "${workload[@]}" "${deploy[@]}" --modes greedy,stable --capacity-factors 1.25,2 >"$tmp/sweep.json"
  "$sim" run "${workload[@]}" "${deploy[@]}" --mode greedy --scope none >"$tmp/run.json"
  "$PY" - "$ep" "$placement" "$redundant" "$tmp/sweep.json" "$tmp/run.json" <<'EOF'
import json, sys
ep, placement, redundant, sweep, run = sys.argv[1:]
points = [(f"{p['mode']} cf {p['capacity_factor']:g}", p) for p in json.load(open(sweep))['points']]
points.append(("dropless", json.load(open(run))))
where = "contiguous" if placement == "contiguous" else f"EPLB global, R {redundant}"
for name, p in points:
    d = p['deployment']
    t, b, traffic = d['time'], d['balance'], d['traffic']
    steps = d['steps']
    rdma = (traffic['dispatch']['rdma_bytes'] + traffic['combine']['rdma_bytes']) / steps / 1e6
    nvlink = (traffic['dispatch']['nvlink_bytes'] + traffic['combine']['nvlink_bytes']) / steps / 1e6
    print(f"| {ep} | {where} | {name} | {d['drop_rate']:.4f} | {b['pairs_per_rank']['max_over_mean_mean']:.3f} | "
          f"{b['pairs_per_node']['max_over_mean_mean']:.3f} | {t['step_mean_us']:.0f} | "
          f"{t['dispatch_mean_us']:.0f} / {t['gemm_mean_us']:.0f} / {t['combine_mean_us']:.0f} | {rdma:.1f} | {nvlink:.1f} |")
EOF
done

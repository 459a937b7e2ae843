#!/usr/bin/env bash
# The deployment model on paper against DeepEP's published low-latency kernels (issue 36): the modelled
# dispatch and combine times of one step of 128 tokens per rank, hidden 7168, top-8 of 256 uniformly chosen
# experts, FP8 dispatch and BF16 combine, on H800s with a 400 Gb/s CX7 NIC each, EP 8 to 256 - beside the
# figures of DeepEP's README (docs/legacy.md of deepseek-ai/DeepEP at dd758ca): the current ones (since
# 2025-06-05: same-node peers over NVLink) and the earlier pure-RDMA ones (2025-02 .. 2025-04, --intranode
# rdma). Prints a markdown table and fails (exit 1) if any modelled time is not within 2x of its figure.
#
# Usage: bench/deepep_check.sh [MOE_SIM]     (default build/bin/moe-sim)
set -euo pipefail
sim=${1:-build/bin/moe-sim}
PY=${PY:-/usr/bin/python3}

# EP, then dispatch and combine latency (us): with NVLink, then pure RDMA.
published="8 77 114 163 318
16 118 195 173 329
32 155 273 182 350
64 173 314 186 353
128 192 369 192 369
256 194 360 194 360"

echo "| EP | links | dispatch us: DeepEP | model | model / DeepEP | combine us: DeepEP | model | model / DeepEP |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|"
bad=0
while read -r ep d_nv c_nv d_rd c_rd; do
  for links in nvlink rdma; do
    json=$("$sim" run --experts 256 --top-k 8 --skew none --topic-rho 0 --scope none --quiet --json \
      --requests $((128 * ep)) --prompt-len fixed:1 --ep-size "$ep" --ranks-per-node 8 --hardware h800 \
      --hidden 7168 --expert-intermediate 2048 --a2a low-latency --intranode "$links" \
      --dispatch-dtype fp8 --combine-dtype bf16)
    if [ "$links" = nvlink ]; then d=$d_nv c=$c_nv; else d=$d_rd c=$c_rd; fi
    row=$(echo "$json" | "$PY" -c "
import json, sys
t = json.load(sys.stdin)['deployment']['time']
md, mc = t['dispatch_mean_us'], t['combine_mean_us']
rd, rc = md / $d, mc / $c
ok = all(0.5 <= r <= 2.0 for r in (rd, rc))
print('| $ep | %s | $d | %.1f | %.2f | $c | %.1f | %.2f |%s' % ('$links', md, rd, mc, rc, '' if ok else ' OUTSIDE 2x'))")
    echo "$row"
    case "$row" in *OUTSIDE*) bad=1 ;; esac
  done
done <<<"$published"
if [ "$bad" -ne 0 ]; then
  echo "deepep_check: a modelled time is not within 2x of DeepEP's published one" >&2
  exit 1
fi

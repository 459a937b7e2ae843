#!/usr/bin/env bash
# Expert-parallel layer step at 1, 2 and 4 ranks (mpirun), one markdown table: time per phase and bytes moved.
# Usage: bench/parallel_ep_peer.sh [BUILD] [extra parallel_ep_bench args...]
# Shape: d=1024, ff=1408, E=16, k=2, 256 tokens per rank (weak scaling), 1 thread per rank.
# NOTES: with fewer cores than ranks the ranks are oversubscribed (--oversubscribe); the table says so.
set -euo pipefail
build=${1:-build}
shift || true
out="$build/bench"
mkdir -p "$out"
if [[ ! -x "$build/bin/parallel_ep_bench" ]]; then
  echo "parallel_ep_peer.sh: $build/bin/parallel_ep_bench not built (needs MPI); skipping"
  exit 0
fi
cores=$(nproc)
mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
{
  echo "parallel_ep_bench on $(uname -m), ${cores} cores, $(date -u +%Y-%m-%dT%H:%MZ); times in ms (mean over steps of the slowest rank)"
  echo
  echo "Weak scaling: 256 tokens per rank (the global batch grows with the ranks)."
  echo
  header=--markdown-header
  for preset in deterministic greedy; do
    for np in 1 2 4; do
      "${mpirun_cmd[@]}" -np "$np" "$build/bin/parallel_ep_bench" --preset "$preset" $header "$@"
      header=""
    done
  done
  echo
  echo "Strong scaling: a global batch of 512 tokens split over the ranks."
  echo
  header=--markdown-header
  for np in 1 2 4; do
    "${mpirun_cmd[@]}" -np "$np" "$build/bin/parallel_ep_bench" --global-tokens 512 $header "$@"
    header=""
  done
  echo
  for np in 1 2 4; do
    if (( np > cores )); then
      echo "- ${np} ranks on ${cores} cores: oversubscribed (ranks share cores; times include waiting for the CPU)."
    fi
  done
} | tee "$out/parallel_ep_results.md"

#!/usr/bin/env bash
# Expert parallelism at scale (issue 34, docs/results.md section 4b): bytes per step against the world size,
# per-rank load on a Zipf-skewed workload with and without EPLB's redundant experts, memory per rank of a layer
# read in parts from a checkpoint, and (--big) a layer larger than this host's memory over 4 ranks, then
# DeepSeek-V3's layer in FP8 as stored in one process (issue 33).
# Usage: bench/parallel_ep_scale.sh [BUILD] [--big]
# Checkpoints are written once under $MOE_EP_BENCH_DIR (default BUILD/bench/ep-checkpoints; the --big one is
# 26 GB, then the FP8 one 11.3 GB: set MOE_EP_BENCH_DIR to a disk with room) and removed at the end unless MOE_EP_BENCH_KEEP=1.
# NOTES: with fewer cores than ranks the ranks are oversubscribed (--oversubscribe); times then include waiting
# for a CPU, bytes and loads do not depend on it.
set -euo pipefail
build=${1:-build}
shift || true
big=0
if [[ "${1:-}" == "--big" ]]; then big=1; fi
bin="$build/bin/parallel_ep_bench"
if [[ ! -x "$bin" ]]; then
  echo "parallel_ep_scale.sh: $bin not built (needs MPI); skipping"
  exit 0
fi
out="$build/bench"
ckpts=${MOE_EP_BENCH_DIR:-$out/ep-checkpoints}
mkdir -p "$out" "$ckpts"
mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
cleanup() { if [[ "${MOE_EP_BENCH_KEEP:-0}" != 1 ]]; then rm -rf "$ckpts"; fi; }
trap cleanup EXIT
{
  echo "parallel_ep_bench on $(uname -m), $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, $(date -u +%Y-%m-%dT%H:%MZ)"
  if (( big == 0 )); then
    echo
    echo "Bytes per step: 256 tokens per rank (weak scaling), d = 1024, ff = 1408, E = 16, k = 2, fp32, 1 thread per rank."
    echo
    header=--markdown-header
    for planning in global home; do
      for preset in deterministic greedy; do
        for np in 1 2 4; do
          "${mpirun_cmd[@]}" -np "$np" "$bin" --preset "$preset" --planning "$planning" --steps 5 --warmup 2 $header
          header=""
        done
      done
    done
    echo
    echo "Load per rank on a Zipf-skewed workload: d = 512, ff = 512, E = 64, k = 2, 256 tokens per rank, home planning;"
    echo "EPLB (global policy) from the first step's expert loads, 25 % redundant experts."
    echo
    header=--markdown-header
    for cf in 1000 1.25; do
      for zipf in 0.6 1.0; do
        for np in 2 4; do
          "${mpirun_cmd[@]}" -np "$np" "$bin" --mode balance --preset greedy --planning home --cf "$cf" --zipf "$zipf" \
            --redundant 0.25 --hidden 512 --ff 512 --experts 64 --steps 3 --warmup 1 $header
          header=""
        done
      done
    done
    echo
    echo "Memory per rank: a 3.2 GB bf16 layer (d = 4096, ff = 2048, E = 64, k = 2) read in parts from a checkpoint"
    echo "directory (zero-copy: each rank maps the file and touches its experts' pages), home planning, 64 tokens per rank."
    echo
    header=--markdown-header
    for np in 1 2 4; do
      "${mpirun_cmd[@]}" -np "$np" "$bin" --mode memory --checkpoint "$ckpts/mem-3g" --hidden 4096 --ff 2048 --experts 64 \
        --storage bf16 --planning home --tokens 64 --steps 2 --warmup 1 $header
      header=""
    done
  else
    echo
    echo "A layer larger than this host: 26.4 GB bf16 (d = 7168, ff = 2048, E = 300, k = 8: DeepSeek-V3's expert shape),"
    echo "4 ranks, home planning, 16 tokens per rank, fp32 compute on the mapped bf16 weights."
    echo
    "${mpirun_cmd[@]}" -np 4 "$bin" --mode memory --checkpoint "$ckpts/big" --hidden 7168 --ff 2048 --experts 300 \
      --top-k 8 --storage bf16 --planning home --tokens 16 --steps 1 --warmup 0 --markdown-header
    [[ "${MOE_EP_BENCH_KEEP:-0}" == 1 ]] || rm -rf "$ckpts/big"  # room for the next one
    echo
    echo "DeepSeek-V3's MoE layer in FP8 as stored (d = 7168, ff = 2048, E = 256, k = 8, 128 x 128 block scales: 11.3 GB;"
    echo "22.6 GB in bf16, more than this host holds) in one process, held as stored and run by the quantized kernels."
    echo
    "${mpirun_cmd[@]}" -np 1 "$bin" --mode memory --checkpoint "$ckpts/dsv3-fp8" --hidden 7168 --ff 2048 --experts 256 \
      --top-k 8 --storage fp8 --planning home --tokens 16 --steps 3 --warmup 1 --markdown-header
  fi
} | tee "$out/parallel_ep_scale$( (( big )) && echo _big).md"

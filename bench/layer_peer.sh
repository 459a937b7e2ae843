#!/usr/bin/env bash
# Layer forward, ours vs a PyTorch Hugging Face-style block, in one run: prints a markdown table of times and
# ratios (and writes it, plus an SVG plot, under BUILD/bench/). Usage: bench/layer_peer.sh [BUILD [SHAPES]]
# SHAPES: a comma-separated subset of mixtral_like, deepseek_like, qwen3_30b_a3b (default: all).
# fp32 rows: fp32 weights and compute on both sides. bf16 rows (shapes *_bf16): bf16 weights; ours with bf16
# compute (MoELayerConfig::compute), the peer torch's own bf16 block. oneDNN (our greedy bf16 path, and torch's
# bf16 linears) uses AMX where the CPU has it; the bf16 rows are therefore also run with oneDNN capped at
# vdpbf16ps (DNNL_MAX_CPU_ISA=AVX512_CORE_BF16), the instruction our invariant kernel uses, to separate the
# hardware's advantage from the kernels'.
set -euo pipefail
build=${1:-build}
shapes=${2:-mixtral_like,deepseek_like,qwen3_30b_a3b}
filter="^BM_Layer/(${shapes//,/|})_"
out="$build/bench"
mkdir -p "$out"
# The machine's limits first (bench/peak_bench.cc): the tables are read against them.
if [ ! -f "$out/peak.json" ] && [ -x "$build/bin/peak_bench" ]; then
  "$build/bin/peak_bench" --out "$out/peak.json"
fi
# Medians of 5 repetitions in random interleaved order: this VM's speed drifts by 10-20 % over a minute,
# which would otherwise land on whichever preset ran later.
"$build/bin/layer_bench" --benchmark_filter="$filter" --benchmark_min_time=0.3 --benchmark_repetitions=5 \
  --benchmark_enable_random_interleaving=true --benchmark_format=json --benchmark_out="$out/layer_bench.json" \
  --benchmark_out_format=json > /dev/null
# Our greedy bf16 path with oneDNN capped at vdpbf16ps (no AMX).
DNNL_MAX_CPU_ISA=AVX512_CORE_BF16 ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 "$build/bin/layer_bench" \
  --benchmark_filter="${filter}.*bf16_greedy" --benchmark_min_time=0.3 --benchmark_repetitions=5 \
  --benchmark_enable_random_interleaving=true --benchmark_format=json \
  --benchmark_out="$out/layer_bench_vdpbf16.json" --benchmark_out_format=json > /dev/null
# The peer's BLAS threads are pinned to each core budget (torch.set_num_threads does not reach them).
: > "$out/layer_peer.jsonl"
for threads in 1 2; do
  OPENBLAS_NUM_THREADS=$threads OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 "$(dirname "$0")/layer_peer.py" \
    --threads "$threads" --shapes "$shapes" >> "$out/layer_peer.jsonl"
  DNNL_MAX_CPU_ISA=AVX512_CORE_BF16 ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 OPENBLAS_NUM_THREADS=$threads \
    OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 "$(dirname "$0")/layer_peer.py" --threads "$threads" \
    --dtypes bf16 --shapes "$shapes" >> "$out/layer_peer.jsonl"
done
peaks=()
[ -f "$out/peak.json" ] && peaks=(--peaks "$out/peak.json")
/usr/bin/python3 "$(dirname "$0")/../scripts/layer_report.py" "$out/layer_bench.json" "$out/layer_peer.jsonl" \
  --capped "$out/layer_bench_vdpbf16.json" --markdown "$out/layer_results.md" --svg "$out/layer_results.svg" \
  "${peaks[@]}"
cat "$out/layer_results.md"

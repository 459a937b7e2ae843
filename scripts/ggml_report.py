#!/usr/bin/env python3
"""Turns bench/ggml_peer.sh's measurements into a markdown table: ggml (llama.cpp's MoE FFN graph) beside our
layer (layer_bench's dropless rows: the deterministic preset's invariant kernels with capacity scope none, every
pair computed, as in ggml's graph) per shape, weight type, T and threads.

Inputs: the peer's JSON lines (bench/ggml_moe_peer.cc: median and best ms per call, the weight bytes a call
touches) and layer_bench JSON files (medians of interleaved repetitions; rows BM_Layer/<shape>_dropless for
f32 weights, BM_Layer/<shape>_<type>_dropless otherwise). With --peaks (peak_bench's JSON) the weight GB/s of
both sides are also shown against the measured streaming bandwidth of the row's thread count. ggml/ours > 1:
ours is faster. "ours dropped": the share of (token, expert) pairs ours dropped (0 for dropless rows: a check).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from layer_report import load_ours, load_peaks  # noqa: E402

SHAPES = ["mixtral_like", "deepseek_like", "qwen3_30b_a3b"]
TYPES = ["f32", "bf16", "q8_0", "q4_k", "q6_k", "mxfp4"]


def our_shape(shape, dtype):
    """layer_bench's shape component for a (shape, weight type): f32 weights have no suffix."""
    return shape if dtype == "f32" else f"{shape}_{dtype}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("peer", help="ggml_moe_peer's JSON lines")
    p.add_argument("ours", nargs="*", help="layer_bench JSON files")
    p.add_argument("--peaks", help="peak_bench JSON: streaming bandwidth for the %% bw columns")
    p.add_argument("--markdown")
    args = p.parse_args()

    ggml = {}
    for line in open(args.peer):
        if line.strip():
            r = json.loads(line)
            ggml[(r["shape"], r["type"], r["T"], r["threads"])] = r
    if not ggml:
        sys.exit(f"ggml_report.py: no measurements in {args.peer}")
    ours = {}
    for path in args.ours:
        ours.update(load_ours(path))
    peaks = load_peaks(args.peaks) if args.peaks else {}
    bandwidth = {t: bw for (prec, t), (_, bw) in peaks.items() if prec == "f32"}

    thread_counts = sorted({k[3] for k in ggml})

    def per_threads(values):
        """One cell: the values of the thread counts in order, joined by ' / '."""
        return " / ".join("-" if v is None else v for v in values)

    def gbps(v, threads):
        bw = bandwidth.get(threads)
        return f"{v:.1f}" + (f" ({100 * v / bw:.0f}%)" if bw else "")

    first = next(iter(ggml.values()))
    threads_text = " / ".join(str(t) for t in thread_counts)
    lines = [f"ggml {first['ggml_version']} (commit {first['ggml_commit']}), CPU backend; ours: "
             "layer_bench, dropless rows (the deterministic preset's invariant kernels, capacity scope none). "
             f"Each cell: {threads_text} thread(s). ms per layer call: "
             "medians of the repetitions (ggml's best repetition beside). MB: the expert, shared-expert and "
             "router bytes one call touches (ggml's routing, averaged over the 8 inputs). % bw: of the "
             "streaming bandwidth that peak_bench measured for the thread count. ggml/ours > 1: ours faster.",
             "",
             "| shape | type | T | ggml ms | ggml best ms | ours ms | ggml/ours | MB per call | "
             "ggml GB/s (% bw) | ours GB/s (% bw) | ours dropped |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def order(key):
        shape, dtype, T = key[:3]
        return (SHAPES.index(shape) if shape in SHAPES else 99,
                TYPES.index(dtype) if dtype in TYPES else 99, T)

    for shape, dtype, T in sorted({k[:3] for k in ggml}, key=order):
        g = [ggml.get((shape, dtype, T, t)) for t in thread_counts]
        o = [ours.get((our_shape(shape, dtype), T, t, "dropless")) for t in thread_counts]
        mb = next(x["weight_MB"] for x in g if x)
        drop = next((y["drop_rate"] for y in o if y and y.get("drop_rate") is not None), None)
        both = list(zip(g, o, thread_counts))
        cells = [shape, dtype, str(T),
                 per_threads([f"{x['ms']:.2f}" if x else None for x in g]),
                 per_threads([f"{x['best_ms']:.2f}" if x else None for x in g]),
                 per_threads([f"{y['ms']:.2f}" if y else None for y in o]),
                 per_threads([f"{x['ms'] / y['ms']:.2f}" if x and y else None for x, y, _ in both]),
                 f"{mb:.1f}",
                 per_threads([gbps(x["GBps"], t) if x else None for x, _, t in both]),
                 per_threads([gbps(y["gbps"], t) if y else None for _, y, t in both]),
                 "-" if drop is None else f"{100 * drop:.1f}%"]
        lines.append("| " + " | ".join(cells) + " |")

    # How ggml held each type's experts, and how far its output was from the float64 reference.
    lines += ["", "| shape | type | ggml expert buffer | ggml output vs float64 reference (relative) |",
              "|---|---|---|---|"]
    seen = set()
    for key in sorted(ggml, key=order):
        shape, dtype = key[:2]
        if (shape, dtype) not in seen:
            seen.add((shape, dtype))
            g = ggml[key]
            lines.append(f"| {shape} | {dtype} | {g['expert_buffer']} | {g['check_rel_err']:.1e} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        open(args.markdown, "w").write(text)


if __name__ == "__main__":
    main()

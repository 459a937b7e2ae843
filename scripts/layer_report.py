#!/usr/bin/env python3
"""Turns layer_bench JSON + layer_peer JSONL into a markdown table of ratios and an SVG bar plot.

Ratios: deterministic/greedy time (target <= 1.10), peer/ours speed-up, GFLOP/s against the compute peak and
weight bytes/s against memory bandwidth. With --peaks BUILD/bench/peak.json (bench/peak_bench.cc, measured on the
machine at hand) the denominators are its best fp32 FMA peak (--precision f32) or vdpbf16ps peak (bf16) and its
streaming read bandwidth, for the table's thread count; without it, the old reference figures (170 GFLOP/s and
13 GB/s per thread).
"""
import argparse
import json
import re

PEAK_GFLOPS_PER_THREAD = 170.0
MEM_GBPS_PER_THREAD = 13.0


def load_ours(path):
    rows = {}
    for b in json.load(open(path))["benchmarks"]:
        # With repetitions only the median aggregate counts (the runs are interleaved at random, so that
        # the machine's drift spreads over every case alike).
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        if b.get("run_type") == "iteration" and b.get("repetitions", 1) > 1:
            continue
        m = re.match(r"BM_Layer/(\w+?)_(greedy|deterministic)/T:(\d+)/threads:(\d+)", b["name"])
        if not m:
            continue
        shape, preset, T, threads = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
        ms = b["real_time"] if b["time_unit"] == "ms" else b["real_time"] / 1e6
        rows[(shape, T, threads, preset)] = dict(ms=ms, gflops=b["GFLOPs"], gbps=b["weight_GBps"])  # already rates
    return rows


def load_peaks(path, precision):
    """{threads: (peak GFLOP/s, bandwidth GB/s)} from peak_bench's JSON."""
    j = json.load(open(path))
    compute = j["bf16_dp" if precision == "bf16" else "fp32_fma"]
    if compute is None:
        raise SystemExit(f"{path}: no {precision} peak (the build does not target AVX512_BF16)")
    out = {}
    for t in (1, 2):
        key = f"threads_{t}"
        out[t] = (compute[key]["best_gflops"], j["stream"][key]["best_gbps"])
    return out


def load_peer(path):
    rows = {}
    for line in open(path):
        r = json.loads(line)
        rows[(r["shape"], r["T"], r["threads"])] = r["ms"]
    return rows


def svg_plot(points, path):
    """Bars of peer/ours speed-up (deterministic preset) per (shape, T, threads)."""
    w, h, left, bottom = 900, 360, 60, 80
    n = len(points)
    vmax = max(max(v for _, v in points), 3.5)
    bar = (w - left - 20) / max(n, 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="11"><desc>moe layer: speed-up of the deterministic preset over a PyTorch HF-style '
             f'block</desc><rect width="{w}" height="{h}" fill="white"/>']
    y0 = h - bottom
    scale = (h - bottom - 30) / vmax
    for ref, color in ((1.0, "#999"), (3.0, "#c33"), (1.4, "#c93")):
        y = y0 - ref * scale
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{w-20}" y2="{y:.1f}" stroke="{color}" stroke-dasharray="4 3"/>'
                     f'<text x="{w-18}" y="{y+4:.1f}" fill="{color}">{ref}x</text>')
    for i, (label, v) in enumerate(points):
        x = left + i * bar + 2
        parts.append(f'<rect x="{x:.1f}" y="{y0 - v*scale:.1f}" width="{bar-4:.1f}" height="{v*scale:.1f}" '
                     f'fill="#3870b8"/><text x="{x + bar/2 - 2:.1f}" y="{y0 - v*scale - 3:.1f}" '
                     f'text-anchor="middle">{v:.1f}</text>')
        parts.append(f'<text transform="translate({x + bar/2:.1f},{y0 + 8}) rotate(60)" font-size="10">{label}</text>')
    parts.append(f'<line x1="{left}" y1="{y0}" x2="{w-20}" y2="{y0}" stroke="black"/>')
    parts.append(f'<text x="10" y="20" font-size="13">speed-up over PyTorch HF-style block (deterministic preset)</text>')
    parts.append("</svg>")
    open(path, "w").write("\n".join(parts))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ours")
    p.add_argument("peer")
    p.add_argument("--markdown")
    p.add_argument("--svg")
    p.add_argument("--peaks", help="peak_bench JSON: measured denominators for %% peak and %% bw")
    p.add_argument("--precision", choices=["f32", "bf16"], default="f32", help="which compute peak (with --peaks)")
    args = p.parse_args()
    ours, peer = load_ours(args.ours), load_peer(args.peer)
    peaks = load_peaks(args.peaks, args.precision) if args.peaks else None
    lines = ["| shape | T | threads | greedy ms | deterministic ms | det/greedy | peer ms | peer/det | "
             "det GFLOP/s (% peak) | det weight GB/s (% bw) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    points = []
    for (shape, T, threads, preset) in sorted(ours, key=lambda k: (k[0], k[2], k[1])):
        if preset != "deterministic":
            continue
        det = ours[(shape, T, threads, "deterministic")]
        greedy = ours.get((shape, T, threads, "greedy"))
        pm = peer.get((shape, T, threads))
        if peaks and threads in peaks:
            peak, bw = peaks[threads]
        else:
            peak, bw = PEAK_GFLOPS_PER_THREAD * threads, MEM_GBPS_PER_THREAD * threads
        lines.append(
            f"| {shape} | {T} | {threads} | {greedy['ms']:.2f} | {det['ms']:.2f} | {det['ms']/greedy['ms']:.2f} | "
            + (f"{pm:.2f} | {pm/det['ms']:.2f} | " if pm else "- | - | ")
            + f"{det['gflops']:.1f} ({100*det['gflops']/peak:.0f}%) | {det['gbps']:.1f} ({100*det['gbps']/bw:.0f}%) |")
        if pm:
            points.append((f"{shape.split('_')[0]} T{T} t{threads}", pm / det["ms"]))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        open(args.markdown, "w").write(text)
    if args.svg and points:
        svg_plot(points, args.svg)


if __name__ == "__main__":
    main()

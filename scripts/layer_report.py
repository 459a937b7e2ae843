#!/usr/bin/env python3
"""Turns layer_bench JSON + layer_peer JSONL into markdown tables of ratios and an SVG bar plot.

Two tables: fp32 (fp32 weights and compute, the peer's float32 block) and bf16 (shapes *_bf16: bf16 weights,
our bf16 compute, torch's own bf16 block). Ratios: deterministic/greedy time (target <= 1.05), peer/ours
speed-up, GFLOP/s against the compute peak and weight bytes/s against memory bandwidth. With --peaks
BUILD/bench/peak.json (bench/peak_bench.cc, measured on the machine at hand) the denominators are its best fp32
FMA peak (fp32 rows) or vdpbf16ps peak (bf16 rows) and its streaming read bandwidth, for the row's thread
count; without it, the old reference figures (170 GFLOP/s and 13 GB/s per thread). The bf16 table also shows
the runs with oneDNN capped at vdpbf16ps (--capped: our greedy path; peer lines with "isa" set), because where
the CPU has AMX, oneDNN (ours under greedy, and torch's) uses it and the vdpbf16ps peak no longer bounds it.
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
        m = re.match(r"BM_Layer/(\w+?)_(greedy|deterministic|dropless)/T:(\d+)/threads:(\d+)", b["name"])
        if not m:
            continue
        shape, preset, T, threads = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
        ms = b["real_time"] if b["time_unit"] == "ms" else b["real_time"] / 1e6
        rows[(shape, T, threads, preset)] = dict(ms=ms, gflops=b["GFLOPs"], gbps=b["weight_GBps"],  # already rates
                                                 drop_rate=b.get("drop_rate"))
    return rows


def load_peaks(path):
    """{(precision, threads): (peak GFLOP/s, bandwidth GB/s)} from peak_bench's JSON: f32 = the fp32 FMA peak,
    bf16 = the largest of the AMX tdpbf16ps, vdpbf16ps and fp32 FMA peaks that the CPU has."""
    j = json.load(open(path))
    out = {}
    for t in (1, 2):
        tk = f"threads_{t}"
        fma = j["fp32_fma"][tk]["best_gflops"]
        dp = j["bf16_dp"][tk]["best_gflops"] if j.get("bf16_dp") else 0.0
        amx = j["amx_bf16"][tk]["best_gflops"] if j.get("amx_bf16") else 0.0
        out[("f32", t)] = (fma, j["stream"][tk]["best_gbps"])
        # The bf16 kernel runs AMX (the tile contract) where the CPU has it, else vdpbf16ps or fp32 FMAs,
        # whichever is faster: its compute bound is the largest of the peaks.
        out[("bf16", t)] = (max(fma, dp, amx), j["stream"][tk]["best_gbps"])
    return out


def load_peer(path):
    """{(shape, T, threads, isa): ms}; isa is "default" for the peer's own choice (fp32 lines: always)."""
    rows = {}
    for line in open(path):
        r = json.loads(line)
        isa = r.get("isa", "-")
        rows[(r["shape"], r["T"], r["threads"], "default" if isa in ("-", "default") else "capped")] = r["ms"]
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
    p.add_argument("--capped", help="layer_bench JSON of the bf16 greedy cases run with oneDNN capped at vdpbf16ps")
    p.add_argument("--markdown")
    p.add_argument("--svg")
    p.add_argument("--peaks", help="peak_bench JSON: measured denominators for %% peak and %% bw")
    args = p.parse_args()
    ours, peer = load_ours(args.ours), load_peer(args.peer)
    capped = load_ours(args.capped) if args.capped else {}
    peaks = load_peaks(args.peaks) if args.peaks else {}

    def limits(precision, threads):
        if (precision, threads) in peaks:
            return peaks[(precision, threads)]
        return PEAK_GFLOPS_PER_THREAD * threads, MEM_GBPS_PER_THREAD * threads

    def fmt(v, spec=".2f"):
        return "-" if v is None else format(v, spec)

    def ratio(a, b):
        return None if a is None or b is None else a / b

    f32 = ["fp32 weights and compute; peer: the float32 HF-style block.", "",
           "| shape | T | threads | greedy ms | deterministic ms | det/greedy | peer ms | peer/det | "
           "det GFLOP/s (% fp32 FMA peak) | det weight GB/s (% bw) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    bf16 = ["bf16 weights; ours: bf16 compute (deterministic: the invariant kernel of the process's contract - "
            "AMX tiles where the CPU has them, else vdpbf16ps or FMA; greedy: oneDNN); peer: torch's bf16 block. "
            "(AMX): oneDNN free to use AMX; (vdp): oneDNN capped at vdpbf16ps (DNNL_MAX_CPU_ISA=AVX512_CORE_BF16).",
            "",
            "| shape | T | threads | greedy ms (AMX) | greedy ms (vdp) | deterministic ms | det/greedy (AMX) | "
            "det/greedy (vdp) | torch bf16 ms (AMX) | torch(AMX)/det | torch bf16 ms (vdp) | torch(vdp)/det | "
            "det GFLOP/s (% bf16 peak: max of AMX, vdpbf16ps, FMA) | det weight GB/s (% bw) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    points = []
    for (shape, T, threads, preset) in sorted(ours, key=lambda k: (k[0], k[2], k[1])):
        if preset != "deterministic":
            continue
        det = ours[(shape, T, threads, "deterministic")]
        greedy = ours.get((shape, T, threads, "greedy"))
        g_ms = greedy["ms"] if greedy else None
        is_bf16 = shape.endswith("_bf16")
        peak, bw = limits("bf16" if is_bf16 else "f32", threads)
        use = f"{det['gflops']:.1f} ({100*det['gflops']/peak:.0f}%) | {det['gbps']:.1f} ({100*det['gbps']/bw:.0f}%) |"
        pm = peer.get((shape, T, threads, "default"))
        if not is_bf16:
            f32.append(f"| {shape} | {T} | {threads} | {fmt(g_ms)} | {det['ms']:.2f} | "
                       f"{fmt(ratio(det['ms'], g_ms))} | {fmt(pm)} | {fmt(ratio(pm, det['ms']))} | " + use)
        else:
            gc = capped.get((shape, T, threads, "greedy"))
            gc_ms = gc["ms"] if gc else None
            pc = peer.get((shape, T, threads, "capped"))
            bf16.append(f"| {shape} | {T} | {threads} | {fmt(g_ms)} | {fmt(gc_ms)} | {det['ms']:.2f} | "
                        f"{fmt(ratio(det['ms'], g_ms))} | {fmt(ratio(det['ms'], gc_ms))} | {fmt(pm)} | {fmt(ratio(pm, det['ms']))} | {fmt(pc)} | "
                        f"{fmt(ratio(pc, det['ms']))} | " + use)
        if pm:
            points.append((f"{shape.split('_')[0]}{' bf16' if is_bf16 else ''} T{T} t{threads}", pm / det["ms"]))
    # A table without rows (a run of bf16 shapes only, e.g. bench/layer_peer.sh build qwen3_30b_a3b) is left out.
    text = "\n\n".join("\n".join(t) for t in (f32, bf16) if len(t) > 4) + "\n"
    print(text)
    if args.markdown:
        open(args.markdown, "w").write(text)
    if args.svg and points:
        svg_plot(points, args.svg)


if __name__ == "__main__":
    main()

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
import math
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


# Estimated advance per character in ems: the canvas is laid out so that every label fits.
EM_PER_CHAR = 0.62


def esc(text):
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def nice_step(span, target):
    raw = span / target
    p = 10 ** math.floor(math.log10(raw))
    return next(m * p for m in (1, 2, 5, 10) if m * p >= raw)


def svg_plot(points, path, targets=()):
    """Bars of the peer/ours speed-up of the deterministic preset, grouped by (shape, precision, threads), one
    bar per T in each group (T under the bars, the group under them), a y axis with ticks, and reference lines
    at 1x (parity) and at each (value, label) of `targets`, named in a legend. points: (shape, bf16, T,
    threads, speed-up)."""
    groups = {}
    for shape, bf16, T, threads, v in points:
        groups.setdefault((shape, bf16, threads), []).append((T, v))
    keys = sorted(groups, key=lambda k: (k[0], k[1], k[2]))
    refs = [(1.0, "1x: parity", "#777")] + [(v, "%gx: %s" % (v, label), c) for (v, label), c in
                                             zip(targets, ("#c33", "#c93", "#393", "#339"))]
    bar, gap, left, plot_h = 22, 26, 64, 260
    top = 44 + 14 * len(refs)  # the title, then the reference lines' legend, then the plot
    title = "Speed-up of the deterministic preset over the PyTorch HF-style block (peer ms / ours)"
    n_bars = sum(len(v) for v in groups.values())
    plot_w = n_bars * bar + len(keys) * gap
    legend_w = max(EM_PER_CHAR * 11 * len(label) for _, label, _ in refs) + 40
    caption = "T (tokens per call) under each bar; bars grouped by shape, precision and threads"
    w = max(left + plot_w + 20, EM_PER_CHAR * 14 * len(title) + 20, left + legend_w + 20,
            EM_PER_CHAR * 10 * len(caption) + 20)
    group_label_size = 11
    h = top + plot_h + 70
    vmax = max([v for *_, v in points] + [r for r, _, _ in refs]) * 1.1
    step = nice_step(vmax, 6)
    ymax = math.ceil(vmax / step) * step
    y0 = top + plot_h
    y = lambda v: y0 - v / ymax * plot_h
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" '
             'font-family="sans-serif" font-size="11">' % (w, h, w, h),
             '<desc>moe layer: speed-up of the deterministic preset over a PyTorch HF-style block</desc>',
             '<rect width="%.0f" height="%.0f" fill="white"/>' % (w, h),
             '<text x="%.1f" y="22" text-anchor="middle" font-size="14">%s</text>' % (w / 2, esc(title))]
    for i in range(int(round(ymax / step)) + 1):
        v = i * step
        parts.append('<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>'
                     '<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (left, y(v), left + plot_w, y(v),
                                                                           left - 6, y(v) + 4, round(v, 6)))
    parts.append('<text x="16" y="%.1f" text-anchor="middle" transform="rotate(-90 16 %.1f)">speed-up (x)</text>'
                 % (top + plot_h / 2, top + plot_h / 2))
    x = left + gap / 2
    for key in keys:
        shape, bf16, threads = key
        bars = sorted(groups[key])
        x_group = x
        for T, v in bars:
            parts.append('<rect x="%.1f" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s: %.2fx</title></rect>'
                         % (x + 1, y(v), bar - 2, y0 - y(v), "#c27c2c" if bf16 else "#3870b8",
                            esc("%s%s T=%d, %d thread%s" % (shape, " bf16" if bf16 else "", T, threads,
                                                             "s" if threads > 1 else "")), v))
            parts.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%.1f</text>'
                         % (x + bar / 2, y(v) - 3, v))
            parts.append('<text x="%.1f" y="%d" text-anchor="middle" font-size="9">%d</text>' % (x + bar / 2, y0 + 12, T))
            x += bar
        label = "%s%s, %d thread%s" % (shape, " bf16" if bf16 else "", threads, "s" if threads > 1 else "")
        # A group's label under its bars, in as many lines as it needs to stay within the group's width.
        words, lines = label.split(" "), [""]
        for word in words:
            if lines[-1] and EM_PER_CHAR * group_label_size * len(lines[-1] + " " + word) > x - x_group + gap - 4:
                lines.append(word)
            else:
                lines[-1] = (lines[-1] + " " + word).strip()
        for k, line in enumerate(lines):
            parts.append('<text x="%.1f" y="%d" text-anchor="middle" font-size="%d">%s</text>'
                         % ((x_group + x) / 2, y0 + 28 + 12 * k, group_label_size, esc(line)))
        x += gap
    parts.append('<text x="%.1f" y="%d" text-anchor="middle" font-size="10" fill="#555">%s</text>'
                 % (w / 2, h - 6, esc(caption)))
    for v, label, color in refs:
        parts.append('<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="5 3"/>'
                     % (left, y(v), left + plot_w, y(v), color))
    parts.append('<line x1="%d" y1="%d" x2="%.1f" y2="%d" stroke="black"/><line x1="%d" y1="%d" x2="%d" y2="%d" '
                 'stroke="black"/>' % (left, y0, left + plot_w, y0, left, top, left, y0))
    for k, (v, label, color) in enumerate(refs):
        ly = 40 + 14 * k
        parts.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-dasharray="5 3"/>'
                     '<text x="%d" y="%d" font-size="11">%s</text>' % (left, ly, left + 26, ly, color, left + 32,
                                                                      ly + 4, esc(label)))
    parts.append("</svg>")
    open(path, "w").write("\n".join(parts) + "\n")


def points_from_markdown(path):
    """The plot's points from layer_report's own tables (layer_results.md, or a copy in docs/results.md): fp32
    rows' peer/det and bf16 rows' torch(AMX)/det."""
    points = []
    header = None
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| shape |"):
            header = cells
            continue
        if header is None or not line.startswith("| ") or line.startswith("|---"):
            if not line.startswith("|"):
                header = None
            continue
        row = dict(zip(header, cells))
        column = next((c for c in ("peer/det", "torch(AMX)/det", "torch(default)/det") if c in row), None)
        if column is None:
            continue
        if row.get(column, "-") in ("-", ""):
            continue
        shape = row["shape"]
        bf16 = shape.endswith("_bf16")
        points.append((shape[:-5] if bf16 else shape, bf16, int(row["T"]), int(row["threads"]), float(row[column])))
    return points


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ours")
    p.add_argument("peer", nargs="?")
    p.add_argument("--capped", help="layer_bench JSON of the bf16 greedy cases run with oneDNN capped at vdpbf16ps")
    p.add_argument("--markdown")
    p.add_argument("--svg")
    p.add_argument("--peaks", help="peak_bench JSON: measured denominators for %% peak and %% bw")
    p.add_argument("--targets", default="1.4:target at T = 2048,3:target at T = 16 and 256",
                   help="reference lines of the plot besides 1x, VALUE:LABEL[,VALUE:LABEL...]")
    p.add_argument("--from-markdown", action="store_true",
                   help="OURS is a markdown file of this script's tables (no PEER): replot them with --svg")
    args = p.parse_args()
    targets = [(float(t.split(":", 1)[0]), t.split(":", 1)[1]) for t in args.targets.split(",") if t]
    if args.from_markdown:
        svg_plot(points_from_markdown(args.ours), args.svg, targets)
        return
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
            points.append((shape[:-5] if is_bf16 else shape, is_bf16, T, threads, pm / det["ms"]))
    # A table without rows (a run of bf16 shapes only, e.g. bench/layer_peer.sh build qwen3_30b_a3b) is left out.
    text = "\n\n".join("\n".join(t) for t in (f32, bf16) if len(t) > 4) + "\n"
    print(text)
    if args.markdown:
        open(args.markdown, "w").write(text)
    if args.svg and points:
        svg_plot(points, args.svg, targets)


if __name__ == "__main__":
    main()

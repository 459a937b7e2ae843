#!/usr/bin/env python3
"""Every SVG the project writes, rendered and measured (docs/doc-examples.md, "Figures").

The plots come from two writers: moe-sim's line plots (sim/svg_plot.cc: `sweep --svg`, `run/sweep
--deploy-svg`, `diverge --svg-dir`, `quality --svg`) and the layer benchmark's bar plot
(scripts/layer_report.py). This test runs
each writer on small inputs, and takes the figures committed under docs/img, and for every SVG:

  - it parses as XML and rsvg-convert (Debian's librsvg2-bin, scripts/install-deps.sh) renders it to a PNG;
  - every <text> element lies inside the view box: its box is estimated from its position, anchor, font size
    (inherited), transforms (translate, rotate) and its length at 0.62 em per character - wider than the
    average sans-serif glyph, so a label that fits here fits on the page;
  - no two series of a line plot are drawn on the same points (a series hidden under another; identical series
    are drawn once and named together).

Usage: svg_render_test.py BUILD_DIR
"""

import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = None
NS = "{http://www.w3.org/2000/svg}"
EM_WIDTH = 0.62  # estimated advance per character, in ems (DejaVu Sans averages about 0.55 on these labels)
ASCENT, DESCENT = 0.8, 0.25


def parse_transform(text):
    """A transform attribute as a list of 2x3 matrices (a, b, c, d, e, f), applied right to left."""
    out = []
    for name, args in re.findall(r"(\w+)\s*\(([^)]*)\)", text or ""):
        v = [float(a) for a in re.split(r"[\s,]+", args.strip()) if a]
        if name == "translate":
            out.append((1, 0, 0, 1, v[0], v[1] if len(v) > 1 else 0))
        elif name == "rotate":
            t = math.radians(v[0])
            c, s = math.cos(t), math.sin(t)
            cx, cy = (v[1], v[2]) if len(v) == 3 else (0, 0)
            out.append((c, s, -s, c, cx - c * cx + s * cy, cy - s * cx - c * cy))
        elif name == "scale":
            out.append((v[0], 0, 0, v[1] if len(v) > 1 else v[0], 0, 0))
        else:
            raise ValueError("transform %s not handled" % name)
    return out


def apply(matrices, x, y):
    for a, b, c, d, e, f in reversed(matrices):
        x, y = a * x + c * y + e, b * x + d * y + f
    return x, y


def text_boxes(root):
    """(text, corners) of every <text>: its estimated box's corners in the root's user space."""
    boxes = []

    def walk(node, inherited, matrices):
        attrs = dict(inherited)
        for key in ("font-size", "text-anchor"):
            if node.get(key) is not None:
                attrs[key] = node.get(key)
        here = matrices + parse_transform(node.get("transform"))
        if node.tag == NS + "text":
            content = "".join(node.itertext())
            size = float(re.match(r"[0-9.]+", attrs.get("font-size", "16")).group(0))
            x, y = float(node.get("x", 0)), float(node.get("y", 0))
            w = EM_WIDTH * size * len(content)
            anchor = attrs.get("text-anchor", "start")
            x0 = x - w if anchor == "end" else x - w / 2 if anchor == "middle" else x
            corners = [apply(here, cx, cy) for cx in (x0, x0 + w) for cy in (y - ASCENT * size, y + DESCENT * size)]
            boxes.append((content, corners))
            return
        if node.tag in (NS + "title", NS + "desc"):
            return
        for child in node:
            walk(child, attrs, here)

    walk(root, {}, [])
    return boxes


def view_box(root):
    if root.get("viewBox"):
        x, y, w, h = (float(v) for v in root.get("viewBox").split())
        return x, y, x + w, y + h
    return 0.0, 0.0, float(root.get("width")), float(root.get("height"))


def check_svg(path):
    """What is wrong with the SVG at `path` (an empty list when nothing is)."""
    problems = []
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        return ["does not parse: %s" % e]
    with tempfile.NamedTemporaryFile(suffix=".png") as png:
        r = subprocess.run(["rsvg-convert", "-o", png.name, path], capture_output=True, text=True)
        if r.returncode != 0 or os.path.getsize(png.name) == 0:
            problems.append("rsvg-convert failed: %s" % r.stderr.strip())
    x0, y0, x1, y1 = view_box(root)
    for content, corners in text_boxes(root):
        xs, ys = [c[0] for c in corners], [c[1] for c in corners]
        if min(xs) < x0 - 0.5 or max(xs) > x1 + 0.5 or min(ys) < y0 - 0.5 or max(ys) > y1 + 0.5:
            problems.append("text %r (x %.0f..%.0f, y %.0f..%.0f) leaves the view box (%.0f..%.0f, %.0f..%.0f)"
                            % (content, min(xs), max(xs), min(ys), max(ys), x0, x1, y0, y1))
    points = [p.get("points") for p in root.iter(NS + "polyline")]
    for p in set(points):
        if points.count(p) > 1:
            problems.append("%d series drawn on the same points %s..." % (points.count(p), p[:40]))
    return problems


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def run(*args, **kw):
    r = subprocess.run(list(args), capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise AssertionError("%s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr[-2000:]))
    return r.stdout


class Figures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="svg_render_test.")
        cls.sim = os.path.join(BUILD, "bin", "moe-sim")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assertRenders(self, paths):
        self.assertTrue(paths)
        for path in paths:
            with self.subTest(svg=os.path.relpath(path, ROOT) if path.startswith(ROOT) else os.path.basename(path)):
                self.assertEqual(check_svg(path), [])

    def test_committed_figures(self):
        self.assertRenders(sorted(glob.glob(os.path.join(ROOT, "docs", "img", "*.svg"))))

    def test_sweep_and_deployment_plots(self):
        sweep = os.path.join(self.tmp, "sweep.svg")
        run(self.sim, "sweep", "--requests", "8", "--modes", "greedy,stable,rank-only", "--capacity-factors",
            "0.5,1,1.25,2", "--svg", sweep, "--quiet")
        deploy = os.path.join(self.tmp, "deploy.svg")
        run(self.sim, "sweep", "--preset", "deepseek-v3", "--requests", "8", "--prompt-len", "uniform:16,64",
            "--token-budget", "256", "--modes", "greedy,stable", "--capacity-factors", "1.25", "--axis",
            "ep-size=8,32", "--deploy-svg", deploy, "--quiet")
        self.assertRenders([sweep, deploy])
        # greedy and rank-only drop the same pairs: one line, named for both.
        text = read(sweep)
        self.assertIn("greedy = rank-only", text)

    def test_divergence_lab_plots(self):
        out = os.path.join(self.tmp, "diverge")
        run(self.sim, "diverge", "--model", "tiny", "--trials", "4", "--gen-length", "8", "--modes",
            "greedy,stable-varied", "--kernels", "fast,invariant", "--sweep-cf", "0.75,1.25,2", "--sweep-modes",
            "greedy,rank-only,stable,causal", "--svg-dir", out, "--quiet")
        self.assertRenders(sorted(glob.glob(os.path.join(out, "*.svg"))))
        capacity = read(os.path.join(out, "diverge_capacity.svg"))
        self.assertIn(">1.25<", capacity, "a tick at each capacity factor of the data")

    def test_quality_plot(self):
        svg = os.path.join(self.tmp, "quality.svg")
        run(self.sim, "quality", "--corpus", os.path.join(BUILD, "kjv"), "--max-tokens", "256", "--window", "64",
            "--windows-per-run", "2", "--modes", "greedy,stable", "--overflows", "drop", "--capacity-factors",
            "1,2", "--refine", "0", "--svg", svg)
        self.assertRenders([svg])

    def test_layer_report_plot(self):
        ours = {"benchmarks": []}
        peer = []
        for shape in ("deepseek_like", "mixtral_like", "deepseek_like_bf16"):
            for threads in (1, 2):
                for T, ms in ((1, 1.0), (16, 4.0), (256, 30.0), (2048, 200.0)):
                    for preset, f in (("greedy", 1.1), ("deterministic", 1.0)):
                        ours["benchmarks"].append({
                            "name": "BM_Layer/%s_%s/T:%d/threads:%d" % (shape, preset, T, threads),
                            "run_type": "iteration", "real_time": ms * f, "time_unit": "ms", "GFLOPs": 10.0,
                            "weight_GBps": 5.0})
                    peer.append({"shape": shape, "T": T, "threads": threads, "ms": ms * (1.2 + T / 1000)})
        ours_path, peer_path = os.path.join(self.tmp, "ours.json"), os.path.join(self.tmp, "peer.jsonl")
        with open(ours_path, "w") as f:
            json.dump(ours, f)
        with open(peer_path, "w") as f:
            f.write("\n".join(json.dumps(p) for p in peer) + "\n")
        svg = os.path.join(self.tmp, "layer_peer.svg")
        run("/usr/bin/python3", os.path.join(ROOT, "scripts", "layer_report.py"), ours_path, peer_path, "--svg", svg,
            "--targets", "1.4:target at T = 2048,3:target at T = 16 and 256")
        self.assertRenders([svg])
        text = read(svg)
        for label in ("1.4x: target at T = 2048", "1x: parity", "T (tokens per call)",
                      "deepseek_like bf16 T=2048, 2 threads", ">2048</text>"):
            self.assertIn(label, text)

    def test_the_check_fails_where_it_should(self):
        bad = os.path.join(self.tmp, "bad.svg")
        write(bad, '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 200 100" font-size="10">'
                   '<text x="150" y="50">a label too long for the canvas</text>'
                   '<text transform="translate(20,95) rotate(60)">cut off below</text>'
                   '<polyline points="1,1 2,2"/><polyline points="1,1 2,2"/></svg>')
        problems = check_svg(bad)
        self.assertEqual(len(problems), 3, problems)
        write(bad, "<svg><text>unclosed</svg>")
        self.assertIn("does not parse", check_svg(bad)[0])


if __name__ == "__main__":
    BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    unittest.main()

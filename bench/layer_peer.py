#!/usr/bin/env python3
"""Peer for bench/layer_bench.cc: a Hugging Face-style sparse MoE block in PyTorch on the same shapes.

softmax -> top-k -> renormalise -> loop over experts -> SwiGLU, as transformers' MixtralSparseMoeBlock
(plus an always-on shared expert for the DeepSeek-like shape). Prints one JSON object per line:
{"shape", "T", "threads", "ms"} with the median of repeated runs.

Run with OPENBLAS_CORETYPE=SkylakeX (Debian's torch uses the system BLAS; with libopenblas0-pthread installed
that is OpenBLAS).
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn


class Expert(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.w1 = nn.Linear(d, ff, bias=False)
        self.w3 = nn.Linear(d, ff, bias=False)
        self.w2 = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoeBlock(nn.Module):
    def __init__(self, d, ff, experts, top_k, shared_ff=0):
        super().__init__()
        self.top_k = top_k
        self.num_experts = experts
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList([Expert(d, ff) for _ in range(experts)])
        self.shared = Expert(d, shared_ff) if shared_ff else None

    def forward(self, x):
        logits = self.gate(x)
        weights = F.softmax(logits, dim=1, dtype=torch.float)
        weights, selected = torch.topk(weights, self.top_k, dim=-1)
        weights /= weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)
        out = torch.zeros_like(x)
        mask = F.one_hot(selected, num_classes=self.num_experts).permute(2, 1, 0)
        for e in range(self.num_experts):
            idx, rows = torch.where(mask[e])
            if rows.numel() == 0:
                continue
            h = self.experts[e](x[rows]) * weights[rows, idx, None]
            out.index_add_(0, rows, h)
        if self.shared is not None:
            out += self.shared(x)
        return out


SHAPES = {
    "mixtral_like": dict(d=1024, ff=2816, experts=8, top_k=2, shared_ff=0),
    "deepseek_like": dict(d=1024, ff=512, experts=64, top_k=6, shared_ff=1024),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", default="1,16,256,2048")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--min-seconds", type=float, default=1.0)
    args = p.parse_args()
    torch.manual_seed(0)
    with torch.inference_mode():
        for name, s in SHAPES.items():
            block = SparseMoeBlock(s["d"], s["ff"], s["experts"], s["top_k"], s["shared_ff"]).eval()
            for threads in [int(v) for v in args.threads.split(",")]:
                torch.set_num_threads(threads)
                for T in [int(v) for v in args.tokens.split(",")]:
                    x = torch.randn(T, s["d"])
                    block(x)  # warm-up
                    times = []
                    start = time.perf_counter()
                    while time.perf_counter() - start < args.min_seconds or len(times) < 3:
                        t0 = time.perf_counter()
                        block(x)
                        times.append(time.perf_counter() - t0)
                    print(json.dumps({"shape": name, "T": T, "threads": threads,
                                      "ms": 1e3 * statistics.median(times)}), flush=True)


if __name__ == "__main__":
    main()

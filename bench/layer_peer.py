#!/usr/bin/env python3
"""Peer for bench/layer_bench.cc: a Hugging Face-style sparse MoE block in PyTorch on the same shapes.

softmax -> top-k -> renormalise -> loop over experts -> SwiGLU, as transformers' MixtralSparseMoeBlock
(plus an always-on shared expert for the DeepSeek-like shape). Prints one JSON object per line:
{"shape", "T", "threads", "ms", "torch_threads", "blas_threads", "dtype", "isa"} with the median of repeated
runs. dtype f32: the block in float32 (fp32 weights and activations); dtype bf16 (shape names *_bf16): the same
block converted with .to(torch.bfloat16) and bf16 inputs - torch's own bf16 block, whose linears run oneDNN's
bf16 matmul (on CPUs with AMX, AMX tiles; run with DNNL_MAX_CPU_ISA=AVX512_CORE_BF16 to cap it at vdpbf16ps,
which "isa" then reports).

`threads` is the peer's core budget, the same as our benchmark's thread count. torch.set_num_threads does
not reach OpenBLAS's own pthreads (they default to every core), so the BLAS thread count is fixed by the
environment: bench/layer_peer.sh runs this script once per budget N with OPENBLAS_NUM_THREADS=N and
--threads N. Within a budget the peer gets its best configuration: every torch intra-op thread count 1..N
is timed and the fastest reported (with 2 cores, torch's OpenMP threads and OpenBLAS's pthreads compete
when both are 2, so torch 1 + BLAS 2 usually wins).

Run with OPENBLAS_CORETYPE=SkylakeX (Debian's torch uses the system BLAS; with libopenblas0-pthread installed
that is OpenBLAS).
"""
import argparse
import copy
import json
import os
import statistics
import sys
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
    # Qwen3-30B-A3B's MoE layer at full size, bf16 only (as layer_bench runs it).
    "qwen3_30b_a3b": dict(d=2048, ff=768, experts=128, top_k=8, shared_ff=0, dtypes=("bf16",)),
}


def time_block(block, xs, min_seconds):
    """Median time of block(x), cycling through the inputs xs (as layer_bench does, so that a small batch
    does not find its experts' weights in cache from the previous call)."""
    for x in xs:
        block(x)  # warm-up
    times = []
    start = time.perf_counter()
    i = 0
    while time.perf_counter() - start < min_seconds or len(times) < 3:
        t0 = time.perf_counter()
        block(xs[i % len(xs)])
        times.append(time.perf_counter() - t0)
        i += 1
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", default="1,16,256,2048")
    p.add_argument("--threads", type=int, default=1, help="core budget (set OPENBLAS_NUM_THREADS to match)")
    p.add_argument("--min-seconds", type=float, default=1.0)
    p.add_argument("--dtypes", default="f32,bf16", help="f32 and/or bf16 blocks")
    p.add_argument("--shapes", default=",".join(SHAPES), help="shapes to run (default: all)")
    args = p.parse_args()
    dtypes = args.dtypes.split(",")
    if any(d not in ("f32", "bf16") for d in dtypes):
        sys.exit(f"layer_peer.py: --dtypes takes f32 and/or bf16 (got {args.dtypes})")
    isa = os.environ.get("DNNL_MAX_CPU_ISA") or os.environ.get("ONEDNN_MAX_CPU_ISA") or "default"
    blas = os.environ.get("OPENBLAS_NUM_THREADS")
    if blas is None or int(blas) != args.threads:
        sys.exit(f"layer_peer.py: set OPENBLAS_NUM_THREADS={args.threads} to match --threads (got {blas})")
    torch.manual_seed(0)
    with torch.inference_mode():
        for name, s in SHAPES.items():
            if name not in args.shapes.split(","):
                continue
            block32 = SparseMoeBlock(s["d"], s["ff"], s["experts"], s["top_k"], s["shared_ff"]).eval()
            for dtype in dtypes:
                if dtype not in s.get("dtypes", ("f32", "bf16")):
                    continue
                torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
                block = copy.deepcopy(block32).to(torch_dtype) if dtype == "bf16" else block32
                for T in [int(v) for v in args.tokens.split(",")]:
                    xs = [torch.randn(T, s["d"]).to(torch_dtype) for _ in range(8)]
                    best = None
                    for torch_threads in range(1, args.threads + 1):
                        torch.set_num_threads(torch_threads)
                        sec = time_block(block, xs, args.min_seconds)
                        if best is None or sec < best[0]:
                            best = (sec, torch_threads)
                    print(json.dumps({"shape": name + ("_bf16" if dtype == "bf16" else ""), "T": T,
                                      "threads": args.threads, "ms": 1e3 * best[0], "torch_threads": best[1],
                                      "blas_threads": int(blas), "dtype": dtype,
                                      "isa": isa if dtype == "bf16" else "-"}), flush=True)


if __name__ == "__main__":
    main()

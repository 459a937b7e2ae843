#!/usr/bin/python3
"""Routing statistics of recorded router logits (`moe-sim diverge --record-logits DIR --record-tokens 0`): per
layer the (token, choice) pair share and first-choice share per expert, max/mean load, and how often consecutive
tokens of the same request keep their first-choice expert / share a top-2 expert (docs/training.md compares them
with the torch side's and with Mixtral-8x7B's published 14-28 % vs 12.5 % random).

Routing: softmax over the logits, top-k by probability with ties to the lower expert id (the project's router).
Usage: /usr/bin/python3 scripts/kjv_routing_stats.py DIR [TOP_K]
"""
import os
import sys

import numpy as np


def main():
    d = sys.argv[1]
    k = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    meta = np.loadtxt(os.path.join(d, "meta.csv"), delimiter=",", skiprows=1, dtype=np.int64).reshape(-1, 2)
    same_request = meta[1:, 0] == meta[:-1, 0]
    layer = 0
    print("layer tokens pairs(consecutive) | pair share per expert | max/mean | same first choice | top-%d overlap" % k)
    while os.path.exists(os.path.join(d, "layer%d.npy" % layer)):
        z = np.load(os.path.join(d, "layer%d.npy" % layer)).astype(np.float64)
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        top = np.argsort(-p, axis=1, kind="stable")[:, :k]
        share = np.bincount(top.reshape(-1), minlength=z.shape[1]) / top.size
        first = np.bincount(top[:, 0], minlength=z.shape[1]) / top.shape[0]
        same_first = (top[1:, 0] == top[:-1, 0])[same_request].mean()
        overlap = np.array([len(set(a) & set(b)) > 0 for a, b in zip(top[1:], top[:-1])])[same_request].mean()
        print("%d %d %d | pairs %s | first %s | %.2f | %.4f | %.4f" % (
            layer, z.shape[0], same_request.sum(), " ".join("%.3f" % x for x in share),
            " ".join("%.3f" % x for x in first), share.max() / share.mean(), same_first, overlap))
        layer += 1
    print("(uniform random routing: same first choice %.3f)" % (1.0 / z.shape[1]))


if __name__ == "__main__":
    main()

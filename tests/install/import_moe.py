"""`import moe` from an installed prefix (tests/install/checks.sh): the module must come from PREFIX, load the
shipped trained model's first MoE layer and run a forward pass whose rows do not depend on the batch (each
request alone gives the same bits). Usage: import_moe.py PREFIX"""
import os
import sys

import numpy as np

import moe

prefix = sys.argv[1]
assert moe.__file__.startswith(prefix + "/"), f"moe imported from {moe.__file__}, not from {prefix}"
model = os.path.join(prefix, "share", "moe", "models", "kjv-moe")
layer = moe.Layer.from_pretrained(model, layer=0, preset="deterministic")
rng = np.random.default_rng(1)
tokens, requests = 12, 3
x = rng.standard_normal((tokens, layer.hidden)).astype(np.float32)
ids = np.repeat(np.arange(requests, dtype=np.uint64), tokens // requests)
pos = np.tile(np.arange(tokens // requests, dtype=np.uint32), requests)
y = layer.forward(x, ids, pos)
assert y.shape == x.shape and np.isfinite(y).all() and np.abs(y).sum() > 0, y
for r in range(requests):
    rows = ids == r
    alone = moe.Layer.from_pretrained(model, layer=0, preset="deterministic").forward(x[rows], ids[rows], pos[rows])
    assert np.array_equal(alone, y[rows]), f"request {r}: batched rows differ from the request alone"
print(f"moe {moe.__version__} from {os.path.dirname(moe.__file__)}: {os.path.basename(model)} layer 0, "
      f"{tokens} tokens x {layer.hidden} in {requests} requests, each request's rows equal to it alone")

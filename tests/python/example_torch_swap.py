"""docs/embedding.md's PyTorch example: swap the MoE blocks of a small Mixtral-style model for moe's
deterministic MoEBlock, compare with the original, and show batch invariance with capacity on.

Run: PYTHONPATH=build/python python3 tests/python/example_torch_swap.py
"""
import copy

import torch

from hf_blocks import TinyMixtral  # a Mixtral-style decoder stack: embed -> [norm -> MoE block + residual] -> head
from moe.torch_module import MoEBlock

torch.manual_seed(0)
model = TinyMixtral(vocab=100, d=64, ff=128, num_experts=8, layers=2).eval()
input_ids = torch.randint(0, 100, (3, 16))  # 3 sequences of 16 tokens

with torch.no_grad():
    before = model(input_ids)

# 1. Drop-in replacement: dropless (like the HF block), invariant kernels.
swapped = copy.deepcopy(model)
for layer in swapped.layers:
    layer.block_sparse_moe = MoEBlock.from_hf_block(layer.block_sparse_moe)
print(swapped.layers[0].block_sparse_moe)
with torch.no_grad():
    after = swapped(input_ids)
print("max |logits difference| vs the PyTorch block: %.3g" % (after - before).abs().max().item())
print("same greedy tokens:", torch.equal(after.argmax(-1), before.argmax(-1)))

# 2. With expert capacity (request-scoped, cf 1.0): tokens can be dropped, but a sequence's MoE output is still
#    bitwise independent of the other sequences in the batch. Record every MoE block's output with hooks.
capped = copy.deepcopy(model)
outputs = []
for layer in capped.layers:
    layer.block_sparse_moe = MoEBlock.from_hf_block(layer.block_sparse_moe, scope="request", capacity_factor=1.0)
    layer.block_sparse_moe.register_forward_hook(lambda module, args, out: outputs.append(out[0]))
with torch.no_grad():
    batched = capped(input_ids)     # request ids default to the batch index: sequence 1 is request 1
    alone = capped(input_ids[1:2])  # sequence 1 alone (request 0 of a batch of one)
stats = capped.layers[1].block_sparse_moe.layer.last_stats()
print("capacity 1.0, last layer, sequence 1 alone: kept %d, dropped %d pairs" % (stats["num_kept"], stats["num_dropped"]))
for i in range(len(capped.layers)):
    same = torch.equal(outputs[i][1], outputs[len(capped.layers) + i][0])
    print("layer %d MoE output of sequence 1, alone vs in the batch, bitwise equal: %s" % (i, same))
print("final logits (torch's own lm_head GEMM is not batch-invariant): max |diff| %.3g"
      % (alone[0] - batched[1]).abs().max().item())
print("fingerprint:", capped.layers[0].block_sparse_moe.layer.fingerprint())

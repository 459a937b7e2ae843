"""bf16 compute (moe.Layer(..., compute="bf16"), MoEBlock on bf16 modules) against torch's own bf16 block on the
same data: both are compared with the float64 run of the same block (its bf16 weights widened exactly, the
same bf16 input), and ours must be no worse than torch's. Our bf16 compute rounds only the GEMM inputs to bf16
and accumulates in fp32 with fp32 routing; the torch bf16 block also rounds the gate logits, every GEMM output
and the activation to bf16, so its error is larger (measured: see the printed lines). Also: bitwise batch
invariance of the deterministic bf16 layer through torch, and clear errors for bad compute names."""
import copy
import unittest

import numpy as np

import moe

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

if torch is not None:
    from hf_blocks import MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock
    from moe.torch_module import MoEBlock

D, FF, E = 128, 192, 8


def rel(a, b):
    a, b = a.double().reshape(-1), b.double().reshape(-1)
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


def row_rel(a, b):
    """Max over rows of the per-row relative error."""
    a, b = a.double().reshape(-1, a.shape[-1]), b.double().reshape(-1, b.shape[-1])
    return float((torch.linalg.norm(a - b, dim=1) / torch.linalg.norm(b, dim=1)).max())


@unittest.skipIf(torch is None, "torch is not installed")
class Bf16ComputeTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        torch.set_num_threads(1)

    def compare(self, block, name, **config):
        x = torch.randn(4, 64, D).to(torch.bfloat16)
        with torch.no_grad():
            ref, _ = copy.deepcopy(block).double()(x.double())
            theirs, _ = block(x)
        ours_block = MoEBlock.from_hf_block(block, **config)
        self.assertEqual(ours_block.compute, "bf16")
        ours, _ = ours_block(x)
        self.assertEqual(ours.dtype, torch.bfloat16)
        # The layer's own fp32 output (before the module casts it back to bf16).
        ours32 = ours_block.layer.forward(x.reshape(-1, D).float(), np.repeat(np.arange(4), 64),
                                          np.tile(np.arange(64), 4))
        e_theirs, e_ours, e_ours32 = rel(theirs, ref), rel(ours, ref), rel(ours32, ref)
        r_theirs, r_ours32 = row_rel(theirs, ref), row_rel(ours32, ref)
        print("\n  %s vs float64: torch bf16 block %.3g (worst row %.3g); ours bf16 compute %.3g "
              "(bf16 output), %.3g (fp32 output; worst row %.3g)"
              % (name, e_theirs, r_theirs, e_ours, e_ours32, r_ours32))
        # No worse than torch's own bf16 block, output rounded to bf16 like torch's or not.
        self.assertLessEqual(e_ours, e_theirs)
        self.assertLessEqual(e_ours32, e_theirs)
        self.assertLessEqual(r_ours32, r_theirs)
        # The bound of bf16 compute against the float64 run of the same bf16 input and weights: the GEMM inputs
        # (x is already bf16; the hidden activation is rounded, 2^-9 relative each, random signs) - a few 1e-3.
        self.assertLessEqual(e_ours32, 1e-2)

    def test_mixtral_no_worse_than_torch_bf16(self):
        block = MixtralSparseMoeBlock(D, FF, E).to(torch.bfloat16)
        self.compare(block, "mixtral")
        self.compare(block, "mixtral greedy", preset="greedy", kernel="fast")

    def test_qwen2_moe_shared_expert_no_worse_than_torch_bf16(self):
        block = Qwen2MoeSparseMoeBlock(D, FF, E, top_k=4, shared_ff=256).to(torch.bfloat16)
        self.compare(block, "qwen2-moe")

    def test_deterministic_bf16_is_batch_invariant(self):
        block = MixtralSparseMoeBlock(D, FF, E).to(torch.bfloat16)
        ours = MoEBlock.from_hf_block(block, preset="deterministic", num_threads=2)
        x = torch.randn(1, 300, D)
        y_all, _ = ours(x[0], request_ids=np.arange(300), positions=np.zeros(300, dtype=np.uint32))
        for i in (0, 1, 77, 299):
            y1, _ = ours(x[0, i:i + 1], request_ids=[i], positions=[0])
            self.assertTrue(torch.equal(y1[0], y_all[i]), "row %d" % i)

    def test_bad_compute_name_is_a_clear_error(self):
        with self.assertRaisesRegex(ValueError, "unknown compute precision 'fp16' \\(known: fp32, bf16\\)"):
            moe.Layer.random(32, 48, 4, compute="fp16")
        layer = moe.Layer.random(32, 48, 4, compute="bf16")
        self.assertIn("bf16 compute", layer.fingerprint())


if __name__ == "__main__":
    unittest.main()

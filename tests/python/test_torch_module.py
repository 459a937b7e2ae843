"""moe.torch_module.MoEBlock against plain PyTorch Hugging Face-style blocks (float64 reference), bitwise batch
invariance through torch tensors, bf16, swapping the blocks of a tiny model, and torch input errors.
Skips only where torch is not installed."""
import copy
import unittest

import numpy as np

import moe

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

if torch is not None:
    from hf_blocks import MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock, TinyMixtral
    from moe.torch_module import MoEBlock

D, FF, E = 64, 96, 8


def rel(a, b):
    a, b = a.double(), b.double()
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


def reference(block, x):
    """The block run in float64 (weights widened exactly)."""
    ref = copy.deepcopy(block).double()
    with torch.no_grad():
        return ref(x.double())


@unittest.skipIf(torch is None, "torch is not installed")
class MoEBlockTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)

    def test_mixtral_block_matches_float64_reference(self):
        block = MixtralSparseMoeBlock(D, FF, E)
        x = torch.randn(3, 10, D)
        ours = MoEBlock.from_hf_block(block)
        y, logits = ours(x)
        ref, ref_logits = reference(block, x)
        self.assertEqual(y.shape, x.shape)
        self.assertEqual(y.dtype, torch.float32)
        self.assertEqual(logits.shape, (30, E))
        err = rel(y, ref)
        print("\n  Mixtral block (E=%d, k=2) vs float64 PyTorch reference: rel error %.3g" % (E, err))
        self.assertLessEqual(err, 1e-5)
        self.assertLessEqual(rel(logits, ref_logits), 1e-5)
        self.assertEqual(ours.layer.last_stats()["num_dropped"], 0)

    def test_qwen2_moe_block_matches_float64_reference(self):
        for norm in (False, True):
            block = Qwen2MoeSparseMoeBlock(D, FF, E, top_k=4, shared_ff=80, norm_topk_prob=norm)
            x = torch.randn(2, 9, D)
            y, _ = MoEBlock.from_hf_block(block)(x)
            ref, _ = reference(block, x)
            err = rel(y, ref)
            print("\n  Qwen2-MoE block (k=4, norm_topk_prob=%s, shared expert) vs float64: rel error %.3g"
                  % (norm, err))
            self.assertLessEqual(err, 1e-5)

    def test_state_dict_with_prefix(self):
        block = MixtralSparseMoeBlock(D, FF, E)
        sd = {"model.layers.3.block_sparse_moe." + k: v for k, v in block.state_dict().items()}
        ours = MoEBlock.from_state_dict(sd, prefix="model.layers.3.block_sparse_moe")
        x = torch.randn(12, D)
        ref, _ = reference(block, x.unsqueeze(0))
        self.assertLessEqual(rel(ours(x)[0], ref[0]), 1e-5)
        with self.assertRaisesRegex(ValueError, "neither a Mixtral"):
            MoEBlock.from_state_dict({"foo.weight": torch.zeros(2, 2)})

    def test_bf16_block(self):
        block = MixtralSparseMoeBlock(D, FF, E).to(torch.bfloat16)
        self.assertEqual(MoEBlock.from_hf_block(block).compute, "bf16")  # a bf16 module computes in bf16
        ours = MoEBlock.from_hf_block(block, compute="fp32")
        self.assertEqual(ours.compute, "fp32")
        self.assertEqual(ours.layer.weights.storage, "bf16")
        x = torch.randn(2, 8, D).to(torch.bfloat16)
        y, _ = ours(x)
        self.assertEqual(y.dtype, torch.bfloat16)
        ref, _ = reference(block, x)
        # float32 compute inside: the only bf16 rounding is the output's (2^-9 relative).
        self.assertLessEqual(rel(y, ref), 1e-2)
        y32 = ours.layer.forward(x.reshape(-1, D).float(), np.repeat(np.arange(2), 8), np.tile(np.arange(8), 2))
        err = rel(y32, ref.reshape(-1, D))
        print("\n  bf16 weights, float32 compute vs float64 reference: rel error %.3g" % err)
        self.assertLessEqual(err, 1e-5)

    def test_batch_invariance_through_torch(self):
        block = MixtralSparseMoeBlock(D, FF, E)
        # Capacity on (request scope, cf 1.0): a request's routing and bits must not depend on strangers.
        ours = MoEBlock.from_hf_block(block, preset="deterministic", scope="request", capacity_factor=1.0)
        mine = torch.randn(7, D)
        alone, _ = ours(mine, request_ids=torch.full((7,), 5), positions=torch.arange(7))
        strangers = torch.randn(41, D)
        x = torch.cat([mine, strangers])
        ids = torch.cat([torch.full((7,), 5), torch.randint(0, 4, (41,))])
        pos = torch.cat([torch.arange(7), torch.arange(41)])
        perm = torch.randperm(48)
        y, _ = ours(x[perm], request_ids=ids[perm], positions=pos[perm])
        back = torch.empty_like(y)
        back[perm] = y
        self.assertTrue(torch.equal(alone.view(torch.int32), back[:7].view(torch.int32)))
        # [B, S, d] with default ids (batch index) and positions (sequence index): row b alone == row b in batch.
        xb = torch.randn(4, 6, D)
        yb, _ = ours(xb)
        for b in range(4):
            y1, _ = ours(xb[b:b + 1], request_ids=[b])
            self.assertTrue(torch.equal(y1[0].view(torch.int32), yb[b].view(torch.int32)))

    def test_causal_scope_prefill_then_decode(self):
        block = MixtralSparseMoeBlock(D, FF, E)
        ours = MoEBlock.from_hf_block(block, scope="causal", capacity_factor=1.0)
        x = torch.randn(2, 12, D)
        full, _ = ours(x)  # both requests, positions 0..11
        ours.reset_routing_state()
        prefill, _ = ours(x[:, :9])
        steps = [ours(x[:, p:p + 1], positions=torch.full((2, 1), p))[0] for p in range(9, 12)]
        chunked = torch.cat([prefill] + steps, dim=1)
        self.assertTrue(torch.equal(full.view(torch.int32), chunked.view(torch.int32)))
        with self.assertRaisesRegex(ValueError, "position"):
            ours(x[:, :1])  # position 0 again for live requests
        ours.release_request(0)
        ours.release_request(1)
        ours(x[:, :1])

    def test_sequence_scope_serving(self):
        """scope="sequence" (the deterministic preset's scope) with capacity: a request admitted with its prompt
        length gives the same bits alone and unchunked as prefilled in chunks among admitted strangers (rows
        shuffled) and then decoded next to theirs."""
        block = MixtralSparseMoeBlock(D, FF, E)
        ours = MoEBlock.from_hf_block(block, preset="deterministic", scope="sequence", capacity_factor=1.0)
        gen = torch.Generator().manual_seed(3)
        prompt, decode = 19, 4
        x = torch.randn(prompt + decode, D, generator=gen)
        ours.admit_request(5, prompt)
        alone, _ = ours(x, request_ids=torch.full((prompt + decode,), 5), positions=torch.arange(prompt + decode))
        self.assertGreater(ours.layer.last_stats()["num_dropped"], 0, "capacity should bind")
        ours.release_request(5)
        with self.assertRaisesRegex(ValueError, "does not hold"):
            ours.release_request(5)
        with self.assertRaisesRegex(ValueError, "admitted"):
            ours(x[:3], request_ids=torch.full((3,), 5), positions=torch.arange(3))  # not admitted

        ours.admit_request(5, prompt)
        ours.admit_request(6, 30)
        ours.admit_request(7, 8)
        stranger_x = {6: torch.randn(40, D, generator=gen), 7: torch.randn(40, D, generator=gen)}
        stranger_at = {6: 0, 7: 0}
        served = torch.empty_like(x)
        at = 0
        for n in (4, 9, 6, 1, 1, 1, 1):
            rows = [(5, p, x[p]) for p in range(at, at + n)]
            for sid in (6, 7):
                m = 5 if stranger_at[sid] < (30 if sid == 6 else 8) else 1
                rows += [(sid, p, stranger_x[sid][p]) for p in range(stranger_at[sid], stranger_at[sid] + m)]
                stranger_at[sid] += m
            perm = torch.randperm(len(rows), generator=gen)
            rows = [rows[i] for i in perm]
            y, _ = ours(torch.stack([r[2] for r in rows]), request_ids=torch.tensor([r[0] for r in rows]),
                        positions=torch.tensor([r[1] for r in rows]))
            for i, r in enumerate(rows):
                if r[0] == 5:
                    served[r[1]] = y[i]
            at += n
        self.assertEqual(at, prompt + decode)
        self.assertTrue(torch.equal(alone.view(torch.int32), served.view(torch.int32)))

    def test_prefix_cache_and_speculation(self):
        """scope="prefix" (the deterministic preset's scope): a request restored from another request's cached
        segments of a shared prefix, its rest prefilled, a decode step with a rejected draft rolled back, gives
        the bits of the request alone."""
        block = MixtralSparseMoeBlock(D, FF, E)
        ours = MoEBlock.from_hf_block(block, preset="deterministic", scope="prefix", capacity_factor=1.0,
                                      lookahead=4)
        gen = torch.Generator().manual_seed(4)
        prompt, total, shared = 21, 24, 10
        x = torch.randn(total, D, generator=gen)
        ours.admit_request(5, prompt)
        alone, _ = ours(x, request_ids=torch.full((total,), 5), positions=torch.arange(total))
        self.assertGreater(ours.layer.last_stats()["num_dropped"], 0, "capacity should bind")
        ours.release_request(5)
        self.assertEqual(ours.prefix_cache_salt(shared, 30), 0)
        ours.admit_request(6, 30)  # the writer: the same first 10 tokens, another continuation
        wx = torch.cat([x[:shared], torch.randn(20, D, generator=gen)])
        wy, _ = ours(wx, request_ids=torch.full((30,), 6), positions=torch.arange(30))
        segments = [ours.request_segment(6, 0, 4), ours.request_segment(6, 4, shared)]
        ours.release_request(6)
        ours.restore_request(5, prompt, segments)
        y1, _ = ours(x[shared:prompt], request_ids=torch.full((prompt - shared,), 5),
                     positions=torch.arange(shared, prompt))
        draft = torch.stack([x[prompt], x[prompt + 1], torch.randn(D, generator=gen)])  # the last is rejected
        y2, _ = ours(draft, request_ids=torch.full((3,), 5), positions=torch.arange(prompt, prompt + 3))
        ours.rollback_request(5, prompt + 2)
        y3, _ = ours(x[prompt + 2:], request_ids=torch.full((total - prompt - 2,), 5),
                     positions=torch.arange(prompt + 2, total))
        served = torch.cat([wy[:shared], y1, y2[:2], y3])
        self.assertTrue(torch.equal(alone.view(torch.int32), served.view(torch.int32)))
        with self.assertRaisesRegex(ValueError, "came from the prefix cache"):
            ours.rollback_request(5, 3)

    def test_swap_blocks_of_a_tiny_model(self):
        model = TinyMixtral(vocab=100, d=D, ff=FF, num_experts=E, layers=2).eval()
        ids = torch.randint(0, 100, (2, 12))
        with torch.no_grad():
            before = model(ids)
            ref = copy.deepcopy(model).double()(ids)
        for layer in model.layers:
            layer.block_sparse_moe = MoEBlock.from_hf_block(layer.block_sparse_moe)
        with torch.no_grad():
            after = model(ids)
        err = rel(after, ref)
        print("\n  tiny Mixtral model with swapped blocks vs float64: rel error %.3g (torch float32: %.3g)"
              % (err, rel(before, ref)))
        self.assertLessEqual(err, 1e-5)
        self.assertTrue(torch.equal(after.argmax(-1), ref.argmax(-1)))

    def test_torch_input_errors(self):
        layer = moe.Layer.random(D, FF, E, seed=1)
        ids, pos = torch.zeros(5, dtype=torch.int64), torch.arange(5)
        with self.assertRaisesRegex(TypeError, "float32, bfloat16 or float16"):
            layer.forward(torch.zeros(5, D, dtype=torch.float64), ids, pos)
        with self.assertRaisesRegex(ValueError, "contiguous"):
            layer.forward(torch.zeros(D, 5).t(), ids, pos)
        with self.assertRaisesRegex(ValueError, "hidden size is 64"):
            layer.forward(torch.zeros(5, 32), ids, pos)
        with self.assertRaisesRegex(ValueError, "request_ids has 4 entries"):
            layer.forward(torch.zeros(5, D), ids[:4], pos)
        x = torch.randn(5, D)
        x[2, 0] = float("nan")
        with self.assertRaisesRegex(ValueError, "row 2"):
            layer.forward(x, ids, pos)
        block = MoEBlock.from_hf_block(MixtralSparseMoeBlock(D, FF, E))
        with self.assertRaisesRegex(ValueError, "request_ids has shape"):
            block(torch.randn(2, 3, D), request_ids=torch.zeros(5))
        with self.assertRaisesRegex(ValueError, "hidden size 32"):
            block(torch.randn(2, 3, 32))

    def test_float32_tensors_share_memory(self):
        layer = moe.Layer.random(D, FF, E, seed=2)
        x = torch.randn(6, D)
        out = torch.empty(6, D)
        y = layer.forward(x, torch.zeros(6, dtype=torch.int64), torch.arange(6), out=out)
        self.assertIs(y, out)
        np.testing.assert_array_equal(out.numpy(), layer.forward(x.numpy(), np.zeros(6, int), np.arange(6)))


if __name__ == "__main__":
    unittest.main()

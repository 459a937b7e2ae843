"""A real client: small random Mixtral and Qwen2-MoE models built with Hugging Face transformers, their sparse MoE
blocks swapped for moe.torch_module.MoEBlock (the CPU layer and, where a GPU is usable, the CUDA layer).

- Dropless (the block's default, like the HF block): the model's logits equal the untouched model's within
  float32 rounding (relative error <= 1e-4 over two decoder layers).
- Deterministic preset with capacity (cf 1.0; request scope, and the preset's sequence scope with admitted
  requests): the probe - one request's rows of the activations the real model feeds each swapped block - gives
  the same bits alone as among strangers, shuffled.

Skips (naming the reason) where transformers is not installed; the CUDA cases skip without a usable device.
Handles both expert layouts of transformers: a ModuleList of experts (experts.{e}.w1/gate_proj...) and the
fused 3-D parameters of newer versions (experts.gate_up_proj [E, 2*ff, d], experts.down_proj [E, d, ff])."""
import importlib.util
import unittest

import numpy as np
import torch
from torch import nn

HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
if HAVE_TRANSFORMERS:
    import moe
    from moe.torch_module import MoEBlock

VOCAB, D, LAYERS, SEQ = 96, 64, 2, 10


def rel(a, b):
    a = a.detach().double()
    b = b.detach().double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def tiny_mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM
    config = MixtralConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=96, num_hidden_layers=LAYERS,
                           num_attention_heads=4, num_key_value_heads=2, num_local_experts=8,
                           num_experts_per_tok=2, max_position_embeddings=64, tie_word_embeddings=False)
    return MixtralForCausalLM(config).eval(), "mixtral", 2, None


def tiny_qwen2_moe():
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM
    config = Qwen2MoeConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=128, moe_intermediate_size=48,
                            shared_expert_intermediate_size=96, num_hidden_layers=LAYERS, num_attention_heads=4,
                            num_key_value_heads=2, num_experts=8, num_experts_per_tok=4, norm_topk_prob=False,
                            decoder_sparse_step=1, mlp_only_layers=[], max_position_embeddings=64,
                            tie_word_embeddings=False)
    return Qwen2MoeForCausalLM(config).eval(), "qwen2-moe", 4, False


def sparse_blocks(model):
    """(parent, attribute, block) of every sparse MoE block (class name ending in SparseMoeBlock)."""
    found = []
    for _, parent in model.named_modules():
        for attr, child in parent.named_children():
            if type(child).__name__.endswith("SparseMoeBlock"):
                found.append((parent, attr, child))
    return found


def per_expert_state_dict(block, arch):
    """The block's state_dict in the per-expert naming MoEBlock reads (converting the fused layout)."""
    sd = {k: v.detach() for k, v in block.state_dict().items()}
    if "experts.gate_up_proj" not in sd:
        return sd
    names = ("w1", "w3", "w2") if arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    gate_up, down = sd.pop("experts.gate_up_proj"), sd.pop("experts.down_proj")
    E = gate_up.shape[0]
    if gate_up.shape[2] == D and gate_up.shape[1] != D:  # [E, 2*ff, d]: F.linear layout ([out, in])
        ff = gate_up.shape[1] // 2
        gates, ups = gate_up[:, :ff, :], gate_up[:, ff:, :]
    else:  # [E, d, 2*ff]: x @ W layout
        ff = gate_up.shape[2] // 2
        gates, ups = gate_up[:, :, :ff].transpose(1, 2), gate_up[:, :, ff:].transpose(1, 2)
    downs = down if down.shape[1] == D else down.transpose(1, 2)  # to [E, d, ff]
    for e in range(E):
        sd["experts.%d.%s.weight" % (e, names[0])] = gates[e].contiguous()
        sd["experts.%d.%s.weight" % (e, names[1])] = ups[e].contiguous()
        sd["experts.%d.%s.weight" % (e, names[2])] = downs[e].contiguous()
    return sd


class SameReturn(nn.Module):
    """MoEBlock returning what the HF block returns: (hidden, router_logits) or hidden alone (newer versions)."""

    def __init__(self, block, tuple_out):
        super().__init__()
        self.block = block
        self.tuple_out = tuple_out

    def forward(self, hidden_states, *args, **kwargs):
        y, logits = self.block(hidden_states)
        return (y, logits) if self.tuple_out else y


def swap(blocks, arch, top_k, norm, **config):
    """Replaces every block by a MoEBlock built from its weights; returns the new MoEBlocks."""
    made = []
    for parent, attr, original in blocks:
        sd = per_expert_state_dict(original, arch)
        ours = MoEBlock.from_state_dict(sd, architecture=arch, top_k=top_k, norm_topk_prob=norm, **config)
        with torch.no_grad():
            probe = original(torch.zeros(1, 2, D))
        setattr(parent, attr, SameReturn(ours, isinstance(probe, tuple)))
        made.append(ours)
    return made


def restore(blocks):
    for parent, attr, original in blocks:
        setattr(parent, attr, original)


def cuda_usable():
    """(True, "") when the moe module can build a layer on a CUDA device, else (False, the reason)."""
    rng = np.random.default_rng(1)
    arrays = dict(router_gate=rng.uniform(-1, 1, (2, D)).astype(np.float32),
                  gate_proj=[rng.uniform(-1, 1, (8, D)).astype(np.float32) for _ in range(2)],
                  up_proj=[rng.uniform(-1, 1, (8, D)).astype(np.float32) for _ in range(2)],
                  down_proj=[rng.uniform(-1, 1, (D, 8)).astype(np.float32) for _ in range(2)])
    try:
        moe.Layer.from_arrays(**arrays, top_k=1, device="cuda")
        return True, ""
    except (RuntimeError, ValueError) as e:
        return False, str(e)


@unittest.skipUnless(HAVE_TRANSFORMERS, "transformers is not installed")
class HuggingFaceClients(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        torch.set_num_threads(1)

    def devices(self):
        ok, why = cuda_usable()
        return [("cpu", "")] + [("cuda", "" if ok else why)]

    def check_model(self, build):
        model, arch, top_k, norm = build()
        blocks = sparse_blocks(model)
        self.assertEqual(len(blocks), LAYERS, "expected one sparse MoE block per decoder layer")
        ids = torch.randint(0, VOCAB, (3, SEQ))
        with torch.no_grad():
            reference = model(ids).logits
        for device, why in self.devices():
            with self.subTest(arch=arch, device=device):
                if why:
                    self.skipTest(why)  # names the reason ("... no usable CUDA device: ...")
                swap(blocks, arch, top_k, norm, device=device)  # dropless (scope "none")
                try:
                    with torch.no_grad():
                        logits = model(ids).logits
                finally:
                    restore(blocks)
                err = rel(logits, reference)
                print("\n  %s on %s, dropless: logits relative error %.3g vs the untouched model" % (arch, device, err))
                self.assertLessEqual(err, 1e-4)
                self.probe_invariance(model, blocks, arch, top_k, norm, device)

    def probe_invariance(self, model, blocks, arch, top_k, norm, device):
        """Each swapped block, fed the activations the real model gives it, returns the probe request's rows
        bitwise the same alone as among strangers, shuffled: deterministic preset with capacity (cf 1.0), under
        request scope (stateless) and under the preset's own sequence scope (requests admitted with their prompt
        lengths; a fresh block for each run, since the block carries their routing state)."""
        inputs = []
        hooks = [b.register_forward_hook(lambda m, args, out: inputs.append(args[0].detach().clone()))
                 for _, _, b in blocks]
        with torch.no_grad():
            model(torch.randint(0, VOCAB, (6, SEQ)))
        for h in hooks:
            h.remove()
        ids = torch.arange(6).repeat_interleave(SEQ)
        pos = torch.arange(SEQ).repeat(6)
        for scope in ("request", "sequence"):
            def fresh(requests):
                made = swap(blocks, arch, top_k, norm, device=device, preset="deterministic", scope=scope,
                            capacity_factor=1.0)
                restore(blocks)
                for block in made:
                    for r in requests:
                        block.admit_request(r, SEQ)  # a no-op under request scope
                return made
            alone_blocks, mixed_blocks = fresh([0]), fresh(range(6))
            for layer, x in enumerate(inputs):
                rows = x.reshape(-1, D)
                alone, _ = alone_blocks[layer](rows[:SEQ], request_ids=ids[:SEQ], positions=pos[:SEQ])
                perm = torch.randperm(rows.shape[0])
                mixed, _ = mixed_blocks[layer](rows[perm], request_ids=ids[perm], positions=pos[perm])
                back = torch.empty_like(mixed)
                back[perm] = mixed
                self.assertTrue(torch.equal(alone.view(torch.int32), back[:SEQ].view(torch.int32)),
                                "layer %d, %s scope, on %s: the probe's rows differ among strangers"
                                % (layer, scope, device))

    def test_mixtral(self):
        self.check_model(tiny_mixtral)

    def test_qwen2_moe(self):
        self.check_model(tiny_qwen2_moe)


if __name__ == "__main__":
    unittest.main()

"""A real client: small random models of every supported MoE family built with Hugging Face transformers (Mixtral,
Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V2, DeepSeek-V3, GLM-4.5, gpt-oss, Llama 4), their MoE blocks swapped for
moe.torch_module.MoEBlock built from each block and the model's config (hf_config=: the same reader as
moe.Layer.from_pretrained) - the CPU layer and, where a GPU is usable, the CUDA layer.

- Dropless (the block's default, like the HF block): the model's logits equal the untouched model's within
  float32 rounding (relative error <= 1e-4 over two decoder layers), i.e. transformers' own forward is the
  reference of each family's block.
- Deterministic preset with capacity (cf 1.0; request scope, and the preset's sequence scope with admitted
  requests): the probe - one request's rows of the activations the real model feeds each swapped block - gives
  the same bits alone as among strangers, shuffled.

Skips (naming the reason) where transformers is not installed (Debian 12 has no transformers package that fits
its torch 1.13: this test runs in the GPU image, scripts/gpu-check.sh), or where the installed transformers
lacks a family; the CUDA cases skip without a usable device. Handles the expert layouts of transformers: a
ModuleList of experts and the fused 3-D parameters of newer versions (MoEBlock reads both)."""
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


def common(**extra):
    base = dict(vocab_size=VOCAB, hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)
    base.update(extra)
    return base


def tiny_qwen3_moe():
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    config = Qwen3MoeConfig(**common(intermediate_size=128, moe_intermediate_size=48, num_experts=8,
                                     num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1,
                                     mlp_only_layers=[], head_dim=16))
    return Qwen3MoeForCausalLM(config).eval(), "qwen3-moe", None, None


def tiny_olmoe():
    from transformers import OlmoeConfig, OlmoeForCausalLM
    config = OlmoeConfig(**common(intermediate_size=48, num_experts=8, num_experts_per_tok=4, norm_topk_prob=False))
    return OlmoeForCausalLM(config).eval(), "olmoe", None, None


def tiny_deepseek_v2():
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM
    config = DeepseekV2Config(**common(intermediate_size=128, moe_intermediate_size=32, n_routed_experts=16,
                                       n_shared_experts=2, num_experts_per_tok=3, n_group=4, topk_group=2,
                                       topk_method="group_limited_greedy", routed_scaling_factor=2.0,
                                       first_k_dense_replace=0, q_lora_rank=None, kv_lora_rank=16,
                                       qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, head_dim=8))
    return DeepseekV2ForCausalLM(config).eval(), "deepseek-v2", None, None


def tiny_deepseek_v3():
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    config = DeepseekV3Config(**common(intermediate_size=128, moe_intermediate_size=32, n_routed_experts=16,
                                       n_shared_experts=1, num_experts_per_tok=4, n_group=4, topk_group=2,
                                       routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=0,
                                       q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=16,
                                       qk_rope_head_dim=8, v_head_dim=16, head_dim=8))
    return DeepseekV3ForCausalLM(config).eval(), "deepseek-v3", None, None


def tiny_glm4_moe():
    from transformers import Glm4MoeConfig, Glm4MoeForCausalLM
    config = Glm4MoeConfig(**common(intermediate_size=128, moe_intermediate_size=32, n_routed_experts=16,
                                    n_shared_experts=1, num_experts_per_tok=4, n_group=1, topk_group=1,
                                    routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=0,
                                    head_dim=16))
    return Glm4MoeForCausalLM(config).eval(), "glm4-moe", None, None


def tiny_gpt_oss():
    from transformers import GptOssConfig, GptOssForCausalLM
    config = GptOssConfig(**common(intermediate_size=32, num_local_experts=8, num_experts_per_tok=4, head_dim=16,
                                   sliding_window=8, layer_types=["sliding_attention", "full_attention"]))
    return GptOssForCausalLM(config).eval(), "gpt-oss", None, None


def tiny_llama4():
    from transformers import Llama4ForCausalLM, Llama4TextConfig
    config = Llama4TextConfig(**common(intermediate_size=48, intermediate_size_mlp=96, num_local_experts=8,
                                       num_experts_per_tok=1, interleave_moe_layer_step=1, head_dim=16,
                                       attention_chunk_size=64))
    return Llama4ForCausalLM(config).eval(), "llama4", None, None


# The MoE blocks of the families (their classes' names in transformers' modeling files).
BLOCK_CLASSES = {"MixtralSparseMoeBlock", "Qwen2MoeSparseMoeBlock", "Qwen3MoeSparseMoeBlock", "OlmoeSparseMoeBlock",
                 "DeepseekV2Moe", "DeepseekV2MoE", "DeepseekV3MoE", "Glm4MoeMoE", "GptOssMLP", "Llama4TextMoe"}


def sparse_blocks(model):
    """(parent, attribute, block) of every MoE block (BLOCK_CLASSES)."""
    found = []
    for _, parent in model.named_modules():
        for attr, child in parent.named_children():
            if type(child).__name__ in BLOCK_CLASSES:
                found.append((parent, attr, child))
    return found


def randomize_biases(model):
    """DeepSeek-V3 / GLM-4.5 initialise e_score_correction_bias to zeros: small random values make it matter."""
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.copy_(torch.empty_like(buf).uniform_(-0.05, 0.05))


class SameReturn(nn.Module):
    """MoEBlock returning what the HF block returns: (hidden, router_logits) or hidden alone (newer versions)."""

    def __init__(self, block, tuple_out):
        super().__init__()
        self.block = block
        self.tuple_out = tuple_out

    def forward(self, hidden_states, *args, **kwargs):
        y, logits = self.block(hidden_states)
        return (y, logits) if self.tuple_out else y


def swap(blocks, hf_config, **config):
    """Replaces every block by a MoEBlock built from its weights and the model's config; returns the new
    MoEBlocks."""
    made = []
    for parent, attr, original in blocks:
        ours = MoEBlock.from_hf_block(original, hf_config=hf_config, **config)
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
        try:
            model, arch, _, _ = build()
        except (ImportError, TypeError, ValueError) as e:
            self.skipTest("this transformers cannot build the family's model: %s" % e)
        randomize_biases(model)
        hf_config = model.config
        blocks = sparse_blocks(model)
        self.assertEqual(len(blocks), LAYERS, "expected one sparse MoE block per decoder layer")
        ids = torch.randint(0, VOCAB, (3, SEQ))
        with torch.no_grad():
            reference = model(ids).logits
        for device, why in self.devices():
            with self.subTest(arch=arch, device=device):
                if why:
                    self.skipTest(why)  # names the reason ("... no usable CUDA device: ...")
                swap(blocks, hf_config, device=device)  # dropless (scope "none")
                try:
                    with torch.no_grad():
                        logits = model(ids).logits
                finally:
                    restore(blocks)
                err = rel(logits, reference)
                print("\n  %s on %s, dropless: logits relative error %.3g vs the untouched model" % (arch, device, err))
                self.assertLessEqual(err, 1e-4)
                self.probe_invariance(model, blocks, hf_config, device)

    def probe_invariance(self, model, blocks, hf_config, device):
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
                made = swap(blocks, hf_config, device=device, preset="deterministic", scope=scope,
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

    def test_qwen3_moe(self):
        self.check_model(tiny_qwen3_moe)

    def test_olmoe(self):
        self.check_model(tiny_olmoe)

    def test_deepseek_v2(self):
        self.check_model(tiny_deepseek_v2)

    def test_deepseek_v3(self):
        self.check_model(tiny_deepseek_v3)

    def test_glm4_moe(self):
        self.check_model(tiny_glm4_moe)

    def test_gpt_oss(self):
        self.check_model(tiny_gpt_oss)

    def test_llama4(self):
        self.check_model(tiny_llama4)


if __name__ == "__main__":
    unittest.main()

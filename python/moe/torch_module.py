"""A torch.nn.Module that replaces a Hugging Face sparse MoE block with the moe runtime.

Supported blocks (state_dict naming):

- Mixtral ``MixtralSparseMoeBlock`` (``model.layers.{i}.block_sparse_moe``): ``gate.weight`` [E, d],
  ``experts.{e}.w1.weight`` (gate_proj) [ff, d], ``experts.{e}.w3.weight`` (up_proj) [ff, d],
  ``experts.{e}.w2.weight`` (down_proj) [d, ff]. Router: softmax, top-k (2), renormalised.
- Qwen2-MoE ``Qwen2MoeSparseMoeBlock`` (``model.layers.{i}.mlp``): ``gate.weight``,
  ``experts.{e}.{gate,up,down}_proj.weight``, ``shared_expert.{gate,up,down}_proj.weight``,
  ``shared_expert_gate.weight`` [1, d]. Router: softmax, top-k (4), renormalised only if norm_topk_prob.
- ``MoEBlock.from_pretrained(path, layer=i)``: the MoE layer of a checkpoint directory or a GGUF file (any family
  and tensor type moe.Layer.from_pretrained reads), without transformers.
- With ``hf_config=`` (the model's config), every family moe.Layer.from_pretrained reads, with the same
  semantics: Qwen3-MoE, OLMoE, DeepSeek-V2, DeepSeek-V3 / Kimi K2 (``gate.e_score_correction_bias``,
  ``shared_experts.*``), GLM-4.5, gpt-oss (``router.weight`` / ``router.bias``, ``experts.gate_up_proj``
  [E, d, 2 ff] interleaved, ``experts.gate_up_proj_bias``, ``experts.down_proj`` [E, ff, d],
  ``experts.down_proj_bias``) and Llama 4 (``router.weight``, ``experts.gate_up_proj`` [E, d, 2 ff],
  ``experts.down_proj`` [E, ff, d], ``shared_expert.*``); the experts of any family may also come in the
  fused layout of newer transformers (``experts.gate_up_proj`` [E, 2 ff, d], ``experts.down_proj`` [E, d, ff]).

``MoEBlock.forward(hidden_states, request_ids=None, positions=None)`` returns ``(hidden_states, router_logits)``
like both Hugging Face blocks: the output has the input's shape and dtype, router_logits is [num_tokens, E]
(x @ gate^T, computed by torch in float32, cast to the input's dtype) for auxiliary losses and logging.

Differences from the Hugging Face block, by design:
- Inference only: no autograd through the MoE computation (the result does not require grad).
- Compute precision follows the module's weights (``compute=`` overrides): float32 weights compute in fp32; a
  bf16 module (bf16 expert weights) computes the expert FFNs in bf16 like the HF block does - every GEMM input
  rounded to bf16, bf16 weights, but fp32 accumulation and fp32 between the GEMMs (the HF block also rounds
  each GEMM output and the activation to bf16), so the result is as close or closer to a float64 reference
  than the bf16 HF block's (tests/python/test_bf16_compute.py), not bitwise equal to it. The router gate is
  fp32 in every case. Activations of any dtype are converted to float32 and the output back to their dtype.
- Defaults to the "deterministic" preset with dropless dispatch (scope="none"), matching the HF blocks, which
  never drop tokens; pass scope="prefix" (the deterministic preset's own scope), "sequence", "request" or
  "causal" and capacity_factor to enable capacity without losing batch invariance.
- scope="prefix" (the deterministic preset's own scope), "sequence" and "causal": the block keeps a recording
  moe.RoutingState, so a request's routing depends only on the request itself however the prompt is chunked,
  cached, preempted or decoded (speculatively too) and whoever shares the batch. The serving lifecycle:
  ``admit_request(request_id, prompt_length)`` before a request's first forward (required under "prefix" and
  "sequence"), or ``restore_request(request_id, prompt_length, segments)`` when a prefix cache serves its first
  positions (``request_segment`` gives what to keep in the cache; ``prefix_cache_salt`` what to add to its key),
  forward calls whose positions continue where the request left off (pass them explicitly when decoding),
  ``rollback_request(request_id, position)`` for rejected draft tokens, ``release_request(request_id)`` when it
  finishes.
- Request ids and positions: for [B, S, d] input the defaults are the batch index as request id and the sequence
  index as position; for [T, d] input, one request (id 0) at positions 0..T-1. Pass them explicitly in a serving
  stack where a batch mixes requests ([T] or [B, S] integer tensors/arrays; request_ids may also be [B]).
"""

import json
import os
import re
import tempfile

import numpy as np
import torch

from . import Layer, Weights, _moe

__all__ = ["MoEBlock", "detect_architecture"]

_MIXTRAL_KEY = re.compile(r"^experts\.(\d+)\.w1\.weight$")
_QWEN_KEY = re.compile(r"^experts\.(\d+)\.gate_proj\.weight$")

# model_type (config.json) -> the architecture name moe.Layer takes.
_MODEL_TYPES = {"mixtral": "mixtral", "qwen2_moe": "qwen2-moe", "qwen3_moe": "qwen3-moe", "olmoe": "olmoe",
                "deepseek_v2": "deepseek-v2", "deepseek_v3": "deepseek-v3", "glm4_moe": "glm4-moe",
                "gpt_oss": "gpt-oss", "llama4": "llama4", "llama4_text": "llama4"}


def _strip_prefix(state_dict, prefix):
    if not prefix:
        return dict(state_dict)
    if not prefix.endswith("."):
        prefix += "."
    return {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}


def detect_architecture(state_dict):
    """'mixtral' or 'qwen2-moe' from a block's state_dict keys (ValueError if neither fits). The other families'
    blocks share their key names with these or with each other: pass hf_config= (or architecture=) for them."""
    keys = list(state_dict.keys())
    if any(_MIXTRAL_KEY.match(k) for k in keys):
        return "mixtral"
    if any(_QWEN_KEY.match(k) for k in keys):
        return "qwen2-moe"
    raise ValueError("state_dict is neither a Mixtral block (experts.{e}.w1.weight) nor a Qwen2-MoE block "
                     "(experts.{e}.gate_proj.weight); keys start with: %s" % ", ".join(sorted(keys)[:5]))


def _need(sd, key):
    if key not in sd:
        raise ValueError("state_dict lacks %r" % key)
    return sd[key]


def _config_dict(hf_config):
    """A transformers config (or a config.json dict) as a dict with model_type."""
    if hf_config is None:
        return None
    d = hf_config if isinstance(hf_config, dict) else hf_config.to_dict()
    d = dict(d)
    if "model_type" not in d and hasattr(hf_config, "model_type"):
        d["model_type"] = hf_config.model_type
    if d.get("model_type") == "llama4" and "text_config" in d:
        d = dict(d["text_config"])
        d["model_type"] = "llama4_text"
    return d


def _experts(sd, arch, num_experts, hidden):
    """Per-expert gate, up, down [out, in] tensors (and gpt-oss's biases) from a block's state_dict: one module
    per expert (experts.{e}.w1/w3/w2 or .gate_proj/up_proj/down_proj), or the fused 3-D parameters -
    gpt-oss / Llama 4 experts.gate_up_proj [E, d, 2 ff] (x @ W; gpt-oss interleaves gate and up, Llama 4
    concatenates them) and experts.down_proj [E, ff, d], or newer transformers' experts.gate_up_proj
    [E, 2 ff, d] (F.linear; gate first) and experts.down_proj [E, d, ff]."""
    biases = {}
    if "experts.gate_up_proj" not in sd:
        names = ("w1", "w3", "w2") if arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        lists = [[_need(sd, "experts.%d.%s.weight" % (e, n)) for e in range(num_experts)] for n in names]
        return lists[0], lists[1], lists[2], biases
    gate_up, down = sd["experts.gate_up_proj"], _need(sd, "experts.down_proj")
    if arch in ("gpt-oss", "llama4") or (gate_up.shape[1] == hidden and gate_up.shape[2] != hidden):
        # [E, d, 2 ff], x @ W: transpose to [E, 2 ff, d].
        gate_up = gate_up.transpose(1, 2)
        down = down.transpose(1, 2)  # [E, ff, d] -> [E, d, ff]
    if arch == "gpt-oss":  # rows 2j / 2j + 1: gate / up
        gates, ups = gate_up[:, 0::2, :], gate_up[:, 1::2, :]
        gub = _need(sd, "experts.gate_up_proj_bias")
        biases = dict(gate_bias=[gub[e, 0::2] for e in range(num_experts)],
                      up_bias=[gub[e, 1::2] for e in range(num_experts)],
                      down_bias=[_need(sd, "experts.down_proj_bias")[e] for e in range(num_experts)])
    else:
        ff = gate_up.shape[1] // 2
        gates, ups = gate_up[:, :ff, :], gate_up[:, ff:, :]
    return ([gates[e].contiguous() for e in range(num_experts)], [ups[e].contiguous() for e in range(num_experts)],
            [down[e].contiguous() for e in range(num_experts)], biases)


class MoEBlock(torch.nn.Module):
    """Drop-in replacement for a Hugging Face MoE block of any supported family (see the module docstring)."""

    def __init__(self, layer, gate_weight, architecture, stateful=False, router_bias=None):
        super().__init__()
        self.layer = layer
        # scope="prefix"/"sequence"/"causal": routing state carried across calls per request (positions must
        # continue where the request left off; admit_request() first, release_request() when it finishes).
        self.routing_state = layer.routing_state(record=True) if stateful else None
        self.architecture = architecture
        self.num_experts = layer.num_experts
        self.top_k = layer.top_k
        self.hidden_dim = layer.hidden
        self.compute = "fp32"  # the expert FFNs' compute precision (from_state_dict sets it)
        # Kept for router_logits only (the moe layer holds its own copy of every weight).
        self.register_buffer("gate_weight", gate_weight.detach().to(torch.float32).clone(), persistent=False)
        bias = None if router_bias is None else router_bias.detach().to(torch.float32).clone()
        self.register_buffer("gate_bias", bias, persistent=False)

    @classmethod
    def from_state_dict(cls, state_dict, architecture=None, top_k=None, norm_topk_prob=None, prefix="",
                        hf_config=None, **config):
        """Builds the block from the state_dict of a family's MoE block (keys relative to the block; a
        model-level dict works with prefix="model.layers.3.mlp"). Weights are copied: bf16 tensors are stored
        bf16, other float dtypes float32.

        hf_config: the model's transformers config (or its config.json as a dict). With it the block follows
        every routing and expert key of the family exactly as moe.Layer.from_pretrained does (the same reader:
        model_type mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2, deepseek_v3, glm4_moe, gpt_oss, llama4,
        llama4_text; an unsupported value raises ValueError naming the key); top_k / norm_topk_prob still
        override. Without it: Mixtral or Qwen2-MoE, with
        top_k: Mixtral's num_experts_per_tok (default 2) / Qwen2-MoE's (default 4);
        norm_topk_prob: Qwen2-MoE only (default False, as in Qwen1.5-MoE); Mixtral always renormalises.
        config: moe.Layer keywords (preset, scope, capacity_factor, priority, overflow, kernel, compute,
        num_threads, max_tokens); scope defaults to "none" (dropless, like the HF block); compute defaults to
        "bf16" when the expert weights are bf16 and "fp32" otherwise.
        """
        sd = _strip_prefix(state_dict, prefix)
        hf = _config_dict(hf_config)
        pretrained = None
        if hf is not None:
            if hf.get("model_type") not in _MODEL_TYPES:
                raise ValueError("hf_config has model_type %r (supported: %s)"
                                 % (hf.get("model_type"), ", ".join(sorted(_MODEL_TYPES))))
            arch = _MODEL_TYPES[hf["model_type"]]
            pretrained = hf
        else:
            arch = architecture or detect_architecture(sd)
        arch = arch.replace("_", "-")
        gate_key = "router.weight" if arch in ("gpt-oss", "llama4") else "gate.weight"
        gate = _need(sd, gate_key)
        num_experts, hidden = gate.shape
        kwargs = {}
        if pretrained is None:
            if arch == "mixtral":
                if norm_topk_prob is False:
                    raise ValueError("Mixtral always renormalises the top-k weights (norm_topk_prob must not be "
                                     "False)")
                kwargs = dict(top_k=top_k or 2, renormalize=True)
            elif arch == "qwen2-moe":
                kwargs = dict(top_k=top_k or 4, renormalize=bool(norm_topk_prob))
            else:
                raise ValueError("architecture %r needs hf_config= (its routing keys: n_group, "
                                 "routed_scaling_factor, ...); without it 'mixtral' or 'qwen2-moe'" % (arch,))
        else:
            if top_k:
                kwargs["top_k"] = top_k
            if norm_topk_prob is not None:
                kwargs["renormalize"] = bool(norm_topk_prob)
        gp, up, dp, biases = _experts(sd, arch, num_experts, hidden)
        shared = {}
        for name in ("shared_expert", "shared_experts"):
            if name + ".gate_proj.weight" in sd:
                shared = dict(shared_gate_proj=sd[name + ".gate_proj.weight"],
                              shared_up_proj=_need(sd, name + ".up_proj.weight"),
                              shared_down_proj=_need(sd, name + ".down_proj.weight"),
                              shared_expert_gate=sd.get("shared_expert_gate.weight"))
        router_bias = sd.get("router.bias") if arch == "gpt-oss" else None
        score_bias = sd.get("gate.e_score_correction_bias")
        config.setdefault("compute", "bf16" if gp[0].dtype == torch.bfloat16 else "fp32")
        config.setdefault("scope", "none")
        config.setdefault("max_tokens", 1024)
        if pretrained is not None:
            # The family's keys read by the C++ reader (io::read_pretrained_config) from a config.json.
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "config.json")
                with open(path, "w") as f:
                    json.dump(pretrained, f, default=str)
                layer = Layer.from_arrays(gate, gp, up, dp, score_bias=score_bias, router_bias=router_bias,
                                          **biases, **shared, router=arch, pretrained=path, **kwargs, **config)
        else:
            layer = Layer.from_arrays(gate, gp, up, dp, router=arch, **shared, **kwargs, **config)
        block = cls(layer, gate, arch, stateful=config.get("scope") in ("causal", "sequence", "prefix"),
                    router_bias=router_bias)
        block.compute = config["compute"]
        return block

    @classmethod
    def from_pretrained(cls, path, layer=0, storage=None, **config):
        """MoE layer `layer` of a checkpoint, as a block: a Hugging Face directory (config.json + safetensors)
        or a GGUF file (single, or any shard of a split one), with the router and expert semantics the
        checkpoint describes (moe.Layer.from_pretrained: the same reader, the same errors). storage as there
        ('f32', 'bf16' or None: the file's dtype). config: moe.Layer keywords; scope defaults to "none"
        (dropless, like the Hugging Face blocks), compute to "bf16" when the stored experts are bf16."""
        path = str(path)
        weights = Weights.load_pretrained(path, layer, storage)
        info = _moe.pretrained_config(path)
        config.setdefault("compute", "bf16" if weights.storage == "bf16" else "fp32")
        config.setdefault("scope", "none")
        config.setdefault("max_tokens", 1024)
        moe_layer = Layer(weights, pretrained=path, **config)
        bias = weights.router_bias
        block = cls(moe_layer, torch.from_numpy(weights.router_gate), info["architecture"],
                    stateful=config.get("scope") in ("causal", "sequence", "prefix"),
                    router_bias=None if bias is None else torch.from_numpy(bias))
        block.compute = config["compute"]
        return block

    @classmethod
    def from_hf_block(cls, block, hf_config=None, **config):
        """From a live Hugging Face block module. With hf_config (the model's config; model.config) any supported
        family's block (MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock,
        OlmoeSparseMoeBlock, DeepseekV2Moe, DeepseekV3MoE, Glm4MoeMoE, GptOssMLP, Llama4TextMoe) follows the
        config's routing and expert keys; without it a Mixtral / Qwen2-MoE block (or a look-alike) with its
        top_k and norm_topk_prob attributes."""
        sd = block.state_dict()
        if hf_config is not None:
            return cls.from_state_dict(sd, hf_config=hf_config, **config)
        arch = config.pop("architecture", None) or detect_architecture(sd)
        top_k = config.pop("top_k", None) or getattr(block, "top_k", None)
        norm = config.pop("norm_topk_prob", None)
        if norm is None and arch != "mixtral":
            norm = getattr(block, "norm_topk_prob", False)
        return cls.from_state_dict(sd, architecture=arch, top_k=top_k, norm_topk_prob=norm, **config)

    def _meta(self, value, batch, seq, default, name):
        if value is None:
            return default
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        value = np.asarray(value)
        if value.shape == (batch * seq,) or value.shape == (batch, seq):
            return value.reshape(-1)
        if name == "request_ids" and value.shape == (batch,):
            return np.repeat(value, seq)
        if name == "positions" and value.shape == (seq,):
            return np.tile(value, batch)
        raise ValueError("%s has shape %s; expected [%d, %d] or [%d]%s" % (
            name, value.shape, batch, seq, batch * seq,
            " or [%d]" % batch if name == "request_ids" else " or [%d]" % seq))

    @torch.no_grad()
    def forward(self, hidden_states, request_ids=None, positions=None):
        if not isinstance(hidden_states, torch.Tensor):
            raise TypeError("hidden_states must be a torch.Tensor (got %s)" % type(hidden_states).__name__)
        shape = hidden_states.shape
        if hidden_states.dim() == 3:
            batch, seq, d = shape
            default_ids = np.repeat(np.arange(batch, dtype=np.uint64), seq)
            default_pos = np.tile(np.arange(seq, dtype=np.uint32), batch)
        elif hidden_states.dim() == 2:
            batch, seq, d = 1, shape[0], shape[1]
            default_ids = np.zeros(seq, dtype=np.uint64)
            default_pos = np.arange(seq, dtype=np.uint32)
        else:
            raise ValueError("hidden_states must be [batch, seq, hidden] or [tokens, hidden] (got %s)"
                             % (tuple(shape),))
        if d != self.hidden_dim:
            raise ValueError("hidden_states has hidden size %d but the block has %d" % (d, self.hidden_dim))
        ids = self._meta(request_ids, batch, seq, default_ids, "request_ids")
        pos = self._meta(positions, batch, seq, default_pos, "positions")
        x = hidden_states.detach().reshape(-1, d)
        if x.dtype == torch.float32:
            x = x.contiguous()
        y = self.layer.forward(x, ids, pos, state=self.routing_state)
        router_logits = torch.nn.functional.linear(x.to(torch.float32), self.gate_weight,
                                                   self.gate_bias).to(hidden_states.dtype)
        return y.reshape(shape), router_logits

    def admit_request(self, request_id, prompt_length):
        """Admits a request that will send prompt_length prompt tokens (in calls of any size), then decode
        (scopes "prefix", "sequence" and "causal"; a no-op otherwise). ValueError if it is already admitted."""
        if self.routing_state is not None:
            self.routing_state.admit(int(request_id), int(prompt_length))

    def restore_request(self, request_id, prompt_length, segments):
        """Admits a request whose first positions come from a prefix cache: `segments` are the cached routing
        segments of those positions (bytes from request_segment of the requests that computed them), in order
        from position 0 (stateful scopes; a no-op otherwise). ValueError, changing nothing, where
        RoutingState.restore refuses (e.g. segments of another prefix_cache_salt)."""
        if self.routing_state is not None:
            self.routing_state.restore(int(request_id), int(prompt_length), list(segments))

    def request_segment(self, request_id, begin, end):
        """The routing of positions [begin, end) of a live request, as bytes for a prefix cache (stateful
        scopes; None otherwise)."""
        if self.routing_state is None:
            return None
        return self.routing_state.segment(int(request_id), int(begin), int(end))

    def rollback_request(self, request_id, position):
        """Forgets a request's positions >= position (rejected speculative tokens; stateful scopes; a no-op
        otherwise)."""
        if self.routing_state is not None:
            self.routing_state.rollback(int(request_id), int(position))

    def prefix_cache_salt(self, prefix_end, prompt_length):
        """The prefix cache key extension of the block ending at prefix_end (Layer.prefix_cache_salt)."""
        return self.layer.prefix_cache_salt(prefix_end, prompt_length)

    def release_request(self, request_id):
        """Forgets a finished request's routing state (scopes "prefix", "sequence" and "causal"; a no-op otherwise).
        ValueError if the block does not hold it."""
        if self.routing_state is not None:
            self.routing_state.release(int(request_id))

    def reset_routing_state(self):
        """Forgets every request's routing state (a no-op for stateless scopes)."""
        if self.routing_state is not None:
            self.routing_state.clear()

    def extra_repr(self):
        return "architecture=%s, num_experts=%d, top_k=%d, hidden=%d, config=%s" % (
            self.architecture, self.num_experts, self.top_k, self.hidden_dim, self.layer.config)

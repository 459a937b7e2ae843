"""A torch.nn.Module that replaces a Hugging Face sparse MoE block with the moe runtime.

Supported blocks (state_dict naming):

- Mixtral ``MixtralSparseMoeBlock`` (``model.layers.{i}.block_sparse_moe``): ``gate.weight`` [E, d],
  ``experts.{e}.w1.weight`` (gate_proj) [ff, d], ``experts.{e}.w3.weight`` (up_proj) [ff, d],
  ``experts.{e}.w2.weight`` (down_proj) [d, ff]. Router: softmax, top-k (2), renormalised.
- Qwen2-MoE ``Qwen2MoeSparseMoeBlock`` (``model.layers.{i}.mlp``): ``gate.weight``,
  ``experts.{e}.{gate,up,down}_proj.weight``, ``shared_expert.{gate,up,down}_proj.weight``,
  ``shared_expert_gate.weight`` [1, d]. Router: softmax, top-k (4), renormalised only if norm_topk_prob.

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
  never drop tokens; pass scope="sequence" (or "request"/"causal") and capacity_factor to enable capacity.
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

import re

import numpy as np
import torch

from . import Layer

__all__ = ["MoEBlock", "detect_architecture"]

_MIXTRAL_KEY = re.compile(r"^experts\.(\d+)\.w1\.weight$")
_QWEN_KEY = re.compile(r"^experts\.(\d+)\.gate_proj\.weight$")


def _strip_prefix(state_dict, prefix):
    if not prefix:
        return dict(state_dict)
    if not prefix.endswith("."):
        prefix += "."
    return {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}


def detect_architecture(state_dict):
    """'mixtral' or 'qwen2-moe' from a block's state_dict keys (ValueError if neither fits)."""
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


class MoEBlock(torch.nn.Module):
    """Drop-in replacement for a Mixtral / Qwen2-MoE sparse MoE block (see the module docstring)."""

    def __init__(self, layer, gate_weight, architecture, stateful=False):
        super().__init__()
        self.layer = layer
        # scope="sequence"/"causal": routing state carried across calls per request (positions must continue
        # where the request left off; admit_request() first, release_request() when it finishes).
        self.routing_state = layer.routing_state(record=True) if stateful else None
        self.architecture = architecture
        self.num_experts = layer.num_experts
        self.top_k = layer.top_k
        self.hidden_dim = layer.hidden
        self.compute = "fp32"  # the expert FFNs' compute precision (from_state_dict sets it)
        # Kept for router_logits only (the moe layer holds its own copy of every weight).
        self.register_buffer("gate_weight", gate_weight.detach().to(torch.float32).clone(), persistent=False)

    @classmethod
    def from_state_dict(cls, state_dict, architecture=None, top_k=None, norm_topk_prob=None, prefix="", **config):
        """Builds the block from a state_dict of a Mixtral or Qwen2-MoE block (keys relative to the block; a
        model-level dict works with prefix="model.layers.3.block_sparse_moe"). Weights are copied: bf16 tensors
        are stored bf16, other float dtypes float32.

        top_k: Mixtral's num_experts_per_tok (default 2) / Qwen2-MoE's (default 4).
        norm_topk_prob: Qwen2-MoE only (default False, as in Qwen1.5-MoE); Mixtral always renormalises.
        config: moe.Layer keywords (preset, scope, capacity_factor, priority, overflow, kernel, compute,
        num_threads, max_tokens); scope defaults to "none" (dropless, like the HF block); compute defaults to
        "bf16" when the expert weights are bf16 and "fp32" otherwise.
        """
        sd = _strip_prefix(state_dict, prefix)
        arch = architecture or detect_architecture(sd)
        gate = _need(sd, "gate.weight")
        num_experts = gate.shape[0]
        if arch == "mixtral":
            names = ("w1", "w3", "w2")
            if norm_topk_prob is False:
                raise ValueError("Mixtral always renormalises the top-k weights (norm_topk_prob must not be False)")
            renormalize = True
            k = top_k or 2
        elif arch in ("qwen2-moe", "qwen2_moe"):
            arch = "qwen2-moe"
            names = ("gate_proj", "up_proj", "down_proj")
            renormalize = bool(norm_topk_prob)
            k = top_k or 4
        else:
            raise ValueError("architecture must be 'mixtral' or 'qwen2-moe' (got %r)" % (architecture,))
        gp = [_need(sd, "experts.%d.%s.weight" % (e, names[0])) for e in range(num_experts)]
        up = [_need(sd, "experts.%d.%s.weight" % (e, names[1])) for e in range(num_experts)]
        dp = [_need(sd, "experts.%d.%s.weight" % (e, names[2])) for e in range(num_experts)]
        shared = {}
        if arch == "qwen2-moe" and "shared_expert.gate_proj.weight" in sd:
            shared = dict(shared_gate_proj=_need(sd, "shared_expert.gate_proj.weight"),
                          shared_up_proj=_need(sd, "shared_expert.up_proj.weight"),
                          shared_down_proj=_need(sd, "shared_expert.down_proj.weight"),
                          shared_expert_gate=sd.get("shared_expert_gate.weight"))
        config.setdefault("compute", "bf16" if gp[0].dtype == torch.bfloat16 else "fp32")
        config.setdefault("scope", "none")
        config.setdefault("max_tokens", 1024)
        layer = Layer.from_arrays(gate, gp, up, dp, router=arch, top_k=k, renormalize=renormalize, **shared,
                                  **config)
        block = cls(layer, gate, arch, stateful=config.get("scope") in ("causal", "sequence", "prefix"))
        block.compute = config["compute"]
        return block

    @classmethod
    def from_hf_block(cls, block, **config):
        """From a live Hugging Face block module (MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock or a look-alike):
        reads its state_dict, top_k and norm_topk_prob attributes."""
        sd = block.state_dict()
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
        router_logits = torch.nn.functional.linear(x.to(torch.float32), self.gate_weight).to(hidden_states.dtype)
        return y.reshape(shape), router_logits

    def admit_request(self, request_id, prompt_length):
        """Admits a request that will send prompt_length prompt tokens (in calls of any size), then decode
        (scopes "sequence" and "causal"; a no-op otherwise). ValueError if it is already admitted."""
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
        """Forgets a finished request's routing state (scopes "sequence" and "causal"; a no-op otherwise).
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

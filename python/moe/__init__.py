"""moe: the deterministic MoE runtime from Python.

The C++ core is the extension ``moe._moe`` (built by the project's CMake into ``build/python/moe/``, next to
copies of these files; ``PYTHONPATH=build/python python3 -c "import moe"``).

- ``moe.plan(logits, request_ids, positions, ...)``: route + dispatch planning on numpy arrays.
- ``moe.Weights``: layer weights from a safetensors checkpoint, seeded random, or arrays (copied).
- ``moe.Layer``: one MoE layer; ``forward(x, request_ids, positions)`` on numpy float32 arrays (read in place,
  no copy) or CPU torch tensors (float32 shares memory; bfloat16/float16 are converted to float32 and back).
- ``moe.RoutingState``: a serving engine's request lifecycle for one layer (``admit(request_id, prompt_length)``,
  forward passes with ``state=``, ``release(request_id)``; ``restore`` / ``rollback`` / ``segment`` for a prefix
  cache and speculative decoding): under the deterministic preset (``moe.preset_description("deterministic")``)
  a request's output is then bitwise the same whoever shares its batches, however its prompt is chunked, and
  whichever request computed a cached prefix of it.
- ``moe.preset_names()``, ``moe.preset_description(name)``: the layer presets and what each one is (read from
  the presets themselves; ``help(moe.Layer)`` shows them).
- ``moe.torch_module.MoEBlock``: a ``torch.nn.Module`` replacing a Hugging Face Mixtral / Qwen2-MoE sparse MoE
  block (imported lazily: torch is optional).

Errors: bad input (dtype, shape, layout, mismatched lengths, NaN rows) raises TypeError or ValueError with the
reason; nothing crashes the interpreter.
"""

import json as _json
import textwrap as _textwrap

import numpy as _np

from . import _moe
from ._moe import RoutingState, Weights, eplb_rebalance, plan, preset_description, preset_names

__version__ = _moe.__version__

__all__ = ["Layer", "RoutingState", "Weights", "eplb_rebalance", "plan", "preset_description", "preset_names",
           "__version__"]


def _torch():
    """The torch module if importable, else None (torch is optional)."""
    try:
        import torch  # noqa: PLC0415

        return torch
    except ImportError:
        return None


def _is_torch_tensor(obj):
    torch = _torch()
    return torch is not None and isinstance(obj, torch.Tensor)


def _meta_array(obj):
    """request_ids / positions as numpy (torch tensors are moved to numpy without a copy on CPU)."""
    if _is_torch_tensor(obj):
        if obj.device.type != "cpu":
            raise ValueError("request_ids/positions must be CPU tensors (got device %s)" % obj.device)
        return obj.detach().numpy()
    return obj


class Layer:
    """One MoE layer: gate -> route -> plan -> expert FFN (SwiGLU) -> combine (+ shared expert).

    Build it with ``Layer(weights, **config)``, ``Layer.random(...)``, ``Layer.from_safetensors(...)``,
    ``Layer.from_pretrained(dir_or_gguf, layer=i)`` or
    ``Layer.from_arrays(...)``. Config keywords (all optional):

    preset           "deterministic" (default) or "greedy" (``moe.preset_description(name)``, the text below):
{presets}
    router           "mixtral" (default), "qwen2-moe", "qwen3-moe", "olmoe", "deepseek-v2", "deepseek-v3",
                     "glm4-moe", "gpt-oss", "llama4" (a family's router and expert semantics) or "switch".
    pretrained       a checkpoint directory (or a GGUF file) whose config.json (metadata) gives the router
                     and expert semantics (Layer.from_pretrained sets it).
    top_k, renormalize, num_groups, topk_groups   router overrides (0 / None keep the router's).
    capacity_factor  > 0 overrides the preset's 1.25.
    scope            "batch" | "request" | "causal" | "sequence" | "prefix" | "none" (none = dropless).
    lookahead        prefix scope's W (default 16): the positions past a prompt row its budget covers.
    priority         "arrival" | "request" | "score" | "random".   overflow   "drop" | "reroute".
    kernel           "invariant" | "fast".   num_threads (0 = 1).   max_tokens (workspace rows, 0 = 256).
    compute          "fp32" (default) | "bf16": the expert and shared-expert FFNs with every GEMM input rounded
                     to bf16, bf16 weights and fp32 accumulation (the gates stay fp32; "invariant" stays
                     batch-invariant; CPU only: device "cuda" raises ValueError).
    device           "cpu" (default), or "cuda" / "cuda:N": the same layer on a CUDA device (numpy arrays in
                     and out; builds with CUDA; RuntimeError naming the reason when no device is usable).
    expert_parallel  "mpi" (run under mpirun) or "single": this process is one rank of an expert-parallel
                     layer (docs/expert-parallel.md): construction and forward are collective, each rank passes
                     its own rows. planning "global" (default) | "home" (each rank plans its own rows; a
                     request's rows on one rank, its RoutingState there). placement: EPLB's slots
                     (``moe.eplb_rebalance``). ``Layer.from_pretrained(..., expert_parallel=...)`` reads on
                     each rank only its experts; ``layer.expert_parallel`` gives rank, world size and experts.
    """

    def __init__(self, weights, **config):
        if not isinstance(weights, Weights):
            raise TypeError("weights must be a moe.Weights (got %s)" % type(weights).__name__)
        self._impl = _moe.Layer(weights, **config)

    @classmethod
    def random(cls, hidden, expert_ff, num_experts, num_shared_experts=0, shared_ff=0, shared_expert_gate=False,
               score_bias=False, storage="f32", seed=0, **config):
        """A layer with seeded random weights."""
        w = Weights.random(hidden, expert_ff, num_experts, num_shared_experts, shared_ff, shared_expert_gate,
                           score_bias, storage, seed)
        return cls(w, **config)

    @classmethod
    def from_safetensors(cls, path, architecture, layer_index, hidden, expert_ff, num_experts,
                         num_shared_experts=0, shared_ff=0, shared_expert_gate=False, score_bias=False,
                         storage=None, **config):
        """Layer `layer_index` of a Hugging Face safetensors checkpoint; the router follows `architecture`
        unless `router=` is given."""
        w = Weights.load(path, architecture, layer_index, hidden, expert_ff, num_experts, num_shared_experts,
                         shared_ff, shared_expert_gate, score_bias, storage)
        config.setdefault("router", architecture)
        return cls(w, **config)

    @classmethod
    def from_pretrained(cls, path, layer=0, storage=None, **config):
        """MoE layer `layer` of a Hugging Face checkpoint directory (config.json + model.safetensors or a
        sharded index) of any supported family (model_type mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2,
        deepseek_v3, glm4_moe, gpt_oss, llama4, llama4_text), or of a GGUF file (single, or any shard of a
        split one; general.architecture llama, qwen2moe, qwen3moe, olmoe, deepseek2, glm4moe, gpt-oss, llama4,
        with llama.cpp's tensor names and keys): no shape arguments. The shape, the router and the expert
        semantics come from config.json or the GGUF metadata and are checked against the tensors; a mismatch
        or an unsupported key value or tensor type raises ValueError naming it, a dense layer ValueError
        listing the MoE layers, weights that do not fit the memory available MemoryError. storage: None (the
        file's dtype; FP8, MXFP4 and GGUF's Q8_0 / Q4_K / Q6_K weights as stored, run by the quantized
        kernels: docs/runtime.md), 'f32' or 'bf16' (quantized weights dequantized exactly), or a quantized
        type ('q8_0', 'q4_k', 'q6_k', 'mxfp4', 'fp8'). Config keywords as for Layer() (top_k= and
        renormalize= override the checkpoint's).
        expert_parallel="mpi" (or "single"): this process is one rank and reads only its experts, the router
        gate and the shared expert (collective); with it the keywords are preset, top_k, capacity_factor,
        scope, priority, overflow, kernel, compute, num_threads, max_tokens, planning and placement."""
        if config.get("expert_parallel"):  # each rank reads only its experts
            obj = cls.__new__(cls)
            obj._impl = _moe.Layer.from_pretrained_parts(str(path), layer, storage, **config)
            return obj
        w = Weights.load_pretrained(str(path), layer, storage)
        config.setdefault("pretrained", str(path))
        return cls(w, **config)

    @classmethod
    def from_arrays(cls, router_gate, gate_proj, up_proj, down_proj, shared_gate_proj=None, shared_up_proj=None,
                    shared_down_proj=None, shared_expert_gate=None, score_bias=None, router_bias=None,
                    gate_bias=None, up_bias=None, down_bias=None, **config):
        """A layer whose weights are copied from arrays (nn.Linear layout; see Weights.from_arrays). Torch
        tensors are accepted: float tensors are stored f32, bfloat16 tensors are stored bf16. router_bias [E]
        and the per-expert gate_bias / up_bias [ff], down_bias [d] lists are gpt-oss's (router="gpt-oss")."""
        conv = _weight_array

        def biases(items):
            return None if items is None else [conv(t, fp32=True) for t in items]

        w = Weights.from_arrays(conv(router_gate, fp32=True), [conv(t) for t in gate_proj],
                                [conv(t) for t in up_proj], [conv(t) for t in down_proj],
                                conv(shared_gate_proj), conv(shared_up_proj), conv(shared_down_proj),
                                conv(shared_expert_gate, fp32=True), conv(score_bias, fp32=True),
                                conv(router_bias, fp32=True), biases(gate_bias), biases(up_bias),
                                biases(down_bias))
        return cls(w, **config)

    def forward(self, x, request_ids, positions, out=None, state=None):
        """y = layer(x) for rows x [T, hidden] with their request ids and positions [T].

        numpy: x must be C-contiguous float32 (no copy is made; other dtypes raise TypeError). Returns a new
        float32 array, or fills `out`. torch (CPU): float32 contiguous tensors share memory with the call;
        bfloat16/float16 are converted to float32 for the layer and the result back to x's dtype. Inference only
        (no autograd). state: the layer's moe.RoutingState (layer.routing_state()) under the scopes that carry
        state, "prefix" (the deterministic preset), "sequence" and "causal" (under "prefix" and "sequence" admit
        every request first); None: every request starts at position 0 and, under "prefix" and "sequence", its
        rows in this call are its whole prompt.
        """
        if _is_torch_tensor(x):
            return self._forward_torch(x, request_ids, positions, out, state)
        return self._impl.forward(x, _meta_array(request_ids), _meta_array(positions), out, state)

    __call__ = forward

    def _forward_torch(self, x, request_ids, positions, out, state):
        torch = _torch()
        if x.device.type != "cpu":
            raise ValueError("x must be a CPU tensor (got device %s)" % x.device)
        if x.dim() != 2:
            raise ValueError("x must be 2-D [num_tokens, hidden] (got %d dimensions)" % x.dim())
        if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise TypeError("x must be float32, bfloat16 or float16 (got %s)" % x.dtype)
        if x.dtype == torch.float32 and not x.is_contiguous():
            raise ValueError("x must be contiguous (use x.contiguous())")
        xf = x.detach()
        if xf.dtype != torch.float32:
            xf = xf.to(torch.float32).contiguous()
        if out is not None:
            if not _is_torch_tensor(out) or out.dtype != torch.float32 or not out.is_contiguous():
                raise TypeError("out must be a contiguous float32 CPU tensor")
            self._impl.forward(xf.numpy(), _meta_array(request_ids), _meta_array(positions), out.detach().numpy(),
                               state)
            return out
        y = torch.from_numpy(self._impl.forward(xf.numpy(), _meta_array(request_ids), _meta_array(positions),
                                                None, state))
        return y if x.dtype == torch.float32 else y.to(x.dtype)

    def routing_state(self, record=False):
        """A new, empty RoutingState for this layer's shape (num_experts, top_k); record=True keeps each live
        request's routing per position (RoutingState.segment, for a prefix cache)."""
        return RoutingState(self._impl.num_experts, self._impl.top_k, record)

    def prefix_cache_salt(self, prefix_end, prompt_length):
        """The prefix cache's key extension for the block ending at prefix_end of a request of prompt_length
        tokens: blocks with the same tokens route alike iff their salts are equal (docs/routing.md)."""
        return self._impl.prefix_cache_salt(prefix_end, prompt_length)

    def last_stats(self):
        """Routing outcome of the last forward: counts of kept/rerouted/dropped pairs, fully dropped tokens, and
        expert_load (numpy int32 [E])."""
        return self._impl.last_stats()

    def last_plan(self):
        """The last forward's plan: numpy arrays expert/slot/weight/status [T, top_k] (status 0 kept, 1 rerouted,
        2 dropped), expert_load/expert_capacity [E] and counts."""
        return self._impl.last_plan()

    @property
    def expert_parallel(self):
        """None, or {"rank", "world_size", "plans_locally", "experts"} of an expert-parallel layer."""
        return self._impl.expert_parallel

    def fingerprint(self):
        """Provenance (config hash, weights hash, version, build, kernel, dispatch, device, threads) as JSON."""
        return self._impl.fingerprint()

    def fingerprint_dict(self):
        return _json.loads(self._impl.fingerprint())

    @property
    def hidden(self):
        return self._impl.hidden

    @property
    def num_experts(self):
        return self._impl.num_experts

    @property
    def top_k(self):
        return self._impl.top_k

    @property
    def config(self):
        """A canonical one-line description of the layer's config."""
        return self._impl.config

    @property
    def weights(self):
        return self._impl.weights

    def __repr__(self):
        return "moe.Layer(%s)" % self._impl.config


def _weight_array(t, fp32=False):
    """A weight as numpy: torch float tensors -> float32 arrays; torch bfloat16 -> int16 bit patterns (stored
    bf16) unless fp32 is required; numpy arrays pass through."""
    if t is None:
        return None
    if _is_torch_tensor(t):
        torch = _torch()
        t = t.detach().to("cpu")
        if t.dtype == torch.bfloat16 and not fp32:
            return t.contiguous().view(torch.int16).numpy()
        return t.to(torch.float32).contiguous().numpy()
    return _np.asarray(t)


def _preset_doc(indent=21, width=117):
    """The presets' descriptions as Layer's docstring lists them (one source: MoELayerConfig::preset_description)."""
    lines = []
    for name in preset_names():
        lines += _textwrap.wrap('"%s": %s.' % (name, preset_description(name)), width=width,
                                initial_indent=" " * indent, subsequent_indent=" " * (indent + 2))
    return "\n".join(lines)


if Layer.__doc__:  # None under python -OO
    Layer.__doc__ = Layer.__doc__.replace("{presets}", _preset_doc())

"""The torch twin of moe/model: a Mixtral-style MoE decoder computed the way moe/model computes it.

    h = embed(token)
    per layer:  n = RMSNorm(h);  h += o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n)))
                n = RMSNorm(h);  h += sum_{j<2} w_j * expert_{e_j}(n)       (dropless top-2 of 8, SwiGLU)
    logits = lm_head(RMSNorm(h))

Every choice follows moe/model (moe/model/ops.cc, model.cc, router/topk_router.cc, kernels/cpu/expert_ffn.cc):
  * RMSNorm: y = (x * inv) * w with inv = float(1 / sqrt(sum(x^2) / n + eps)), the mean square in float64.
  * RoPE: Hugging Face Llama/Mixtral "rotate_half" layout (pairs (i, i + head_dim/2) within each head), angle
    position * theta^(-2i/head_dim) computed in float64 (Python's libm, as std::pow/cos/sin in C++) and cos/sin
    rounded to float once; then x_i' = x_i c - x_{i+h} s, x_{i+h}' = x_{i+h} c + x_i s in float.
  * attention: multi-head (num_key_value_heads = num_heads), causal, scores q.k / sqrt(head_dim), softmax.
  * no biases anywhere; lm_head is its own matrix (not tied to the embedding).
  * router: logits = gate(n); softmax over all experts (fp32); the top 2 by probability, exact ties to the lower
    expert id (a stable sort); weights = p_j / (p_0 + p_1). Dropless: every token reaches both experts.
  * experts: w2(silu(w1 n) * w3 n) (w1 = gate_proj, w3 = up_proj, w2 = down_proj).
The same forward is used to train, to evaluate and to write the reference logits.

Training adds a Switch-style load-balancing loss per layer: E * sum_e f_e P_e, where f_e is the share of the
(token, choice) pairs sent to expert e and P_e the mean router probability of e over the tokens (1.0 when the
load is uniform); the training loss is CE + alpha * sum over layers.
"""
import math

import torch
import torch.nn.functional as F


class Shape:
    FIELDS = ("vocab_size", "hidden", "num_layers", "num_heads", "num_experts", "top_k", "expert_ff",
              "max_positions", "rms_eps", "rope_theta")

    def __init__(self, vocab_size, hidden, num_layers, num_heads, num_experts, top_k, expert_ff, max_positions,
                 rms_eps=1e-5, rope_theta=10000.0):
        self.vocab_size, self.hidden, self.num_layers, self.num_heads = vocab_size, hidden, num_layers, num_heads
        self.num_experts, self.top_k, self.expert_ff, self.max_positions = num_experts, top_k, expert_ff, max_positions
        # Stored as the float32 values the C++ side holds (ModelShape's float fields).
        self.rms_eps = float(torch.tensor(rms_eps, dtype=torch.float32))
        self.rope_theta = float(torch.tensor(rope_theta, dtype=torch.float32))
        if hidden % num_heads or (hidden // num_heads) % 2:
            raise ValueError("hidden must split into heads of even size")

    @property
    def head_dim(self):
        return self.hidden // self.num_heads

    def as_dict(self):
        return {k: getattr(self, k) for k in self.FIELDS}

    def num_parameters(self):
        d, v, L, E, ff = self.hidden, self.vocab_size, self.num_layers, self.num_experts, self.expert_ff
        per_layer = 4 * d * d + 2 * d + E * d + E * 3 * d * ff
        return 2 * v * d + L * per_layer + d


def rope_tables(positions, head_dim, theta):
    """(cos, sin) float32 [positions, head_dim/2]: angle = p * theta^(-2i/head_dim) in double, as ops.cc does."""
    half = head_dim // 2
    cos = torch.empty(positions, half, dtype=torch.float64)
    sin = torch.empty(positions, half, dtype=torch.float64)
    inv = [math.pow(float(theta), -2.0 * i / head_dim) for i in range(half)]
    for p in range(positions):
        for i in range(half):
            a = float(p) * inv[i]
            cos[p, i] = math.cos(a)
            sin[p, i] = math.sin(a)
    return cos.to(torch.float32), sin.to(torch.float32)


def rms_norm(x, weight, eps):
    ms = x.to(torch.float64).pow(2).mean(dim=-1, keepdim=True)
    inv = (1.0 / torch.sqrt(ms + eps)).to(torch.float32)
    return (x * inv) * weight


def apply_rope(x, cos, sin):
    """x [B, H, T, hd]; cos, sin [T, hd/2]."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


class MoEDecoder(torch.nn.Module):
    def __init__(self, shape, generator=None):
        super().__init__()
        s = self.shape = shape
        d, ff, E, L = s.hidden, s.expert_ff, s.num_experts, s.num_layers
        P = torch.nn.Parameter
        self.embed = P(torch.empty(s.vocab_size, d))
        self.attn_norm = torch.nn.ParameterList([P(torch.ones(d)) for _ in range(L)])
        self.wq = torch.nn.ParameterList([P(torch.empty(d, d)) for _ in range(L)])
        self.wk = torch.nn.ParameterList([P(torch.empty(d, d)) for _ in range(L)])
        self.wv = torch.nn.ParameterList([P(torch.empty(d, d)) for _ in range(L)])
        self.wo = torch.nn.ParameterList([P(torch.empty(d, d)) for _ in range(L)])
        self.moe_norm = torch.nn.ParameterList([P(torch.ones(d)) for _ in range(L)])
        self.gate = torch.nn.ParameterList([P(torch.empty(E, d)) for _ in range(L)])
        # Experts stacked per layer: w1, w3 [E, ff, d], w2 [E, d, ff].
        self.w1 = torch.nn.ParameterList([P(torch.empty(E, ff, d)) for _ in range(L)])
        self.w3 = torch.nn.ParameterList([P(torch.empty(E, ff, d)) for _ in range(L)])
        self.w2 = torch.nn.ParameterList([P(torch.empty(E, d, ff)) for _ in range(L)])
        self.final_norm = P(torch.ones(d))
        self.lm_head = P(torch.empty(s.vocab_size, d))
        cos, sin = rope_tables(s.max_positions, s.head_dim, s.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        if generator is not None:
            self.init_weights(generator)

    def init_weights(self, g, std=0.02):
        """Normal(0, 0.02) (Mixtral's initializer_range); the residual outputs (o_proj, w2) by 1/sqrt(2 L)."""
        out_std = std / math.sqrt(2 * self.shape.num_layers)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() < 2:
                    continue  # norms stay 1
                sd = out_std if name.startswith(("wo.", "w2.")) else std
                p.copy_(torch.randn(p.shape, generator=g) * sd)

    # -- forward --------------------------------------------------------------------------------------------

    def attention(self, l, n, positions):
        s = self.shape
        B, T, d = n.shape
        H, hd = s.num_heads, s.head_dim
        q = (n @ self.wq[l].t()).view(B, T, H, hd).transpose(1, 2)
        k = (n @ self.wk[l].t()).view(B, T, H, hd).transpose(1, 2)
        v = (n @ self.wv[l].t()).view(B, T, H, hd).transpose(1, 2)
        cos, sin = self.rope_cos[positions], self.rope_sin[positions]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        scale = float(torch.tensor(1.0 / math.sqrt(hd), dtype=torch.float32))
        scores = (q @ k.transpose(-1, -2)) * scale
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        p = torch.softmax(scores, dim=-1)
        o = (p @ v).transpose(1, 2).reshape(B, T, d)
        return o @ self.wo[l].t()

    def route(self, l, x):
        """x [N, d] -> (probs [N, E], experts [N, k], weights [N, k])."""
        logits = x @ self.gate[l].t()
        probs = torch.softmax(logits, dim=-1)
        _, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        experts = order[:, :self.shape.top_k]
        chosen = probs.gather(1, experts)
        weights = chosen / chosen.sum(dim=-1, keepdim=True)
        return probs, experts, weights

    def moe(self, l, x, stats=None):
        """x [N, d] -> (y [N, d], load-balancing loss of this layer)."""
        s = self.shape
        N, d = x.shape
        k, E = s.top_k, s.num_experts
        probs, experts, weights = self.route(l, x)
        flat = experts.reshape(-1)
        wflat = weights.reshape(-1)
        y = torch.zeros_like(x)
        counts = []
        for e in range(E):
            pairs = (flat == e).nonzero().squeeze(1)
            counts.append(pairs.numel())
            if pairs.numel() == 0:
                continue
            tok = torch.div(pairs, k, rounding_mode="floor")
            xe = x.index_select(0, tok)
            h = F.silu(xe @ self.w1[l][e].t()) * (xe @ self.w3[l][e].t())
            ye = h @ self.w2[l][e].t()
            y = y.index_add(0, tok, ye * wflat.index_select(0, pairs).unsqueeze(1))
        f = torch.tensor(counts, dtype=torch.float32) / float(N * k)
        aux = E * (f * probs.mean(dim=0)).sum()
        if stats is not None:
            stats.append(experts.detach())
        return y, aux

    def forward(self, tokens, routing=None):
        """tokens [B, T] (positions 0..T-1) -> (logits [B, T, vocab], summed load-balancing loss).
        routing: optional list that receives each layer's chosen experts [B*T, k] (first choice first)."""
        s = self.shape
        B, T = tokens.shape
        if T > s.max_positions:
            raise ValueError("sequence longer than max_positions")
        positions = torch.arange(T)
        h = self.embed[tokens]
        aux_total = torch.zeros(())
        for l in range(s.num_layers):
            n = rms_norm(h, self.attn_norm[l], s.rms_eps)
            h = h + self.attention(l, n, positions)
            n = rms_norm(h, self.moe_norm[l], s.rms_eps)
            y, aux = self.moe(l, n.reshape(B * T, -1), routing)
            h = h + y.view(B, T, -1)
            aux_total = aux_total + aux
        logits = rms_norm(h, self.final_norm, s.rms_eps) @ self.lm_head.t()
        return logits, aux_total

    # -- Hugging Face Mixtral tensors -----------------------------------------------------------------------

    def hf_tensors(self):
        """[(name, float32 numpy array)] in the order moe/model's save_model writes them."""
        s = self.shape
        out = [("model.embed_tokens.weight", self.embed)]
        for l in range(s.num_layers):
            p = "model.layers.%d." % l
            out += [(p + "input_layernorm.weight", self.attn_norm[l]),
                    (p + "self_attn.q_proj.weight", self.wq[l]),
                    (p + "self_attn.k_proj.weight", self.wk[l]),
                    (p + "self_attn.v_proj.weight", self.wv[l]),
                    (p + "self_attn.o_proj.weight", self.wo[l]),
                    (p + "post_attention_layernorm.weight", self.moe_norm[l]),
                    (p + "block_sparse_moe.gate.weight", self.gate[l])]
            for e in range(s.num_experts):
                q = p + "block_sparse_moe.experts.%d." % e
                out += [(q + "w1.weight", self.w1[l][e]), (q + "w3.weight", self.w3[l][e]),
                        (q + "w2.weight", self.w2[l][e])]
        out += [("model.norm.weight", self.final_norm), ("lm_head.weight", self.lm_head)]
        return [(n, t.detach().contiguous().numpy().astype("<f4")) for n, t in out]

    def load_hf_tensors(self, tensors):
        s = self.shape
        with torch.no_grad():
            def put(param, name):
                a = torch.from_numpy(tensors[name])
                if tuple(a.shape) != tuple(param.shape):
                    raise ValueError("%s: shape %s, expected %s" % (name, tuple(a.shape), tuple(param.shape)))
                param.copy_(a)
            put(self.embed, "model.embed_tokens.weight")
            for l in range(s.num_layers):
                p = "model.layers.%d." % l
                put(self.attn_norm[l], p + "input_layernorm.weight")
                put(self.wq[l], p + "self_attn.q_proj.weight")
                put(self.wk[l], p + "self_attn.k_proj.weight")
                put(self.wv[l], p + "self_attn.v_proj.weight")
                put(self.wo[l], p + "self_attn.o_proj.weight")
                put(self.moe_norm[l], p + "post_attention_layernorm.weight")
                put(self.gate[l], p + "block_sparse_moe.gate.weight")
                for e in range(s.num_experts):
                    q = p + "block_sparse_moe.experts.%d." % e
                    put(self.w1[l][e], q + "w1.weight")
                    put(self.w3[l][e], q + "w3.weight")
                    put(self.w2[l][e], q + "w2.weight")
            put(self.final_norm, "model.norm.weight")
            put(self.lm_head, "lm_head.weight")

"""Plain PyTorch copies of the Hugging Face sparse MoE blocks (transformers' MixtralSparseMoeBlock and
Qwen2MoeSparseMoeBlock, reduced to their forward math and state_dict naming), used as references and as the
blocks to replace. softmax -> top-k -> (renormalise) -> loop over experts -> SwiGLU (+ gated shared expert)."""
import torch
import torch.nn.functional as F
from torch import nn


class MixtralExpert(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.w1 = nn.Linear(d, ff, bias=False)
        self.w2 = nn.Linear(ff, d, bias=False)
        self.w3 = nn.Linear(d, ff, bias=False)

    def forward(self, h):
        return self.w2(F.silu(self.w1(h)) * self.w3(h))


class MixtralSparseMoeBlock(nn.Module):
    def __init__(self, d, ff, num_experts, top_k=2):
        super().__init__()
        self.hidden_dim, self.num_experts, self.top_k = d, num_experts, top_k
        self.gate = nn.Linear(d, num_experts, bias=False)
        self.experts = nn.ModuleList([MixtralExpert(d, ff) for _ in range(num_experts)])

    def forward(self, hidden_states):
        b, s, d = hidden_states.shape
        h = hidden_states.view(-1, d)
        router_logits = self.gate(h)
        weights = F.softmax(router_logits, dim=1, dtype=h.dtype if h.dtype == torch.float64 else torch.float)
        weights, selected = torch.topk(weights, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(h.dtype)
        out = torch.zeros_like(h)
        for e in range(self.num_experts):
            rows, idx = torch.where(selected == e)
            if rows.numel():
                out.index_add_(0, rows, self.experts[e](h[rows]) * weights[rows, idx, None])
        return out.reshape(b, s, d), router_logits


class Qwen2MoeMLP(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.gate_proj = nn.Linear(d, ff, bias=False)
        self.up_proj = nn.Linear(d, ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)

    def forward(self, h):
        return self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Qwen2MoeSparseMoeBlock(nn.Module):
    def __init__(self, d, ff, num_experts, top_k=4, shared_ff=None, norm_topk_prob=False):
        super().__init__()
        self.num_experts, self.top_k, self.norm_topk_prob = num_experts, top_k, norm_topk_prob
        self.gate = nn.Linear(d, num_experts, bias=False)
        self.experts = nn.ModuleList([Qwen2MoeMLP(d, ff) for _ in range(num_experts)])
        self.shared_expert = Qwen2MoeMLP(d, shared_ff or 2 * ff)
        self.shared_expert_gate = nn.Linear(d, 1, bias=False)

    def forward(self, hidden_states):
        b, s, d = hidden_states.shape
        h = hidden_states.view(-1, d)
        router_logits = self.gate(h)
        weights = F.softmax(router_logits, dim=1, dtype=h.dtype if h.dtype == torch.float64 else torch.float)
        weights, selected = torch.topk(weights, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(h.dtype)
        out = torch.zeros_like(h)
        for e in range(self.num_experts):
            rows, idx = torch.where(selected == e)
            if rows.numel():
                out.index_add_(0, rows, self.experts[e](h[rows]) * weights[rows, idx, None])
        out = out + torch.sigmoid(self.shared_expert_gate(h)) * self.shared_expert(h)
        return out.reshape(b, s, d), router_logits


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class TinyMixtralLayer(nn.Module):
    """Pre-norm residual MoE sublayer (attention omitted: the MoE block is what gets swapped)."""

    def __init__(self, d, ff, num_experts):
        super().__init__()
        self.post_attention_layernorm = RMSNorm(d)
        self.block_sparse_moe = MixtralSparseMoeBlock(d, ff, num_experts)

    def forward(self, h):
        moe_out, _ = self.block_sparse_moe(self.post_attention_layernorm(h))
        return h + moe_out


class TinyMixtral(nn.Module):
    def __init__(self, vocab=100, d=64, ff=128, num_experts=8, layers=2):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([TinyMixtralLayer(d, ff, num_experts) for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids):
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h)
        return self.lm_head(self.norm(h))

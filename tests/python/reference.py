"""Float64 numpy reference of the MoE layer: softmax -> top-k -> (renormalise) -> loop over experts -> SwiGLU,
plus the Qwen2-MoE shared expert. The oracle for accuracy tests (rows the plan drops can be excluded)."""
import numpy as np


def silu(v):
    return v / (1.0 + np.exp(-v))


def swiglu(x, w1, w3, w2):
    return (silu(x @ w1.T) * (x @ w3.T)) @ w2.T


def moe_reference(x, router_gate, gate_proj, up_proj, down_proj, top_k, renormalize, keep=None, shared=None,
                  shared_gate=None):
    """x [T, d] -> y [T, d] in float64. keep: optional bool [T, top_k] mask of pairs to include (from a plan).
    shared: (gate_proj, up_proj, down_proj) of a shared expert; shared_gate [1, d] scales it by sigmoid."""
    x = np.asarray(x, dtype=np.float64)
    logits = x @ np.asarray(router_gate, np.float64).T
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    order = np.argsort(-p, axis=1, kind="stable")[:, :top_k]
    w = np.take_along_axis(p, order, axis=1)
    if renormalize:
        w = w / w.sum(axis=1, keepdims=True)
    y = np.zeros_like(x)
    f64 = [lambda m: np.asarray(m, np.float64)] * 1
    for t in range(x.shape[0]):
        for j in range(top_k):
            if keep is not None and not keep[t, j]:
                continue
            e = order[t, j]
            y[t] += w[t, j] * swiglu(x[t:t + 1], f64[0](gate_proj[e]), f64[0](up_proj[e]), f64[0](down_proj[e]))[0]
    if shared is not None:
        s = swiglu(x, *[np.asarray(m, np.float64) for m in shared])
        if shared_gate is not None:
            g = 1.0 / (1.0 + np.exp(-(x @ np.asarray(shared_gate, np.float64).reshape(-1))))
            s = s * g[:, None]
        y += s
    return y, order


def rel_error(y, ref):
    y = np.asarray(y, np.float64)
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))

// A plain float64 forward of the small Mixtral decoder (moe/model, docs/training.md "The model"), written
// from the architecture's definition for the quality tests: it shares no code with moe/model, moe/layer or
// the kernels (only the loaded weights' values), runs one sequence at a time in double, and is dropless.
//   h = embed(token)
//   per layer: h += o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n)))   n = RMSNorm(h)
//              h += sum over the top-2 experts e of w_e * w2_e(silu(w1_e m) * w3_e m)   m = RMSNorm(h)
//   logits = lm_head(RMSNorm(h))
// RMSNorm x / sqrt(mean(x^2) + eps) * w; RoPE in Hugging Face's rotate_half layout (pairs (i, i + d/2) of a
// head, angle position * theta^(-2i/d)); causal softmax attention scaled by 1/sqrt(d); the router's softmax
// over the experts, top-2 by probability (ties to the lower id), the two weights renormalised.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "moe/model/model_weights.h"

namespace moe::quality_test {

// y[o] = sum_i W[o][i] x[i] for a row-major fp32 [out, in] matrix with the given row stride.
inline std::vector<double> matvec(const float* w, int64_t out, int64_t in, int64_t stride,
                                  const std::vector<double>& x) {
  std::vector<double> y(static_cast<size_t>(out), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    const float* row = w + o * stride;
    double s = 0.0;
    for (int64_t i = 0; i < in; ++i) s += static_cast<double>(row[i]) * x[static_cast<size_t>(i)];
    y[static_cast<size_t>(o)] = s;
  }
  return y;
}

inline std::vector<double> matvec(const std::vector<float>& w, int64_t out, int64_t in,
                                  const std::vector<double>& x) {
  return matvec(w.data(), out, in, in, x);
}

inline std::vector<double> matvec(const kernels::MatrixView& m, const std::vector<double>& x) {
  return matvec(static_cast<const float*>(m.data), m.rows, m.cols, m.row_stride, x);
}

inline std::vector<double> rms_norm(const std::vector<double>& x, const std::vector<float>& w, double eps) {
  double ms = 0.0;
  for (double v : x) ms += v * v;
  const double inv = 1.0 / std::sqrt(ms / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * static_cast<double>(w[i]);
  return y;
}

// Rotates every head of `x` (hidden = heads * d) for `position`, rotate_half layout.
inline void rope(std::vector<double>& x, int heads, int d, uint32_t position, double theta) {
  const int half = d / 2;
  for (int h = 0; h < heads; ++h) {
    double* v = x.data() + static_cast<size_t>(h) * d;
    for (int i = 0; i < half; ++i) {
      const double angle = position * std::pow(theta, -2.0 * i / d);
      const double c = std::cos(angle), s = std::sin(angle);
      const double a = v[i], b = v[i + half];
      v[i] = a * c - b * s;
      v[i + half] = b * c + a * s;
    }
  }
}

// The logits [tokens.size()][vocab] of one sequence from position 0, in double.
inline std::vector<std::vector<double>> reference_logits(const model::ModelWeights& w,
                                                         const std::vector<int32_t>& tokens) {
  const model::ModelShape& s = w.shape;
  const int H = s.hidden, heads = s.num_heads, d = s.head_dim(), E = s.num_experts, k = s.top_k;
  const size_t n = tokens.size();
  std::vector<std::vector<double>> h(n);
  for (size_t t = 0; t < n; ++t) {
    const float* e = w.embedding.data() + static_cast<size_t>(tokens[t]) * H;
    h[t].assign(e, e + H);
  }
  for (int l = 0; l < s.num_layers; ++l) {
    const model::BlockWeights& b = w.layers[static_cast<size_t>(l)];
    std::vector<std::vector<double>> q(n), kk(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      const std::vector<double> x = rms_norm(h[t], b.attn_norm, s.rms_eps);
      q[t] = matvec(b.wq, H, H, x);
      kk[t] = matvec(b.wk, H, H, x);
      v[t] = matvec(b.wv, H, H, x);
      rope(q[t], heads, d, static_cast<uint32_t>(t), s.rope_theta);
      rope(kk[t], heads, d, static_cast<uint32_t>(t), s.rope_theta);
    }
    for (size_t t = 0; t < n; ++t) {
      std::vector<double> attn(static_cast<size_t>(H), 0.0);
      for (int hd = 0; hd < heads; ++hd) {
        const size_t off = static_cast<size_t>(hd) * d;
        std::vector<double> score(t + 1);
        double top = -1e300;
        for (size_t j = 0; j <= t; ++j) {
          double dot = 0.0;
          for (int i = 0; i < d; ++i) dot += q[t][off + i] * kk[j][off + i];
          score[j] = dot / std::sqrt(static_cast<double>(d));
          top = std::max(top, score[j]);
        }
        double sum = 0.0;
        for (double& sc : score) sum += (sc = std::exp(sc - top));
        for (size_t j = 0; j <= t; ++j) {
          for (int i = 0; i < d; ++i) attn[off + i] += score[j] / sum * v[j][off + i];
        }
      }
      const std::vector<double> o = matvec(b.wo, H, H, attn);
      for (int i = 0; i < H; ++i) h[t][static_cast<size_t>(i)] += o[static_cast<size_t>(i)];
    }
    const io::LayerWeights& moe = *b.moe;
    for (size_t t = 0; t < n; ++t) {
      const std::vector<double> x = rms_norm(h[t], b.moe_norm, s.rms_eps);
      const std::vector<double> logit = matvec(moe.router_gate(), x);
      const double top = *std::max_element(logit.begin(), logit.end());
      std::vector<double> p(static_cast<size_t>(E));
      double sum = 0.0;
      for (int e = 0; e < E; ++e)
        sum += (p[static_cast<size_t>(e)] = std::exp(logit[static_cast<size_t>(e)] - top));
      for (double& pe : p) pe /= sum;
      std::vector<int> order(static_cast<size_t>(E));
      for (int e = 0; e < E; ++e) order[static_cast<size_t>(e)] = e;
      std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return p[a] > p[c]; });
      double chosen = 0.0;
      for (int j = 0; j < k; ++j) chosen += p[static_cast<size_t>(order[static_cast<size_t>(j)])];
      for (int j = 0; j < k; ++j) {
        const int e = order[static_cast<size_t>(j)];
        const io::ExpertTensors& ex = moe.experts()[static_cast<size_t>(e)];
        const std::vector<double> g = matvec(ex.gate_proj, x);
        const std::vector<double> u = matvec(ex.up_proj, x);
        std::vector<double> a(g.size());
        for (size_t i = 0; i < g.size(); ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
        const std::vector<double> y = matvec(ex.down_proj, a);
        const double weight = p[static_cast<size_t>(e)] / chosen;
        for (int i = 0; i < H; ++i) h[t][static_cast<size_t>(i)] += weight * y[static_cast<size_t>(i)];
      }
    }
  }
  std::vector<std::vector<double>> out(n);
  for (size_t t = 0; t < n; ++t)
    out[t] = matvec(w.lm_head, s.vocab_size, H, rms_norm(h[t], w.final_norm, s.rms_eps));
  return out;
}

// The summed negative log-likelihood of tokens[1..] given their prefixes (one window), in double.
inline double reference_nll(const model::ModelWeights& w, const std::vector<int32_t>& window_and_target) {
  const std::vector<int32_t> inputs(window_and_target.begin(), window_and_target.end() - 1);
  const std::vector<std::vector<double>> logits = reference_logits(w, inputs);
  double nll = 0.0;
  for (size_t t = 0; t < inputs.size(); ++t) {
    const std::vector<double>& z = logits[t];
    const double top = *std::max_element(z.begin(), z.end());
    double sum = 0.0;
    for (double v : z) sum += std::exp(v - top);
    nll += top + std::log(sum) - z[static_cast<size_t>(window_and_target[t + 1])];
  }
  return nll;
}

}  // namespace moe::quality_test

// Combining expert outputs into a token's output row: the one definition every backend and layout uses.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "router/dispatch_plan.h"

namespace moe {

// out[i] = sum_{j < top_k, status[j] != kDropped} weight[j] * rows[j][i], summed in ascending j from 0.0f,
//          then + shared_scale * shared[i] when shared != nullptr. weight == nullptr adds the rows with
//          weight 1 (the layer applied the routing weights to the experts' inputs:
//          MoELayerConfig::weight_on_input).
// rows[j] is the expert output for pair j (ignored when dropped). Every output element is computed with this
// one fixed order, so a row's bits depend only on its inputs: not on where the expert rows live (a local
// buffer, or a receive buffer of an all-to-all) or on which thread runs it. No atomics.
inline void combine_row(int top_k, const PairStatus* status, const float* weight, const float* const* rows,
                        const float* shared, float shared_scale, int64_t hidden, float* out) {
  for (int64_t i = 0; i < hidden; ++i) out[i] = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    if (status[j] == PairStatus::kDropped) continue;
    const float w = weight != nullptr ? weight[j] : 1.0f;
    const float* src = rows[j];
    for (int64_t i = 0; i < hidden; ++i) out[i] += w * src[i];
  }
  if (shared != nullptr) {
    for (int64_t i = 0; i < hidden; ++i) out[i] += shared_scale * shared[i];
  }
}

// Router logits plus the router's bias (gpt-oss): logits[t][e] += bias[e] for num_tokens rows of
// num_experts, in fp32 (row-wise, so every row's bits depend on that row alone). No-op for an empty bias.
inline void add_router_bias(float* logits, int64_t num_tokens, int num_experts, std::span<const float> bias) {
  if (bias.empty()) return;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int e = 0; e < num_experts; ++e) logits[t * num_experts + e] += bias[static_cast<size_t>(e)];
  }
}

// The expert input of a pair under MoELayerConfig::weight_on_input (Llama 4): out[i] = weight * x[i] in fp32.
inline void scale_row(const float* x, float weight, int64_t hidden, float* out) {
  for (int64_t i = 0; i < hidden; ++i) out[i] = weight * x[i];
}

// Qwen2-MoE's shared-expert gate: sigmoid(logit) in fp32.
inline float shared_gate_scale(float logit) {
  return 1.0f / (1.0f + std::exp(-logit));
}

}  // namespace moe

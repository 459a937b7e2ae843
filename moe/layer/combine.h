// Combining expert outputs into a token's output row: the one definition every backend and layout uses.
#pragma once

#include <cmath>
#include <cstdint>

#include "router/dispatch_plan.h"

namespace moe {

// out[i] = sum_{j < top_k, status[j] != kDropped} weight[j] * rows[j][i], summed in ascending j from 0.0f,
//          then + shared_scale * shared[i] when shared != nullptr.
// rows[j] is the expert output for pair j (ignored when dropped). Every output element is computed with this
// one fixed order, so a row's bits depend only on its inputs: not on where the expert rows live (a local
// buffer, or a receive buffer of an all-to-all) or on which thread runs it. No atomics.
inline void combine_row(int top_k, const PairStatus* status, const float* weight, const float* const* rows,
                        const float* shared, float shared_scale, int64_t hidden, float* out) {
  for (int64_t i = 0; i < hidden; ++i) out[i] = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    if (status[j] == PairStatus::kDropped) continue;
    const float w = weight[j];
    const float* src = rows[j];
    for (int64_t i = 0; i < hidden; ++i) out[i] += w * src[i];
  }
  if (shared != nullptr) {
    for (int64_t i = 0; i < hidden; ++i) out[i] += shared_scale * shared[i];
  }
}

// Qwen2-MoE's shared-expert gate: sigmoid(logit) in fp32.
inline float shared_gate_scale(float logit) {
  return 1.0f / (1.0f + std::exp(-logit));
}

}  // namespace moe

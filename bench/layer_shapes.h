// The MoE layer shapes of issue #3's benchmarks, shared by the CPU (layer_bench) and GPU (cuda_moe_bench)
// layer benchmarks so that both measure the same layers.
#pragma once

#include "moe/io/layer_weights.h"

namespace moe::bench {

struct LayerBenchShape {
  const char* name;      // benchmark name component, e.g. "mixtral_like"
  io::LayerShape layer;  // weights
  int top_k;
};

// d 1024, ff 2816, E 8, k 2, no shared expert.
inline LayerBenchShape MixtralLike() {
  io::LayerShape s;
  s.hidden = 1024;
  s.expert_ff = 2816;
  s.num_experts = 8;
  return {"mixtral_like", s, 2};
}

// d 1024, ff 512, E 64, k 6, two shared experts (one fused MLP of 1024).
inline LayerBenchShape DeepSeekLike() {
  io::LayerShape s;
  s.hidden = 1024;
  s.expert_ff = 512;
  s.num_experts = 64;
  s.num_shared_experts = 2;
  s.shared_ff = 1024;
  return {"deepseek_like", s, 6};
}

// Qwen3-30B-A3B's MoE layer at full size: d 2048, ff 768 (moe_intermediate_size), E 128, k 8, no shared
// expert (1.2 GB of bf16 expert weights).
inline LayerBenchShape Qwen3_30bA3b() {
  io::LayerShape s;
  s.hidden = 2048;
  s.expert_ff = 768;
  s.num_experts = 128;
  return {"qwen3_30b_a3b", s, 8};
}

}  // namespace moe::bench

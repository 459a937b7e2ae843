// Small MoE layers and batches shared by the layer tests.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/splitmix64.h"
#include "moe/io/layer_weights.h"
#include "moe/layer/moe_layer.h"
#include "router/token_meta.h"

namespace moe::testing {

// A Mixtral-like layer shape: d hidden, ff expert size, E experts, no shared expert.
inline io::LayerShape SmallShape(int64_t d = 64, int64_t ff = 96, int E = 8) {
  io::LayerShape s;
  s.hidden = d;
  s.expert_ff = ff;
  s.num_experts = E;
  return s;
}

// Small Qwen2-MoE-like shape: one shared expert with its sigmoid gate.
inline io::LayerShape Qwen2LikeShape() {
  io::LayerShape s = SmallShape(96, 64, 8);
  s.num_shared_experts = 1;
  s.shared_ff = 160;
  s.shared_expert_gate = true;
  return s;
}

// Small DeepSeek-like shape: 16 experts, two ungated shared experts (fused into one MLP).
inline io::LayerShape DeepSeekLikeShape() {
  io::LayerShape s = SmallShape(64, 32, 16);
  s.num_shared_experts = 2;
  s.shared_ff = 64;
  return s;
}

inline std::shared_ptr<const io::LayerWeights> RandomWeights(const io::LayerShape& shape,
                                                             kernels::DType storage = kernels::DType::kF32,
                                                             uint64_t seed = 1) {
  return std::make_shared<const io::LayerWeights>(io::random_layer(shape, storage, seed));
}

// A layer config for `shape` with the given preset and top_k.
inline MoELayerConfig SmallConfig(const char* preset, int num_experts, int top_k, int threads = 1) {
  MoELayerConfig c = MoELayerConfig::preset(preset, io::Architecture::kMixtral);
  c.router.num_experts = num_experts;
  c.router.top_k = top_k;
  c.num_threads = threads;
  return c;
}

// Hidden state of one token: a function of (request, position) only, uniform in [-1, 1), with a per-request
// direction added so that a request's tokens prefer similar experts (capacity binds inside a request).
inline void TokenHidden(uint64_t request, uint32_t position, int64_t d, float* out) {
  for (int64_t i = 0; i < d; ++i) {
    const uint64_t h = mix64(mix64(request * 0x100000001b3ull + position) ^ static_cast<uint64_t>(i));
    const uint64_t r = mix64(request ^ (static_cast<uint64_t>(i) << 32));
    const float noise = static_cast<float>(h >> 40) / static_cast<float>(1ull << 23) - 1.0f;
    const float topic = static_cast<float>(r >> 40) / static_cast<float>(1ull << 23) - 1.0f;
    out[i] = noise + 1.5f * topic;
  }
}

struct Batch {
  std::vector<TokenMeta> meta;
  std::vector<float> x;
};

inline Batch MakeBatch(const std::vector<TokenMeta>& meta, int64_t d) {
  Batch b{meta, std::vector<float>(meta.size() * d)};
  for (size_t t = 0; t < meta.size(); ++t) TokenHidden(meta[t].request_id, meta[t].position, d, &b.x[t * d]);
  return b;
}

}  // namespace moe::testing

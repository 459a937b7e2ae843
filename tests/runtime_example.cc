// The C++ API example of docs/runtime.md, compiled and run as a test so the documentation cannot rot.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <span>
#include <vector>

#include "moe/io/layer_weights.h"
#include "moe/layer/moe_layer.h"

int main() {
  // 1. Weights: a seeded random Mixtral-style layer (or io::load_layer from a safetensors checkpoint).
  moe::io::LayerShape shape;
  shape.hidden = 256;
  shape.expert_ff = 512;
  shape.num_experts = 8;
  auto weights = std::make_shared<const moe::io::LayerWeights>(
      moe::io::random_layer(shape, moe::kernels::DType::kBF16, /*seed=*/42));

  // 2. Config: the deterministic preset (stable dispatch + invariant kernels) with Mixtral's router.
  moe::MoELayerConfig config = moe::MoELayerConfig::preset("deterministic", moe::io::Architecture::kMixtral);
  config.num_threads = 2;
  config.max_tokens = 64;
  moe::MoELayer layer(config, weights);

  // 3. A batch: request 7 (3 prompt tokens) and request 9 (1 decode token at position 12).
  const std::vector<moe::TokenMeta> meta = {{7, 0}, {7, 1}, {7, 2}, {9, 12}};
  std::vector<float> x(meta.size() * shape.hidden, 0.5f), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  moe::MoEStats stats;
  layer.forward(x.data(), static_cast<int>(meta.size()), meta, y.data(), nullptr, &stats);

  std::printf("kept %lld, rerouted %lld, dropped %lld of %zu pairs\n", static_cast<long long>(stats.num_kept),
              static_cast<long long>(stats.num_rerouted), static_cast<long long>(stats.num_dropped),
              meta.size() * config.router.top_k);
  std::printf("y[0][0..3] = %.6f %.6f %.6f %.6f\n", y[0], y[1], y[2], y[3]);
  std::printf("fingerprint %s\n", layer.fingerprint().to_json().c_str());

  // 4. The same request alone gives the same bits (the deterministic preset's contract).
  std::vector<float> y_alone(3 * shape.hidden);
  layer.forward(x.data(), 3, std::span(meta.data(), 3), y_alone.data());
  const bool same = std::equal(y_alone.begin(), y_alone.end(), y.begin());
  std::printf("request 7 alone == request 7 in the batch: %s\n", same ? "bitwise equal" : "DIFFERENT");
  return same ? 0 : 1;
}

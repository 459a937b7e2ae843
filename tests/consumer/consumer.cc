// A C++ program using the installed moe package: a random Mixtral-style layer, one forward pass, provenance.
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "moe/io/layer_weights.h"
#include "moe/layer/moe_layer.h"

int main() {
  moe::io::LayerShape shape;
  shape.hidden = 64;
  shape.expert_ff = 96;
  shape.num_experts = 8;
  auto weights = std::make_shared<const moe::io::LayerWeights>(
      moe::io::random_layer(shape, moe::kernels::DType::kBF16, /*seed=*/1));
  moe::MoELayerConfig config = moe::MoELayerConfig::preset("deterministic", moe::io::Architecture::kMixtral);
  moe::MoELayer layer(config, weights);

  const int num_tokens = 16;
  std::vector<float> x(num_tokens * shape.hidden), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(12.9898f * static_cast<float>(i));  // varied rows
  std::vector<moe::TokenMeta> meta(num_tokens);
  for (int t = 0; t < num_tokens; ++t) meta[t] = {static_cast<uint64_t>(t % 2), static_cast<uint32_t>(t / 2)};
  moe::MoEStats stats;
  layer.forward(x.data(), num_tokens, meta, y.data(), nullptr, &stats);
  double sum = 0;
  for (float v : y) sum += v;
  std::printf("consumer_cpp: y checksum %.6f, kept %lld, dropped %lld\n%s\n", sum,
              static_cast<long long>(stats.num_kept), static_cast<long long>(stats.num_dropped),
              layer.fingerprint().to_json().c_str());
  return std::isfinite(sum) && stats.num_kept + stats.num_rerouted + stats.num_dropped == 2 * num_tokens ? 0
                                                                                                         : 1;
}

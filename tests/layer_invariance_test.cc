// Bit equality of the MoE layer's output under the deterministic preset: a request alone vs co-batched with
// strangers in shuffled order, batch-of-1 vs slices of batch-N, 1 vs 2 threads, repeated runs. And the
// counter-check: greedy dispatch changes a probe's bits under capacity pressure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "tests/support/layer_fixtures.h"
#include "tests/support/layer_probe.h"

namespace moe {
namespace {

using testing::BitEqual;
using testing::CoBatch;
using testing::Forward;
using testing::MakeBatch;
using testing::Mixes;
using testing::RandomWeights;

constexpr int64_t kHidden = 64;

TEST(LayerInvariance, DeterministicProbeIgnoresStrangersOrderAndThreads) {
  auto weights = RandomWeights(testing::SmallShape(kHidden, 96, 8), kernels::DType::kF32, 21);
  MoELayerConfig config = testing::SmallConfig("deterministic", 8, 2, 1);
  config.policy.capacity_factor = 1.0;
  MoELayer one_thread(config, weights);
  config.num_threads = 2;
  MoELayer two_threads(config, weights);
  const Mixes same_threads = CoBatch(one_thread, one_thread, 300, 1);
  EXPECT_EQ(same_threads.changed, 0);
  EXPECT_GT(same_threads.probe_drops_alone, 0) << "capacity must bind for the property to mean anything";
  EXPECT_EQ(CoBatch(one_thread, two_threads, 200, 2).changed, 0);
}

TEST(LayerInvariance, Bf16WeightsAndSharedExpertsToo) {
  io::LayerShape shape = testing::SmallShape(kHidden, 64, 8);
  shape.num_shared_experts = 1;
  shape.shared_ff = 96;
  shape.shared_expert_gate = true;
  auto weights = RandomWeights(shape, kernels::DType::kBF16, 22);
  MoELayerConfig config = testing::SmallConfig("deterministic", 8, 2, 2);
  config.policy.capacity_factor = 1.0;
  config.policy.overflow = Overflow::kReroute;
  MoELayer layer(config, weights);
  EXPECT_EQ(CoBatch(layer, layer, 150, 3).changed, 0);
}

TEST(LayerInvariance, CausalScopeIsInvariantToo) {
  auto weights = RandomWeights(testing::SmallShape(kHidden, 96, 8), kernels::DType::kF32, 23);
  MoELayerConfig config = testing::SmallConfig("deterministic", 8, 2, 2);
  config.policy.scope = CapacityScope::kCausal;
  config.policy.capacity_factor = 1.0;
  MoELayer layer(config, weights);
  const Mixes m = CoBatch(layer, layer, 150, 4);
  EXPECT_EQ(m.changed, 0);
  EXPECT_GT(m.probe_drops_alone, 0);
}

TEST(LayerInvariance, BatchOfOneEqualsSliceOfBatchN) {
  auto weights = RandomWeights(testing::SmallShape(kHidden, 96, 8), kernels::DType::kF32, 24);
  MoELayerConfig config = testing::SmallConfig("deterministic", 8, 2, 2);
  config.max_tokens = 512;
  MoELayer layer(config, weights);
  // N single-token requests: each row is its own request, so every slice is the same computation.
  for (int n : {1, 2, 7, 64, 255, 512}) {
    std::vector<TokenMeta> meta;
    for (int i = 0; i < n; ++i) meta.push_back({static_cast<uint64_t>(i * 7919 % 100003), 0});
    const testing::Batch big = MakeBatch(meta, kHidden);
    const std::vector<float> y = Forward(layer, big);
    for (int i = 0; i < n; i += std::max(1, n / 9)) {
      const testing::Batch one = MakeBatch({meta[i]}, kHidden);
      const std::vector<float> y1 = Forward(layer, one);
      ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + i * kHidden, kHidden * sizeof(float)))
          << "row " << i << " of batch " << n;
    }
  }
}

TEST(LayerInvariance, RepeatedRunsAreBitIdentical) {
  auto weights = RandomWeights(testing::SmallShape(kHidden, 96, 8), kernels::DType::kF32, 25);
  MoELayer layer(testing::SmallConfig("deterministic", 8, 2, 2), weights);
  std::vector<TokenMeta> meta;
  for (uint32_t i = 0; i < 300; ++i) meta.push_back({i % 11, i / 11});
  const testing::Batch b = MakeBatch(meta, kHidden);
  const std::vector<float> first = Forward(layer, b);
  for (int r = 0; r < 5; ++r) EXPECT_TRUE(BitEqual(Forward(layer, b), first)) << "run " << r;
}

TEST(LayerInvariance, GreedyDispatchChangesTheProbeUnderCapacityPressure) {
  auto weights = RandomWeights(testing::SmallShape(kHidden, 96, 8), kernels::DType::kF32, 26);
  // Greedy dispatch with invariant kernels: every change comes from capacity competition.
  MoELayerConfig config = testing::SmallConfig("deterministic", 8, 2, 1);
  config.policy = DispatchPolicy::mode("greedy");
  config.policy.capacity_factor = 1.0;
  MoELayer layer(config, weights);
  const Mixes m = CoBatch(layer, layer, 200, 5);
  EXPECT_GT(m.changed, 20) << "greedy dispatch should let strangers change the probe's output";
}

}  // namespace
}  // namespace moe

// MoE layer behaviour: errors, statistics, fingerprint, allocation-free forward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/io/io_error.h"
#include "tests/support/allocation_counter.h"
#include "tests/support/expect_invalid.h"
#include "tests/support/layer_fixtures.h"

namespace moe {
namespace {

using testing::MakeBatch;
using testing::RandomWeights;

using moe::testing::ExpectInvalid;

TEST(Layer, RejectsConfigsThatDoNotFitTheWeights) {
  auto weights = RandomWeights(testing::SmallShape(32, 48, 8));
  ExpectInvalid([&] { MoELayer(testing::SmallConfig("deterministic", 16, 2), weights); },
                "the router has 16 experts but the weights have 8");
  MoELayerConfig c = testing::SmallConfig("deterministic", 8, 2);
  c.num_threads = 0;
  ExpectInvalid([&] { MoELayer(c, weights); }, "num_threads must be >= 1");
  ExpectInvalid([] { MoELayerConfig::preset("fastest", io::Architecture::kMixtral); },
                "unknown layer preset");
}

// The copies a layer makes of its experts' weights - the quantized kernels' panels, bf16 compute's bf16 copy
// - are checked against the memory the process may take before any is allocated: refused with the numbers.
TEST(Layer, PreparedWeightsThatDoNotFitTheMemoryAreRefused) {
  const io::LayerShape shape = testing::SmallShape(256, 256, 8);
  const auto q8 = std::make_shared<const io::LayerWeights>(io::random_layer(shape, kernels::DType::kQ8_0, 3));
  const auto f32 = RandomWeights(shape);
  const uint64_t q8_bytes = q8->expert_matrix_bytes();  // 8 experts x 3 matrices of 256 x 256 in Q8_0
  MoELayerConfig bf16c = testing::SmallConfig("deterministic", 8, 2);
  bf16c.compute = kernels::ComputePrecision::kBF16;
  ::setenv("MOE_MEMORY_LIMIT_BYTES", std::to_string(q8_bytes - 1).c_str(), 1);
  std::string q8_msg, bf16_msg;
  try {
    MoELayer(testing::SmallConfig("deterministic", 8, 2), q8);
  } catch (const io::OutOfMemory& e) {
    q8_msg = e.what();
  }
  try {
    MoELayer(bf16c, f32);  // 2 bytes an element: 8 x 3 x 256 x 256 x 2 bytes
  } catch (const io::OutOfMemory& e) {
    bf16_msg = e.what();
  }
  // fp32 compute on fp32 weights copies nothing.
  EXPECT_NO_THROW(MoELayer(testing::SmallConfig("deterministic", 8, 2), f32));
  ::unsetenv("MOE_MEMORY_LIMIT_BYTES");
  EXPECT_NE(q8_msg.find("the prepared expert weights"), std::string::npos) << q8_msg;
  EXPECT_NE(q8_msg.find(std::to_string(q8_bytes) + " bytes)"), std::string::npos) << q8_msg;
  EXPECT_NE(bf16_msg.find(std::to_string(8 * 3 * 256 * 256 * 2) + " bytes)"), std::string::npos) << bf16_msg;
  EXPECT_NO_THROW(MoELayer(testing::SmallConfig("deterministic", 8, 2), q8));
}

TEST(Layer, RejectsBadInputWithoutTouchingOutputOrState) {
  auto weights = RandomWeights(testing::SmallShape(32, 48, 8));
  MoELayerConfig c = testing::SmallConfig("deterministic", 8, 2);
  c.policy.scope = CapacityScope::kCausal;
  MoELayer layer(c, weights);
  std::vector<TokenMeta> meta = {{1, 0}, {1, 1}, {2, 0}};
  testing::Batch b = MakeBatch(meta, 32);
  std::vector<float> y(b.x.size(), 7.0f);
  RoutingState state(8);
  ExpectInvalid([&] { layer.forward(b.x.data(), 2, meta, y.data(), &state); },
                "token metadata has 3 rows but x has 2");
  b.x[2 * 32 + 5] = std::numeric_limits<float>::quiet_NaN();  // row 2 -> every gate logit NaN
  ExpectInvalid([&] { layer.forward(b.x.data(), 3, meta, y.data(), &state); },
                "token row 2 has no finite logit");
  for (float v : y) ASSERT_EQ(v, 7.0f);
  EXPECT_EQ(state.num_requests(), 0u);
  ExpectInvalid([&] { layer.forward(nullptr, 3, meta, y.data()); }, "must not be null");
  ExpectInvalid([&] { layer.forward(b.x.data(), 3, meta, b.x.data()); }, "must not overlap");
}

TEST(Layer, ReportsStatsAndPlan) {
  auto weights = RandomWeights(testing::SmallShape(32, 48, 8));
  MoELayerConfig c = testing::SmallConfig("greedy", 8, 2);
  c.policy.capacity_factor = 0.5;
  MoELayer layer(c, weights);
  std::vector<TokenMeta> meta;
  for (uint32_t i = 0; i < 64; ++i) meta.push_back({3, i});
  const testing::Batch b = MakeBatch(meta, 32);
  std::vector<float> y(b.x.size());
  MoEStats stats;
  layer.forward(b.x.data(), 64, meta, y.data(), nullptr, &stats);
  EXPECT_EQ(stats.num_tokens, 64);
  EXPECT_EQ(stats.num_kept + stats.num_rerouted + stats.num_dropped, 128);
  EXPECT_GT(stats.num_dropped, 0);
  int64_t load = 0;
  for (int32_t l : stats.expert_load) load += l;
  EXPECT_EQ(load, stats.num_kept + stats.num_rerouted);
  // A fully dropped token gets a zero output (no shared expert here).
  for (int t = 0; t < 64; ++t) {
    bool all_dropped = true;
    for (int j = 0; j < 2; ++j)
      all_dropped &= layer.last_plan().pair_status[t * 2 + j] == PairStatus::kDropped;
    if (!all_dropped) continue;
    for (int i = 0; i < 32; ++i) ASSERT_EQ(y[t * 32 + i], 0.0f);
  }
}

TEST(Layer, FingerprintNamesEverything) {
  auto weights = RandomWeights(testing::SmallShape(32, 48, 8));
  MoELayer a(testing::SmallConfig("deterministic", 8, 2, 2), weights);
  MoELayer b(testing::SmallConfig("greedy", 8, 2, 2), weights);
  const Fingerprint fa = a.fingerprint(), fb = b.fingerprint();
  EXPECT_EQ(fa.weights_hash, weights->content_hash());
  EXPECT_NE(fa.config_hash, fb.config_hash);
  EXPECT_EQ(fa.kernel, "invariant (gate invariant)");
  EXPECT_EQ(fa.dispatch, "prefix/request/drop");
  EXPECT_EQ(fb.dispatch, "batch/arrival/drop");
  EXPECT_EQ(fa.num_threads, 2);
  const std::string json = fa.to_json();
  for (const char* key :
       {"config_hash", "weights_hash", "version", "build", "kernel", "dispatch", "device"}) {
    EXPECT_NE(json.find(key), std::string::npos) << key;
  }
  EXPECT_NE(fa.build.find("-ffp-contract=off"), std::string::npos) << fa.build;
}

TEST(Layer, ForwardAllocatesNothingAfterWarmUp) {
  io::LayerShape shape = testing::SmallShape(64, 96, 8);
  shape.num_shared_experts = 1;
  shape.shared_ff = 64;
  shape.shared_expert_gate = true;
  auto weights = RandomWeights(shape);
  // bf16 compute too (the invariant kind: its bf16 inputs live in the layer's scratch).
  for (kernels::ComputePrecision compute :
       {kernels::ComputePrecision::kF32, kernels::ComputePrecision::kBF16}) {
    const char* preset = "deterministic";
    for (int threads : {1, 2}) {
      MoELayerConfig c = testing::SmallConfig(preset, 8, 2, threads);
      c.compute = compute;
      c.max_tokens = 200;
      c.policy.overflow = Overflow::kReroute;
      MoELayer layer(c, weights);
      std::vector<TokenMeta> meta;
      for (uint32_t i = 0; i < 200; ++i) meta.push_back({i % 5, i / 5});
      const testing::Batch b = MakeBatch(meta, 64);
      std::vector<float> y(b.x.size());
      MoEStats stats;
      layer.forward(b.x.data(), 200, meta, y.data(), nullptr, &stats);  // warm-up
      const long before = moe::testing::allocation_count();
      for (int r = 0; r < 3; ++r) {
        const int rows = 150 + r;
        layer.forward(b.x.data(), rows, std::span<const TokenMeta>(meta.data(), rows), y.data(), nullptr,
                      &stats);
      }
      EXPECT_EQ(moe::testing::allocation_count() - before, 0)
          << preset << " compute " << kernels::to_string(compute) << " threads " << threads;
    }
  }
}

TEST(Layer, LargerBatchThanReservedGrowsTheWorkspace) {
  auto weights = RandomWeights(testing::SmallShape(32, 48, 8));
  MoELayerConfig c = testing::SmallConfig("deterministic", 8, 2);
  c.max_tokens = 4;
  MoELayer layer(c, weights);
  const size_t before = layer.workspace_bytes();
  std::vector<TokenMeta> meta;
  for (uint32_t i = 0; i < 40; ++i) meta.push_back({1, i});
  const testing::Batch b = MakeBatch(meta, 32);
  std::vector<float> y(b.x.size());
  layer.forward(b.x.data(), 40, meta, y.data());
  EXPECT_GT(layer.workspace_bytes(), before);
}

}  // namespace
}  // namespace moe

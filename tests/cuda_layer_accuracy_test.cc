// CudaMoELayer against the float64 reference of its own plan (relative error), its plan against the CPU
// MoELayer's (integers equal), and its error behaviour (the CPU layer's messages; y and causal state
// untouched on a throw). Needs a GPU; skips naming the reason otherwise.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "moe/cuda/cuda_moe_layer.h"
#include "tests/cuda_gpu_test_util.h"
#include "tests/support/layer_fixtures.h"
#include "tests/support/layer_reference.h"

namespace moe {
namespace {

using testing::MakeBatch;
using testing::RandomWeights;

struct Case {
  const char* name;
  io::LayerShape shape;
  kernels::DType storage;
  const char* preset;
  kernels::Activation activation;
  CapacityScope scope;
};

class CudaLayerAccuracy : public ::testing::TestWithParam<Case> {};

TEST_P(CudaLayerAccuracy, MatchesFloat64ReferenceAndTheCpuPlan) {
  MOE_REQUIRE_GPU();
  const Case c = GetParam();
  MoELayerConfig config = testing::SmallConfig(c.preset, c.shape.num_experts, 2, 1);
  config.activation = c.activation;
  config.policy.scope = c.scope;
  config.policy.capacity_factor = 1.0;  // capacity binds: drops must match too
  auto weights = RandomWeights(c.shape, c.storage, 3);
  CudaMoELayer gpu(config, weights);
  MoELayer cpu(config, weights);
  CausalRoutingState gpu_state(c.shape.num_experts), cpu_state(c.shape.num_experts);
  // Two calls, so causal scope carries state across them.
  for (int call = 0; call < 2; ++call) {
    std::vector<TokenMeta> meta;
    for (uint32_t i = 0; i < 57; ++i) meta.push_back({i % 3, call * 19 + i / 3});
    const testing::Batch b = MakeBatch(meta, c.shape.hidden);
    const int T = static_cast<int>(meta.size());
    std::vector<float> y(b.x.size()), y_cpu(b.x.size());
    MoEStats stats;
    gpu.forward(b.x.data(), T, meta, y.data(), &gpu_state, &stats);
    cpu.forward(b.x.data(), T, meta, y_cpu.data(), &cpu_state);
    const DispatchPlan plan = gpu.last_plan();
    const DispatchPlan& want = cpu.last_plan();
    EXPECT_EQ(plan.pair_expert, want.pair_expert) << c.name;
    EXPECT_EQ(plan.pair_slot, want.pair_slot) << c.name;
    EXPECT_EQ(plan.pair_status, want.pair_status) << c.name;
    EXPECT_EQ(plan.expert_offsets, want.expert_offsets) << c.name;
    EXPECT_EQ(stats.num_dropped, want.num_dropped) << c.name;
    EXPECT_EQ(stats.expert_load, want.expert_load) << c.name;
    const double err = testing::MaxRowRelativeError(
        y, testing::Reference(*weights, config.activation, plan, b.x, T), T, c.shape.hidden);
    EXPECT_LE(err, 1e-5) << c.name;
    std::printf("[ info ] %s call %d: max row relative error %.3g\n", c.name, call, err);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layer, CudaLayerAccuracy,
    ::testing::Values(Case{"f32 invariant", testing::SmallShape(128, 160), kernels::DType::kF32,
                           "deterministic", kernels::Activation::kSwiGLU, CapacityScope::kRequest},
                      Case{"f32 fast", testing::SmallShape(128, 160), kernels::DType::kF32, "greedy",
                           kernels::Activation::kSwiGLU, CapacityScope::kBatch},
                      Case{"bf16 invariant causal", testing::SmallShape(128, 160), kernels::DType::kBF16,
                           "deterministic", kernels::Activation::kSwiGLU, CapacityScope::kCausal},
                      Case{"gelu invariant", testing::SmallShape(64, 128), kernels::DType::kF32,
                           "deterministic", kernels::Activation::kGELU, CapacityScope::kRequest},
                      Case{"gelu fast", testing::SmallShape(64, 128), kernels::DType::kF32, "greedy",
                           kernels::Activation::kGELU, CapacityScope::kBatch},
                      Case{"qwen2 shared + gate invariant", testing::Qwen2LikeShape(), kernels::DType::kF32,
                           "deterministic", kernels::Activation::kSwiGLU, CapacityScope::kRequest},
                      Case{"qwen2 shared + gate fast", testing::Qwen2LikeShape(), kernels::DType::kF32,
                           "greedy", kernels::Activation::kSwiGLU, CapacityScope::kBatch},
                      Case{"deepseek shared invariant", testing::DeepSeekLikeShape(), kernels::DType::kF32,
                           "deterministic", kernels::Activation::kSwiGLU, CapacityScope::kRequest}));

TEST(CudaLayerErrors, NanRowIsNamedAndNothingIsWritten) {
  MOE_REQUIRE_GPU();
  auto weights = RandomWeights(testing::SmallShape(64, 96), kernels::DType::kF32, 5);
  MoELayerConfig config = testing::SmallConfig("deterministic", 8, 2);
  config.policy.scope = CapacityScope::kCausal;
  CudaMoELayer layer(config, weights);
  std::vector<TokenMeta> meta;
  for (uint32_t i = 0; i < 10; ++i) meta.push_back({7, i});
  testing::Batch b = MakeBatch(meta, 64);
  b.x[6 * 64 + 3] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> y(b.x.size(), 42.0f);
  CausalRoutingState state(8);
  try {
    layer.forward(b.x.data(), 10, meta, y.data(), &state);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("token row 6"), std::string::npos) << e.what();
  }
  for (float v : y) ASSERT_EQ(v, 42.0f);
  EXPECT_EQ(state.find(7), nullptr);
}

TEST(CudaLayerErrors, PlannerErrorsUseTheCpuWording) {
  MOE_REQUIRE_GPU();
  auto weights = RandomWeights(testing::SmallShape(64, 96), kernels::DType::kF32, 6);
  CudaMoELayer layer(testing::SmallConfig("deterministic", 8, 2), weights);
  const std::vector<TokenMeta> meta = {{1, 0}, {1, 1}, {1, 0}};
  const testing::Batch b = MakeBatch(meta, 64);
  std::vector<float> y(b.x.size());
  try {
    layer.forward(b.x.data(), 3, meta, y.data());
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rows 0 and 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(layer.forward(b.x.data(), 3, std::span<const TokenMeta>(meta).first(2), y.data()),
               std::invalid_argument);
  // The layer stays usable after an error.
  const std::vector<TokenMeta> ok = {{1, 0}, {1, 1}, {2, 0}};
  const testing::Batch good = MakeBatch(ok, 64);
  EXPECT_NO_THROW(layer.forward(good.x.data(), 3, ok, y.data()));
}

TEST(CudaLayerErrors, GrowsBeyondMaxTokensOnTheHostPathOnly) {
  MOE_REQUIRE_GPU();
  auto weights = RandomWeights(testing::SmallShape(64, 96), kernels::DType::kF32, 7);
  MoELayerConfig config = testing::SmallConfig("deterministic", 8, 2);
  config.max_tokens = 4;
  CudaMoELayer layer(config, weights);
  std::vector<TokenMeta> meta;
  for (uint32_t i = 0; i < 40; ++i) meta.push_back({i, 0});
  const testing::Batch b = MakeBatch(meta, 64);
  std::vector<float> y(b.x.size());
  EXPECT_NO_THROW(layer.forward(b.x.data(), 40, meta, y.data()));
  EXPECT_THROW(layer.forward_device(nullptr, 41, nullptr, nullptr, layer.stream()), std::invalid_argument);
}

}  // namespace
}  // namespace moe

// Bit equality of CudaMoELayer's output under the deterministic preset (invariant GPU kernels + stable
// dispatch): a probe alone vs co-batched with strangers in shuffled order, batch-of-1 vs slices of batch-N,
// repeated runs, a CUDA-graph replay of forward_device() vs a direct call; and the counter-check that greedy
// dispatch changes a probe's bits. Needs a GPU; skips naming the reason otherwise.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "base/cuda/check.h"
#include "base/cuda/device_buffer.h"
#include "moe/cuda/cuda_moe_layer.h"
#include "tests/cuda_gpu_test_util.h"
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

TEST(CudaLayerInvariance, DeterministicProbeIgnoresStrangersAndOrder) {
  MOE_REQUIRE_GPU();
  auto weights = RandomWeights(testing::SmallShape(kHidden, 96, 8), kernels::DType::kF32, 21);
  MoELayerConfig config = testing::SmallConfig("deterministic", 8, 2);
  config.policy.capacity_factor = 1.0;
  CudaMoELayer layer(config, weights);
  const Mixes m = CoBatch(layer, layer, 200, 1);
  EXPECT_EQ(m.changed, 0);
  EXPECT_GT(m.probe_drops_alone, 0) << "capacity must bind for the property to mean anything";
}

TEST(CudaLayerInvariance, Bf16SharedExpertAndCausalScopeToo) {
  MOE_REQUIRE_GPU();
  io::LayerShape shape = testing::SmallShape(kHidden, 64, 8);
  shape.num_shared_experts = 1;
  shape.shared_ff = 96;
  shape.shared_expert_gate = true;
  auto weights = RandomWeights(shape, kernels::DType::kBF16, 22);
  MoELayerConfig config = testing::SmallConfig("deterministic", 8, 2);
  config.policy.capacity_factor = 1.0;
  config.policy.overflow = Overflow::kReroute;
  CudaMoELayer layer(config, weights);
  EXPECT_EQ(CoBatch(layer, layer, 100, 3).changed, 0);
  config.policy.scope = CapacityScope::kCausal;
  CudaMoELayer causal(config, weights);
  EXPECT_EQ(CoBatch(causal, causal, 100, 4).changed, 0);
}

TEST(CudaLayerInvariance, BatchOfOneEqualsSliceOfBatchN) {
  MOE_REQUIRE_GPU();
  auto weights = RandomWeights(testing::SmallShape(kHidden, 96, 8), kernels::DType::kF32, 24);
  MoELayerConfig config = testing::SmallConfig("deterministic", 8, 2);
  config.max_tokens = 512;
  CudaMoELayer layer(config, weights);
  for (int n : {1, 2, 7, 64, 255, 512}) {
    std::vector<TokenMeta> meta;
    for (int i = 0; i < n; ++i) meta.push_back({static_cast<uint64_t>(i * 7919 % 100003), 0});
    const testing::Batch big = MakeBatch(meta, kHidden);
    const std::vector<float> y = Forward(layer, big);
    for (int i = 0; i < n; i += std::max(1, n / 9)) {
      const std::vector<float> y1 = Forward(layer, MakeBatch({meta[i]}, kHidden));
      ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + i * kHidden, kHidden * sizeof(float)))
          << "row " << i << " of batch " << n;
    }
  }
}

TEST(CudaLayerInvariance, RepeatedRunsAndGraphReplayAreBitIdentical) {
  MOE_REQUIRE_GPU();
  auto weights = RandomWeights(testing::SmallShape(kHidden, 96, 8), kernels::DType::kF32, 25);
  MoELayerConfig config = testing::SmallConfig("deterministic", 8, 2);
  config.max_tokens = 300;
  CudaMoELayer layer(config, weights);
  std::vector<TokenMeta> meta;
  for (uint32_t i = 0; i < 300; ++i) meta.push_back({i % 11, i / 11});
  const testing::Batch b = MakeBatch(meta, kHidden);
  const std::vector<float> first = Forward(layer, b);
  for (int r = 0; r < 5; ++r) EXPECT_TRUE(BitEqual(Forward(layer, b), first)) << "run " << r;

  // forward_device() captured in a CUDA graph and replayed gives the same bits.
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cuda::DeviceBuffer<float> x(b.x.size()), y(b.x.size());
  cuda::DeviceBuffer<TokenMeta> m(meta.size());
  x.upload(b.x);
  m.upload(meta);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  layer.forward_device(x.data(), 300, m.data(), y.data(), s);
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int r = 0; r < 3; ++r) {
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    layer.check_device_errors(s);
    EXPECT_TRUE(BitEqual(y.download(), first)) << "replay " << r;
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST(CudaLayerInvariance, GreedyDispatchChangesTheProbeUnderCapacityPressure) {
  MOE_REQUIRE_GPU();
  auto weights = RandomWeights(testing::SmallShape(kHidden, 96, 8), kernels::DType::kF32, 26);
  MoELayerConfig config = testing::SmallConfig("deterministic", 8, 2);
  config.policy = DispatchPolicy::mode("greedy");
  config.policy.capacity_factor = 1.0;
  CudaMoELayer layer(config, weights);
  EXPECT_GT(CoBatch(layer, layer, 200, 5).changed, 20);
}

}  // namespace
}  // namespace moe

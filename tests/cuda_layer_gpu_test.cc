// What only the CUDA layer has, on a GPU: forward_device() captured in a CUDA graph and replayed gives the
// bits of a direct call; data errors found on the device are reported in the CPU layer's words with y and the
// causal state untouched; the device path refuses to grow its workspace. (Accuracy and invariance of
// CudaMoELayer on the shared table of cases: tests/layer_cases_test.cc, backend "cuda".) Skips naming the
// reason without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
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
using testing::Forward;
using testing::MakeBatch;
using testing::RandomWeights;

constexpr int64_t kHidden = 64;

TEST(CudaLayerDevice, GraphReplayEqualsADirectCall) {
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
  RoutingState state(8);
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

// The GPU top-k gating kernel against TopKRouter: identical experts, weights and top-1 scores, bit for bit
// (both run router/rules/topk_rule.h, whose exponential is its own exp_f, not libm's or CUDA's expf).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "base/cuda/check.h"
#include "router/cuda/topk.h"
#include "router/topk_router.h"
#include "tests/cuda_gpu_test_util.h"

namespace moe::cuda {
namespace {

// Distance in units in the last place between two finite floats of the same sign.
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = std::numeric_limits<int32_t>::min() - ia;
  if (ib < 0) ib = std::numeric_limits<int32_t>::min() - ib;
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

std::vector<float> RandomLogits(std::mt19937_64& rng, int T, int E, double non_finite) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  std::vector<float> logits(static_cast<size_t>(T) * E);
  for (auto& x : logits) {
    x = u(rng) < non_finite ? specials[rng() % 3] : normal(rng);
    if (u(rng) < 0.05) x = 1.0f;  // exact ties
  }
  for (int t = 0; t < T; ++t) logits[static_cast<size_t>(t) * E + rng() % E] = normal(rng);  // >= 1 finite
  return logits;
}

void CompareWithCpu(const RouterConfig& config, int num_ranked, const std::vector<float>& logits, int T) {
  TopKRouter cpu(config, num_ranked);
  TokenRoutes want, got;
  cpu.route(logits.data(), T, want);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  topk_route_from_host(config, num_ranked, logits.data(), T, got, stream);
  CUDA_CHECK(cudaStreamDestroy(stream));
  ASSERT_EQ(want.num_ranked, got.num_ranked);
  EXPECT_EQ(want.experts, got.experts);
  int64_t equal = 0, worst = 0;
  for (size_t i = 0; i < want.weights.size(); ++i) {
    if (want.weights[i] == got.weights[i]) ++equal;
    worst = std::max(worst, UlpDistance(want.weights[i], got.weights[i]));
  }
  for (size_t t = 0; t < want.top1_score.size(); ++t) {
    worst = std::max(worst, UlpDistance(want.top1_score[t], got.top1_score[t]));
  }
  EXPECT_EQ(worst, 0) << "weights/top-1 scores differ from the CPU's (worst " << worst << " ulp)";
  EXPECT_EQ(equal, static_cast<int64_t>(want.weights.size())) << "weights not bitwise equal to the CPU's";
}

TEST(CudaTopKGpu, PresetsMatchTheCpuRouter) {
  MOE_REQUIRE_GPU();
  std::mt19937_64 rng(1);
  for (const std::string& name : RouterConfig::preset_names()) {
    RouterConfig config = RouterConfig::preset(name);
    const int T = 777;
    for (int extra : {0, 2}) {
      SCOPED_TRACE(name + " extra ranks " + std::to_string(extra));
      CompareWithCpu(config, config.top_k + extra, RandomLogits(rng, T, config.num_experts, 0.02), T);
    }
  }
}

TEST(CudaTopKGpu, GroupLimitBiasAndScaling) {
  MOE_REQUIRE_GPU();
  std::mt19937_64 rng(2);
  RouterConfig config;
  config.num_experts = 64;
  config.top_k = 6;
  config.scoring = Scoring::kSigmoid;
  config.num_groups = 8;
  config.topk_groups = 3;
  config.scaling_factor = 2.5f;
  config.selection_bias.resize(64);
  for (auto& b : config.selection_bias) b = 0.01f * static_cast<float>(rng() % 7);
  CompareWithCpu(config, 9, RandomLogits(rng, 1000, 64, 0.1), 1000);
  config.scoring = Scoring::kSoftmax;
  config.renormalize = false;
  CompareWithCpu(config, 6, RandomLogits(rng, 1000, 64, 0.3), 1000);
}

TEST(CudaTopKGpu, RowWithoutFiniteLogitIsAnError) {
  MOE_REQUIRE_GPU();
  RouterConfig config;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> logits(3 * 8, 0.5f);
  for (int e = 0; e < 8; ++e) logits[8 + e] = nan;
  TokenRoutes out;
  try {
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    topk_route_from_host(config, 0, logits.data(), 3, out, stream);
    FAIL() << "expected a throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("row 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moe::cuda

// Accuracy of the GPU MoE expert path (gather -> SwiGLU experts -> combine) against a float64 reference, for
// both kernel kinds and both weight types. Relative error = max |y - ref| / max |ref|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "tests/cuda_ffn_test_util.h"
#include "tests/cuda_gpu_test_util.h"

namespace moe::cuda {
namespace {

using testing::Kind;

double RelativeError(const std::vector<float>& y, const std::vector<double>& ref) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(y[i]) - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return scale > 0 ? err / scale : err;
}

struct Case {
  int E, k, hidden, ffn, T;
};

void CheckAccuracy(Kind kind, kernels::DType type, double tolerance) {
  std::mt19937_64 rng(17);
  // Odd sizes exercise every tile edge; the last case has more rows per expert than one tile.
  const Case cases[] = {{4, 2, 96, 200, 37}, {8, 2, 64, 128, 1}, {16, 4, 130, 72, 300}};
  for (const Case& c : cases) {
    auto ex = testing::RandomExperts(rng, c.E, c.hidden, c.ffn, type);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(c.T) * c.hidden);
    for (float& v : x) v = normal(rng);
    DispatchPolicy policy;  // greedy with cf 1.0: some pairs drop, which combine must skip
    policy.capacity_factor = 1.0;
    const DispatchPlan plan = testing::PlanFor(testing::RandomFfnRoutes(rng, c.T, c.E, c.k), policy);
    const std::vector<double> ref = testing::ReferenceMoe(*ex, x, plan);
    const std::vector<float> y = testing::RunMoe(kind, *ex, x, plan);
    const double rel = RelativeError(y, ref);
    EXPECT_LT(rel, tolerance) << "E " << c.E << " k " << c.k << " hidden " << c.hidden << " ffn " << c.ffn
                              << " T " << c.T;
    std::printf("[ info ] E %d k %d d %d ff %d T %d: relative error %.3g\n", c.E, c.k, c.hidden, c.ffn, c.T,
                rel);
  }
}

TEST(CudaFfnAccuracy, InvariantF32) {
  MOE_REQUIRE_GPU();
  CheckAccuracy(Kind::kInvariant, kernels::DType::kF32, 1e-5);
}
TEST(CudaFfnAccuracy, InvariantBf16Weights) {
  MOE_REQUIRE_GPU();
  CheckAccuracy(Kind::kInvariant, kernels::DType::kBF16, 1e-5);  // the reference uses the same bf16 weights
}
TEST(CudaFfnAccuracy, CublasF32) {
  MOE_REQUIRE_GPU();
  CheckAccuracy(Kind::kFast, kernels::DType::kF32, 1e-5);
}
TEST(CudaFfnAccuracy, CublasBf16) {
  MOE_REQUIRE_GPU();
  CheckAccuracy(Kind::kFast, kernels::DType::kBF16,
                2e-2);  // activations rounded to bf16 for the tensor cores
}

}  // namespace
}  // namespace moe::cuda

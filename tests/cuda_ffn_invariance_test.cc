// Batch invariance of the GPU invariant expert path, by bits (memcmp): a token's output must not depend on
// the batch around it (batch-of-1 against a slice of batch-N, shuffled batches), on the launch size, or on
// the run. Dropless planning (scope none) so that each token's pairs are the same in every batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "tests/cuda_ffn_test_util.h"
#include "tests/cuda_gpu_test_util.h"

namespace moe::cuda {
namespace {

using testing::Kind;

std::vector<float> Rows(const std::vector<float>& x, const std::vector<int>& rows, int d) {
  std::vector<float> out;
  for (int r : rows)
    out.insert(out.end(), x.begin() + static_cast<size_t>(r) * d, x.begin() + static_cast<size_t>(r + 1) * d);
  return out;
}

void CheckInvariance(kernels::DType type) {
  std::mt19937_64 rng(23);
  const int E = 8, k = 2, d = 80, f = 136, T = 150;
  auto ex = testing::RandomExperts(rng, E, d, f, type);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T) * d);
  for (float& v : x) v = normal(rng);
  DispatchPolicy dropless;
  dropless.scope = CapacityScope::kNone;
  const TokenRoutes routes = testing::RandomFfnRoutes(rng, T, E, k);
  std::vector<int> all(T);
  std::iota(all.begin(), all.end(), 0);
  const std::vector<float> full =
      testing::RunMoe(Kind::kInvariant, *ex, x, testing::PlanFor(routes, dropless));

  // Repeated runs, and a larger launch (max_rows padded).
  EXPECT_EQ(0,
            std::memcmp(full.data(),
                        testing::RunMoe(Kind::kInvariant, *ex, x, testing::PlanFor(routes, dropless)).data(),
                        full.size() * 4));
  EXPECT_EQ(0, std::memcmp(
                   full.data(),
                   testing::RunMoe(Kind::kInvariant, *ex, x, testing::PlanFor(routes, dropless), 1000).data(),
                   full.size() * 4));

  // Batch of one against its row of the batch of T.
  for (int t : {0, 1, 77, T - 1}) {
    const std::vector<int> one = {t};
    const std::vector<float> y1 =
        testing::RunMoe(Kind::kInvariant, *ex, Rows(x, one, d),
                        testing::PlanFor(testing::SliceRoutes(routes, one), dropless));
    EXPECT_EQ(0, std::memcmp(y1.data(), full.data() + static_cast<size_t>(t) * d, d * 4)) << "token " << t;
  }

  // Shuffled sub-batches: every token's row equals its row of the full batch.
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<int> rows = all;
    std::shuffle(rows.begin(), rows.end(), rng);
    rows.resize(1 + rng() % T);
    const std::vector<float> y =
        testing::RunMoe(Kind::kInvariant, *ex, Rows(x, rows, d),
                        testing::PlanFor(testing::SliceRoutes(routes, rows), dropless));
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_EQ(0, std::memcmp(y.data() + i * d, full.data() + static_cast<size_t>(rows[i]) * d, d * 4))
          << "token " << rows[i] << " in a shuffled batch of " << rows.size();
    }
  }
}

TEST(CudaFfnInvariance, F32WeightsBitwise) {
  MOE_REQUIRE_GPU();
  CheckInvariance(kernels::DType::kF32);
}
TEST(CudaFfnInvariance, Bf16WeightsBitwise) {
  MOE_REQUIRE_GPU();
  CheckInvariance(kernels::DType::kBF16);
}

}  // namespace
}  // namespace moe::cuda

// The top-k rule's device form (router/rules/topk_rule.h: route_row with RecomputedScores, what the GPU
// kernel runs per thread), run on the host, against TopKRouter (route_row with StoredScores): experts,
// weights and top-1 scores must be bitwise equal (both use the rule's exp_f; TopKRouter through its
// vectorised score loop). cuda_topk_gpu_test checks the same equality on the device.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "router/rules/topk_rule.h"
#include "router/topk_router.h"
#include "tests/support/random_router.h"

namespace moe {
namespace {

std::vector<float> RandomLogits(std::mt19937_64& rng, int T, int E, double non_finite, bool all_bad_rows) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  std::vector<float> logits(static_cast<size_t>(T) * E);
  for (auto& x : logits) {
    x = u(rng) < non_finite ? specials[rng() % 3] : normal(rng);
    if (u(rng) < 0.05) x = 1.0f;     // exact ties
    if (u(rng) < 0.01) x = -120.0f;  // sigmoid underflow
  }
  for (int t = 0; t < T; ++t) {
    if (all_bad_rows && t % 5 == 3) {
      for (int e = 0; e < E; ++e) logits[static_cast<size_t>(t) * E + e] = specials[rng() % 3];
    } else {
      logits[static_cast<size_t>(t) * E + rng() % E] = normal(rng);  // at least one finite logit
    }
  }
  return logits;
}

void CompareRows(const RouterConfig& config, int num_ranked, const std::vector<float>& logits, int T) {
  TopKRouter cpu(config, num_ranked);
  TokenRoutes want;
  cpu.route(logits.data(), T, want);
  const rules::TopKParams p = make_topk_params(config, num_ranked);
  ASSERT_EQ(p.num_ranked, cpu.num_ranked());
  const int R = p.num_ranked;
  std::vector<int32_t> experts(R);
  std::vector<float> weights(R);
  for (int t = 0; t < T; ++t) {
    float top1 = 0;
    const float* row = logits.data() + static_cast<size_t>(t) * p.num_experts;
    const rules::RowStats stats = rules::row_stats(p, row);
    ASSERT_TRUE((rules::route_row<64>(p, stats, rules::RecomputedScores{&p, row, stats}, experts.data(),
                                      weights.data(), &top1)));
    for (int r = 0; r < R; ++r) {
      ASSERT_EQ(experts[r], want.expert(t, r)) << "row " << t << " rank " << r;
      const float w = want.weight(t, r);
      ASSERT_EQ(0, std::memcmp(&weights[r], &w, 4))
          << "row " << t << " rank " << r << ": " << weights[r] << " vs " << w;
    }
    ASSERT_EQ(0, std::memcmp(&top1, &want.top1_score[t], 4)) << "row " << t;
  }
}

TEST(TopKRuleDeviceForm, PresetsMatchTheCpuRouterBitwise) {
  std::mt19937_64 rng(1);
  for (const std::string& name : RouterConfig::preset_names()) {
    const RouterConfig config = RouterConfig::preset(name);
    for (int extra : {0, 3}) {
      SCOPED_TRACE(name + " extra ranks " + std::to_string(extra));
      CompareRows(config, config.top_k + extra, RandomLogits(rng, 200, config.num_experts, 0.05, false), 200);
    }
  }
}

TEST(TopKRuleDeviceForm, GroupLimitBiasScalingAndFewAvailable) {
  std::mt19937_64 rng(2);
  int ran = 0;
  for (int rep = 0; rep < 60; ++rep) {
    const int groups[] = {1, 2, 4, 8};
    const int G = groups[rng() % 4];
    const int E = G * (1 + static_cast<int>(rng() % 8));
    const int k = 1 + static_cast<int>(rng() % std::min(E, 6));
    const std::optional<RouterConfig> rules =
        testing::RandomRouterRules(rng, E, G, k, 1 + static_cast<int>(rng() % G));
    if (!rules) continue;
    const RouterConfig& config = *rules;
    SCOPED_TRACE("case " + std::to_string(rep));
    const int ranked = config.top_k + static_cast<int>(rng() % 3);
    CompareRows(config, ranked, RandomLogits(rng, 150, config.num_experts, rep % 3 == 0 ? 0.6 : 0.1, false),
                150);
    ++ran;
  }
  EXPECT_GE(ran, 20);
}

// The host form's shortcuts (lane-wise group top-2, the rank floor that leaves out candidates with at least
// R better ones) at the sizes where they apply: many experts, groups, ranks around the 8 lanes, and rows of
// few distinct values (ties at the floor) or few available experts.
TEST(TopKRuleDeviceForm, LargeRowsTiesAndFloors) {
  std::mt19937_64 rng(3);
  for (int rep = 0; rep < 48; ++rep) {
    RouterConfig config = RouterConfig::preset(rep % 2 ? "deepseek-v3" : "mixtral");
    config.num_experts = rep % 3 == 0 ? 256 : (rep % 3 == 1 ? 128 : 64);
    config.num_groups = rep % 4 == 0 ? 1 : 8;
    config.topk_groups = config.num_groups == 1 ? 1 : 4;
    config.top_k = 1 + static_cast<int>(rng() % 8);
    config.selection_bias.clear();
    if (rep % 2) {
      config.selection_bias.resize(config.num_experts);
      for (auto& b : config.selection_bias) b = 0.25f * static_cast<float>(static_cast<int>(rng() % 3) - 1);
    }
    config.validate();
    const int ranked = config.top_k + static_cast<int>(rng() % 12);
    std::vector<float> logits = RandomLogits(rng, 100, config.num_experts, rep % 5 == 0 ? 0.7 : 0.05, false);
    if (rep % 3 != 2) {
      for (float& x : logits) {
        if (std::isfinite(x)) x = static_cast<float>(static_cast<int>(x) % 3);  // few distinct values
      }
    }
    SCOPED_TRACE("case " + std::to_string(rep) + ", " + std::to_string(config.num_experts) + " experts, " +
                 std::to_string(ranked) + " ranks");
    CompareRows(config, ranked, logits, 100);
  }
}

TEST(TopKRuleDeviceForm, RowWithoutFiniteLogitReportsFalse) {
  rules::TopKParams p;
  p.num_experts = 4;
  p.top_k = 2;
  p.num_ranked = 3;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float row[4] = {nan, std::numeric_limits<float>::infinity(), nan,
                        -std::numeric_limits<float>::infinity()};
  int32_t experts[3];
  float weights[3], top1 = 1;
  const rules::RowStats stats = rules::row_stats(p, row);
  EXPECT_EQ(stats.num_available, 0);
  EXPECT_FALSE(
      (rules::route_row<64>(p, stats, rules::RecomputedScores{&p, row, stats}, experts, weights, &top1)));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(experts[r], -1);
}

}  // namespace
}  // namespace moe

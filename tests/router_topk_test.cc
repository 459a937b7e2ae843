// Top-k routing rules, each checked on hand-computed rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "router/topk_router.h"

namespace moe {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TokenRoutes Route(const RouterConfig& config, const std::vector<float>& logits, int num_ranked = 0) {
  TopKRouter router(config, num_ranked);
  TokenRoutes routes;
  router.route(logits.data(), static_cast<int>(logits.size()) / config.num_experts, routes);
  return routes;
}

RouterConfig Softmax(int experts, int k, bool renormalize) {
  RouterConfig c;
  c.num_experts = experts;
  c.top_k = k;
  c.scoring = Scoring::kSoftmax;
  c.renormalize = renormalize;
  return c;
}

TEST(TopKRouter, SoftmaxRanksAndRenormalises) {
  const TokenRoutes r = Route(Softmax(4, 2, true), {1, 2, 3, 0});
  EXPECT_EQ(r.expert(0, 0), 2);
  EXPECT_EQ(r.expert(0, 1), 1);
  const double e3 = std::exp(3.0), e2 = std::exp(2.0);
  EXPECT_NEAR(r.weight(0, 0), e3 / (e3 + e2), 1e-6);
  EXPECT_NEAR(r.weight(0, 1), e2 / (e3 + e2), 1e-6);
}

TEST(TopKRouter, SoftmaxWithoutRenormalisationKeepsProbabilities) {
  const TokenRoutes r = Route(Softmax(4, 2, false), {1, 2, 3, 0});
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + 1.0;
  EXPECT_NEAR(r.weight(0, 0), std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(r.weight(0, 1), std::exp(2.0) / z, 1e-6);
}

TEST(TopKRouter, ExactTiesGoToTheLowerExpertId) {
  const TokenRoutes r = Route(Softmax(4, 3, true), {0.5f, 0.7f, 0.7f, 0.7f});
  EXPECT_EQ(r.expert(0, 0), 1);
  EXPECT_EQ(r.expert(0, 1), 2);
  EXPECT_EQ(r.expert(0, 2), 3);
  EXPECT_EQ(r.weight(0, 0), r.weight(0, 1));
}

TEST(TopKRouter, NonFiniteLogitsRankLastAndGetNoWeight) {
  // Expert 0 and 3 are NaN / +inf: only 1 and 2 are available; the third rank is unavailable.
  const TokenRoutes r = Route(Softmax(4, 3, true), {kNaN, 1.0f, 0.5f, kInf});
  EXPECT_EQ(r.expert(0, 0), 1);
  EXPECT_EQ(r.expert(0, 1), 2);
  EXPECT_EQ(r.expert(0, 2), -1);
  EXPECT_EQ(r.weight(0, 2), 0.0f);
  const double a = std::exp(1.0), b = std::exp(0.5);
  EXPECT_NEAR(r.weight(0, 0), a / (a + b), 1e-6);
  EXPECT_NEAR(r.weight(0, 1) + r.weight(0, 0), 1.0, 1e-6);
}

TEST(TopKRouter, RouteRowsFillsRangesWithRoutesBits) {
  // DeepSeek-V3's groups and sigmoid, with rerouting ranks: row ranges in any order give route()'s bits.
  const RouterConfig c = RouterConfig::preset("deepseek-v3");
  const TopKRouter router(c, 12);
  const int T = 37, E = c.num_experts;
  std::vector<float> logits(static_cast<size_t>(T) * E);
  uint64_t x = 1;
  for (float& v : logits) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>(x >> 40) % 2000) / 300.0f;
  }
  TokenRoutes whole, parts;
  router.route(logits.data(), T, whole);
  parts.resize(T, E, c.top_k, router.num_ranked());
  for (auto [first, n] : {std::pair{20, 17}, std::pair{0, 5}, std::pair{5, 15}}) {
    router.route_rows(logits.data() + static_cast<size_t>(first) * E, first, n, parts);
  }
  EXPECT_EQ(parts.experts, whole.experts);
  EXPECT_EQ(0, std::memcmp(parts.weights.data(), whole.weights.data(), whole.weights.size() * 4));
  EXPECT_EQ(0, std::memcmp(parts.top1_score.data(), whole.top1_score.data(), T * 4));
  EXPECT_THROW(router.route_rows(logits.data(), 30, 8, parts), std::invalid_argument);  // past the end
  TokenRoutes wrong;
  wrong.resize(T, E, c.top_k, c.top_k);
  EXPECT_THROW(router.route_rows(logits.data(), 0, 1, wrong), std::invalid_argument);  // other shape
}

TEST(TopKRouter, RowWithoutFiniteLogitIsAnError) {
  RouterConfig c = Softmax(3, 1, true);
  TopKRouter router(c);
  TokenRoutes routes;
  const std::vector<float> logits = {0, 1, 2, kNaN, -kInf, kNaN};
  try {
    router.route(logits.data(), 2, routes);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("token row 1 has no finite logit"), std::string::npos) << e.what();
  }
}

TEST(TopKRouter, SigmoidSelectionBiasChoosesButDoesNotWeigh) {
  RouterConfig c;
  c.num_experts = 4;
  c.top_k = 2;
  c.scoring = Scoring::kSigmoid;
  c.renormalize = true;
  c.scaling_factor = 2.0f;
  c.selection_bias = {0.0f, 0.1f, 0.0f, 0.2f};
  // Logits 0.3 > 0 would win without the bias; with it, experts 3 and 1 are chosen.
  const TokenRoutes r = Route(c, {0.3f, 0.0f, 0.0f, 0.0f});
  EXPECT_EQ(r.expert(0, 0), 3);
  EXPECT_EQ(r.expert(0, 1), 1);
  // Weights come from the unbiased sigmoid scores (0.5 each), renormalised, times 2.
  EXPECT_FLOAT_EQ(r.weight(0, 0), 1.0f);
  EXPECT_FLOAT_EQ(r.weight(0, 1), 1.0f);
  EXPECT_FLOAT_EQ(r.top1_score[0], 0.5f + 0.2f);
}

TEST(TopKRouter, GroupLimitKeepsTheBestGroupsBySumOfTwo) {
  RouterConfig c;
  c.num_experts = 8;
  c.top_k = 2;
  c.scoring = Scoring::kSigmoid;
  c.renormalize = true;
  c.num_groups = 4;  // groups {0,1} {2,3} {4,5} {6,7}
  c.topk_groups = 2;
  auto logit = [](double p) { return static_cast<float>(std::log(p / (1 - p))); };
  // Group 0 has the best single expert (0.9) but a poor partner: 0.9 + 0.01 < 0.6 + 0.6 and < 0.55 + 0.55.
  const std::vector<float> logits = {logit(0.9),  logit(0.01), logit(0.6), logit(0.6),
                                     logit(0.55), logit(0.55), logit(0.1), logit(0.1)};
  const TokenRoutes r = Route(c, logits, 8);
  EXPECT_EQ(r.expert(0, 0), 2);
  EXPECT_EQ(r.expert(0, 1), 3);
  EXPECT_EQ(r.expert(0, 2), 4);
  EXPECT_EQ(r.expert(0, 3), 5);
  // Experts outside the kept groups are unavailable, even as reroute candidates.
  for (int rank = 4; rank < 8; ++rank) EXPECT_EQ(r.expert(0, rank), -1) << rank;
  // Without the group limit expert 0 wins.
  c.num_groups = 1;
  c.topk_groups = 1;
  EXPECT_EQ(Route(c, logits).expert(0, 0), 0);
}

TEST(TopKRouter, GroupMaxKeepsTheGroupsWithTheBestExpert) {
  // DeepSeek-V2's group_limited_greedy: a group's value is its best score, so group 0 (0.9) now stays.
  RouterConfig c;
  c.num_experts = 8;
  c.top_k = 2;
  c.scoring = Scoring::kSigmoid;
  c.renormalize = false;
  c.num_groups = 4;
  c.topk_groups = 2;
  c.group_score = GroupScore::kMax;
  auto logit = [](double p) { return static_cast<float>(std::log(p / (1 - p))); };
  const std::vector<float> logits = {logit(0.9),  logit(0.01), logit(0.6), logit(0.59),
                                     logit(0.55), logit(0.55), logit(0.1), logit(0.1)};
  const TokenRoutes r = Route(c, logits, 8);
  EXPECT_EQ(r.expert(0, 0), 0);
  EXPECT_EQ(r.expert(0, 1), 2);
  EXPECT_EQ(r.expert(0, 2), 3);
  EXPECT_EQ(r.expert(0, 3), 1);
  for (int rank = 4; rank < 8; ++rank) EXPECT_EQ(r.expert(0, rank), -1) << rank;  // groups 2 and 3 dropped
  EXPECT_NEAR(r.weight(0, 0), 0.9, 1e-6);                                         // not renormalised
}

TEST(TopKRouter, SoftmaxTopKWeighsTheChosenLogitsAlone) {
  // gpt-oss: top-2 by logit, then a softmax over the two chosen logits (the others do not dilute it).
  RouterConfig c = Softmax(4, 2, true);
  c.scoring = Scoring::kSoftmaxTopK;
  c.rank_by_logit = true;
  const TokenRoutes r = Route(c, {1, 2, 3, 0}, 3);
  EXPECT_EQ(r.expert(0, 0), 2);
  EXPECT_EQ(r.expert(0, 1), 1);
  const double e1 = std::exp(-1.0);
  EXPECT_NEAR(r.weight(0, 0), 1.0 / (1.0 + e1), 1e-7);
  EXPECT_NEAR(r.weight(0, 1), e1 / (1.0 + e1), 1e-7);
  // The reroute candidate shares the chosen pair's normaliser: exp(1 - 3) / (1 + e^-1).
  EXPECT_EQ(r.expert(0, 2), 0);
  EXPECT_NEAR(r.weight(0, 2), std::exp(-2.0) / (1.0 + e1), 1e-7);
  EXPECT_FLOAT_EQ(r.top1_score[0], 3.0f);  // the select value is the logit
  c.renormalize = false;
  EXPECT_THROW(c.validate(), std::invalid_argument);
}

TEST(TopKRouter, RankByLogitSeparatesWhatSaturatedScoresTie) {
  // Llama 4: sigmoid(20) and sigmoid(25) are both 1.0f, so ranking by score ties them to the lower expert;
  // ranking by logit (torch.topk of the logits) picks expert 1, with weight sigmoid(25) = 1.
  RouterConfig c;
  c.num_experts = 3;
  c.top_k = 1;
  c.scoring = Scoring::kSigmoid;
  c.renormalize = false;
  ASSERT_EQ(1.0f / (1.0f + std::exp(-20.0f)), 1.0f);
  EXPECT_EQ(Route(c, {20.0f, 25.0f, -1.0f}).expert(0, 0), 0);
  c.rank_by_logit = true;
  const TokenRoutes r = Route(c, {20.0f, 25.0f, -1.0f}, 3);
  EXPECT_EQ(r.expert(0, 0), 1);
  EXPECT_EQ(r.expert(0, 1), 0);
  EXPECT_EQ(r.expert(0, 2), 2);
  EXPECT_FLOAT_EQ(r.weight(0, 0), 1.0f);
  EXPECT_NEAR(r.weight(0, 2), 1.0 / (1.0 + std::exp(1.0)), 1e-7);
}

TEST(TopKRouter, RanksBeyondTopKAreRerouteCandidatesWithTheSameNormalisation) {
  const TokenRoutes r = Route(Softmax(4, 2, true), {1, 2, 3, 0}, 3);
  ASSERT_EQ(r.num_ranked, 3);
  EXPECT_EQ(r.expert(0, 2), 0);
  const double e3 = std::exp(3.0), e2 = std::exp(2.0), e1 = std::exp(1.0);
  EXPECT_NEAR(r.weight(0, 2), e1 / (e3 + e2), 1e-6);
}

TEST(TopKRouter, PresetsRouteDeepSeekShapes) {
  RouterConfig c = RouterConfig::preset("deepseek-v3");
  std::vector<float> logits(2 * 256);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.37f * static_cast<float>(i));
  const TokenRoutes r = Route(c, logits);
  for (int t = 0; t < 2; ++t) {
    float sum = 0;
    for (int j = 0; j < 8; ++j) {
      EXPECT_GE(r.expert(t, j), 0);
      sum += r.weight(t, j);
    }
    EXPECT_NEAR(sum, 2.5f, 1e-5);  // renormalised, times the scaling factor
  }
}

TEST(TopKRouter, RejectsBadArguments) {
  EXPECT_THROW(TopKRouter(Softmax(4, 2, true), 1), std::invalid_argument);  // num_ranked < top_k
  RouterConfig bad = Softmax(4, 5, true);
  EXPECT_THROW(TopKRouter{bad}, std::invalid_argument);
  TopKRouter router(Softmax(4, 2, true));
  TokenRoutes routes;
  EXPECT_THROW(router.route(nullptr, 3, routes), std::invalid_argument);
  EXPECT_NO_THROW(router.route(nullptr, 0, routes));
  EXPECT_EQ(routes.num_tokens, 0);
}

}  // namespace
}  // namespace moe

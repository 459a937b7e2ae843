// The row-parallel form of the top-k rule (router/topk_block.h) against route_row over StoredScores, row by
// row: experts, weights and top-1 scores bitwise equal, over expert counts that do and do not fill vector
// lanes, every group count it takes, bias, scaling, both scorings, ranks beyond top_k, exact ties, non-finite
// logits, underflowing scores and huge logits. TopKRouter::route_rows uses the block form for whole blocks,
// so router_topk_rule_test's comparison with the device form covers it as well.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "router/topk_block.h"
#include "router/topk_router.h"
#include "tests/support/random_router.h"

namespace moe {
namespace {

constexpr int L = rules::BlockRouter::kLanes;

std::vector<float> BlockLogits(std::mt19937_64& rng, int E, double non_finite, int distinct) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  std::vector<float> logits(static_cast<size_t>(L) * E);
  for (auto& x : logits) {
    x = normal(rng);
    if (distinct > 0) x = static_cast<float>(static_cast<int>(x) % distinct);  // exact ties
    if (u(rng) < 0.02) x = -0.0f;
    if (u(rng) < 0.02) x = -150.0f;  // exp and sigmoid underflow
    if (u(rng) < 0.01) x = 80.0f;
    if (u(rng) < non_finite) x = specials[rng() % 3];
  }
  for (int l = 0; l < L; ++l) logits[static_cast<size_t>(l) * E + rng() % E] = normal(rng);  // one finite
  return logits;
}

// Routes one block both ways and compares (the config must be one the block form takes).
void CompareBlock(const RouterConfig& config, int num_ranked, const std::vector<float>& logits) {
  const rules::TopKParams p = make_topk_params(config, num_ranked);
  ASSERT_TRUE(rules::BlockRouter::supports(p));
  const int E = p.num_experts, R = p.num_ranked;
  std::vector<int32_t> experts(static_cast<size_t>(L) * R, 7);
  std::vector<float> weights(static_cast<size_t>(L) * R, 7.0f), top1(L, 7.0f);
  rules::BlockRouter block(p);
  ASSERT_TRUE(block.route(logits.data(), experts.data(), weights.data(), top1.data()));
  std::vector<float> scores(E), selects(E);
  std::vector<int32_t> list(E), want_e(R);
  std::vector<float> want_w(R);
  for (int l = 0; l < L; ++l) {
    const float* row = logits.data() + static_cast<size_t>(l) * E;
    const rules::RowStats stats = rules::row_stats(p, row);
    const rules::StoredScores stored(p, row, stats, scores.data(), selects.data(), list.data());
    float want_top1 = 0;
    ASSERT_TRUE((rules::route_row<4096>(p, stats, stored, want_e.data(), want_w.data(), &want_top1)));
    for (int r = 0; r < R; ++r) {
      ASSERT_EQ(experts[static_cast<size_t>(l) * R + r], want_e[r]) << "row " << l << " rank " << r;
      ASSERT_EQ(0, std::memcmp(&weights[static_cast<size_t>(l) * R + r], &want_w[r], 4))
          << "row " << l << " rank " << r << ": " << weights[static_cast<size_t>(l) * R + r] << " vs "
          << want_w[r];
    }
    ASSERT_EQ(0, std::memcmp(&top1[l], &want_top1, 4)) << "row " << l;
  }
}

TEST(BlockRouter, PresetsBitwiseEqualToRouteRow) {
  std::mt19937_64 rng(11);
  for (const std::string& name : RouterConfig::preset_names()) {
    const RouterConfig config = RouterConfig::preset(name);
    for (int extra : {0, 1, 5}) {
      for (int rep = 0; rep < 6; ++rep) {
        SCOPED_TRACE(name + " extra ranks " + std::to_string(extra) + " rep " + std::to_string(rep));
        CompareBlock(config, config.top_k + extra,
                     BlockLogits(rng, config.num_experts, rep == 0 ? 0.5 : 0.03, rep % 3 == 1 ? 3 : 0));
      }
    }
  }
}

TEST(BlockRouter, RandomConfigsBitwiseEqualToRouteRow) {
  std::mt19937_64 rng(12);
  int ran = 0;
  for (int rep = 0; rep < 400; ++rep) {
    const int groups[] = {1, 1, 2, 3, 4, 8, 16, 64};
    const int G = groups[rng() % 8];
    const int per_group =
        G == 64 ? 1 + static_cast<int>(rng() % 4) : 1 + static_cast<int>(rng() % (rng() % 4 ? 9 : 32));
    const int E = G * per_group;
    const int k = 1 + static_cast<int>(rng() % std::min(E, 9));
    const std::optional<RouterConfig> rules =
        testing::RandomRouterRules(rng, E, G, k, 1 + static_cast<int>(rng() % G));
    if (!rules) continue;
    const RouterConfig& config = *rules;
    SCOPED_TRACE("case " + std::to_string(rep) + ": " + std::to_string(config.num_experts) + " experts, " +
                 std::to_string(config.num_groups) + " groups, top " + std::to_string(config.top_k));
    const int ranked = config.top_k + static_cast<int>(rng() % 4);
    CompareBlock(config, ranked,
                 BlockLogits(rng, config.num_experts, rep % 4 == 0 ? 0.6 : 0.05, rep % 3 == 0 ? 2 : 0));
    ++ran;
  }
  EXPECT_GE(ran, 250);
}

TEST(BlockRouter, RowWithoutFiniteLogitReturnsFalseAndWritesNothing) {
  const RouterConfig config = RouterConfig::preset("mixtral");
  const rules::TopKParams p = make_topk_params(config, 0);
  std::mt19937_64 rng(13);
  std::vector<float> logits = BlockLogits(rng, p.num_experts, 0.0, 0);
  for (int e = 0; e < p.num_experts; ++e)
    logits[5 * p.num_experts + e] = std::numeric_limits<float>::quiet_NaN();
  std::vector<int32_t> experts(static_cast<size_t>(L) * p.num_ranked, 7);
  std::vector<float> weights(static_cast<size_t>(L) * p.num_ranked, 7.0f), top1(L, 7.0f);
  rules::BlockRouter block(p);
  EXPECT_FALSE(block.route(logits.data(), experts.data(), weights.data(), top1.data()));
  for (int32_t e : experts) EXPECT_EQ(e, 7);
  for (float t : top1) EXPECT_EQ(t, 7.0f);
}

TEST(BlockRouter, SizesBeyondTheBlockFormAreNotTaken) {
  rules::TopKParams p;
  p.num_experts = 128;
  p.top_k = 2;
  p.num_ranked = 2;
  p.num_groups = 128;
  p.topk_groups = 4;
  EXPECT_FALSE(rules::BlockRouter::supports(p));
  p.num_groups = rules::BlockRouter::kMaxBlockGroups;
  EXPECT_TRUE(rules::BlockRouter::supports(p));
  p.num_ranked = rules::BlockRouter::kMaxBlockRanks + 1;
  EXPECT_FALSE(rules::BlockRouter::supports(p));
  p.num_ranked = 2;
  p.num_experts = rules::BlockRouter::kMaxBlockExperts + 64;
  EXPECT_FALSE(rules::BlockRouter::supports(p));
}

// TopKRouter with blocks, a bad row inside a block and a tail: the same outputs as route_row per row, and the
// bad row named (its row of the output, past first_row).
TEST(BlockRouter, TopKRouterRoutesBlocksAndTailsAndNamesABadRow) {
  const RouterConfig config = RouterConfig::preset("deepseek-v3");
  const TopKRouter router(config, config.top_k + 2);
  std::mt19937_64 rng(14);
  const int T = 3 * L + 5;
  std::vector<float> logits;
  for (int b = 0; b < 4; ++b) {
    const std::vector<float> part = BlockLogits(rng, config.num_experts, 0.02, 0);
    logits.insert(logits.end(), part.begin(), part.end());
  }
  logits.resize(static_cast<size_t>(T) * config.num_experts);
  TokenRoutes all;
  router.route(logits.data(), T, all);
  TokenRoutes part;
  part.resize(T + 3, config.num_experts, config.top_k, router.num_ranked());
  router.route_rows(logits.data(), 3, T, part);
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < router.num_ranked(); ++r) {
      ASSERT_EQ(part.expert(t + 3, r), all.expert(t, r));
      const float a = part.weight(t + 3, r), b = all.weight(t, r);
      ASSERT_EQ(0, std::memcmp(&a, &b, 4));
    }
  }
  for (int e = 0; e < config.num_experts; ++e) {
    logits[static_cast<size_t>(L + 2) * config.num_experts + e] = std::numeric_limits<float>::infinity();
  }
  try {
    router.route_rows(logits.data(), 3, T, part);
    FAIL() << "a row without a finite logit was routed";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("row " + std::to_string(L + 5)), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moe

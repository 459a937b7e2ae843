// Routing statistics (shares, imbalance, consecutive-token repetition) on hand-computed cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "sim/routing_stats.h"

namespace moe::sim {
namespace {

// One step's routes: per token its experts in rank order (top_k ranks).
TokenRoutes routes_of(const std::vector<std::vector<int32_t>>& experts, int num_experts) {
  TokenRoutes r;
  const int k = static_cast<int>(experts.front().size());
  r.resize(static_cast<int>(experts.size()), num_experts, k, k);
  for (size_t t = 0; t < experts.size(); ++t) {
    for (int j = 0; j < k; ++j) r.experts[t * k + j] = experts[t][j];
  }
  return r;
}

TEST(SimRoutingStats, HandComputedTwoSteps) {
  RoutingStatsCounter c(4, 2);
  // Step 1: request 1 at positions 0, 1, then request 2, then request 1 again at position 2.
  c.add(std::vector<TokenMeta>{{1, 0}, {1, 1}, {2, 0}, {1, 2}},
        routes_of({{0, 1}, {0, 2}, {3, 2}, {1, 0}}, 4));
  // Step 2: request 1 continues (position 3), request 2 jumps to position 5, request 3 has one choice
  // unavailable (-1, not counted).
  c.add(std::vector<TokenMeta>{{1, 3}, {2, 5}, {3, 0}}, routes_of({{1, 3}, {3, 0}, {2, -1}}, 4));
  c.release(1);
  // Step 3: request 1 was released, so position 4 has no predecessor.
  c.add(std::vector<TokenMeta>{{1, 4}}, routes_of({{1, 2}}, 4));
  const RoutingStats s = c.result();
  EXPECT_EQ(s.tokens, 8);
  EXPECT_EQ(s.pairs, 15);
  EXPECT_EQ(s.choices, (std::vector<int64_t>{4, 4, 4, 3}));
  EXPECT_DOUBLE_EQ(s.share_min, 3.0 / 15);
  EXPECT_DOUBLE_EQ(s.share_max, 4.0 / 15);
  EXPECT_DOUBLE_EQ(s.load_imbalance, 16.0 / 15);
  // Consecutive: (1,0)->(1,1) same first; (1,1)->(1,2) first 0 vs 1, but 0 is in {1, 0}; (1,2)->(1,3) same
  // first (across steps).
  EXPECT_EQ(s.consecutive, 3);
  EXPECT_DOUBLE_EQ(s.same_first, 2.0 / 3);
  EXPECT_DOUBLE_EQ(s.same_first_or_second, 1.0);
}

TEST(SimRoutingStats, DisjointTopTwoSetsDoNotCount) {
  RoutingStatsCounter c(8, 2);
  c.add(std::vector<TokenMeta>{{0, 0}, {0, 1}, {0, 2}}, routes_of({{0, 1}, {2, 3}, {3, 4}}, 8));
  const RoutingStats s = c.result();
  EXPECT_EQ(s.consecutive, 2);
  EXPECT_DOUBLE_EQ(s.same_first, 0.0);
  EXPECT_DOUBLE_EQ(s.same_first_or_second, 0.5);  // {2,3} and {3,4} share 3
}

TEST(SimRoutingStats, TopOneUsesTheFirstChoiceOnly) {
  RoutingStatsCounter c(2, 1);
  c.add(std::vector<TokenMeta>{{5, 0}, {5, 1}, {5, 2}, {5, 3}}, routes_of({{0}, {0}, {1}, {0}}, 2));
  const RoutingStats s = c.result();
  EXPECT_EQ(s.consecutive, 3);
  EXPECT_DOUBLE_EQ(s.same_first, 1.0 / 3);
  EXPECT_DOUBLE_EQ(s.same_first_or_second, 1.0 / 3);
  EXPECT_DOUBLE_EQ(s.share_max, 0.75);
  EXPECT_DOUBLE_EQ(s.load_imbalance, 1.5);
}

TEST(SimRoutingStats, RangesCountedApartThenLinkedEqualAdd) {
  // Random steps: runs of one request (consecutive or jumping positions), a request in two runs of a step,
  // unavailable choices, releases. The parallel form with ranges of 1, 2, 3, 7 and 64 rows, counted in a
  // scrambled order into three counts, gives add()'s statistics.
  // 6 experts: count_range's per-rank histograms; 300: its direct counts.
  for (const int E : {6, 300}) {
    std::mt19937 rng(3);
    const int k = 2;
    std::vector<std::vector<TokenMeta>> steps;
    std::vector<TokenRoutes> routes;
    std::vector<uint32_t> next_pos(12, 0);
    std::vector<int64_t> choices(E, 0);  // counted by hand
    for (int s = 0; s < 40; ++s) {
      std::vector<TokenMeta> rows;
      std::vector<std::vector<int32_t>> experts;
      const int runs = 1 + static_cast<int>(rng() % 6);
      for (int r = 0; r < runs; ++r) {
        const uint64_t id = rng() % 12;
        const int len = 1 + static_cast<int>(rng() % 9);
        if (rng() % 5 == 0) next_pos[id] += 2;  // a gap: no pair
        for (int i = 0; i < len; ++i) {
          rows.push_back({id, next_pos[id]++});
          experts.push_back(
              {static_cast<int32_t>(rng() % E), rng() % 7 == 0 ? -1 : static_cast<int32_t>(rng() % E)});
        }
      }
      for (const auto& token : experts) {
        for (int32_t e : token) choices[e < 0 ? 0 : e] += e < 0 ? 0 : 1;
      }
      steps.push_back(rows);
      routes.push_back(routes_of(experts, E));
    }
    RoutingStatsCounter whole(E, k);
    for (size_t s = 0; s < steps.size(); ++s) {
      whole.add(steps[s], routes[s]);
      if (s % 9 == 8) whole.release(s % 12);
    }
    const RoutingStats want = whole.result();
    ASSERT_GT(want.consecutive, 100);
    EXPECT_EQ(want.choices, choices);
    for (int64_t range : {1, 2, 3, 7, 64}) {
      RoutingStatsCounter split(E, k);
      std::vector<RoutingStatsCounts> counts(3, split.make_counts());
      for (size_t s = 0; s < steps.size(); ++s) {
        const int64_t n = static_cast<int64_t>(steps[s].size());
        std::vector<int64_t> firsts;
        for (int64_t f = 0; f < n; f += range) firsts.push_back(f);
        std::shuffle(firsts.begin(), firsts.end(), rng);
        for (size_t j = 0; j < firsts.size(); ++j) {
          split.count_range(steps[s], routes[s], firsts[j], std::min(range, n - firsts[j]), counts[j % 3]);
        }
        split.link(steps[s], routes[s], range);
        if (s % 9 == 8) split.release(s % 12);
      }
      for (const RoutingStatsCounts& c : counts) split.merge(c);
      const RoutingStats got = split.result();
      EXPECT_EQ(got.tokens, want.tokens) << range;
      EXPECT_EQ(got.choices, want.choices) << range;
      EXPECT_EQ(got.consecutive, want.consecutive) << range;
      EXPECT_EQ(got.same_first, want.same_first) << range;
      EXPECT_EQ(got.same_first_or_second, want.same_first_or_second) << range;
    }
  }
}

TEST(SimRoutingStats, EmptyIsZero) {
  const RoutingStats s = RoutingStatsCounter(4, 2).result();
  EXPECT_EQ(s.pairs, 0);
  EXPECT_EQ(s.consecutive, 0);
  EXPECT_EQ(s.load_imbalance, 0.0);
}

}  // namespace
}  // namespace moe::sim

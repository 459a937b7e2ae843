// Router configuration, presets, dispatch policies and the capacity formula.
#include "router/router_config.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "router/dispatch_policy.h"
#include "router/rules/capacity.h"
#include "tests/support/expect_invalid.h"

namespace moe {
namespace {

using rules::rounded_capacity;

using moe::testing::ExpectInvalid;

TEST(Capacity, SeedWorkedExample) {
  // 8 experts, top-1, cf 1.25, floor: 800 tokens -> 125 slots, 2000 tokens -> 312.
  EXPECT_EQ(rounded_capacity(1.25, 800, 1, 8, CapacityRounding::kFloor), 125);
  EXPECT_EQ(rounded_capacity(1.25, 2000, 1, 8, CapacityRounding::kFloor), 312);
  EXPECT_EQ(rounded_capacity(1.25, 2000, 1, 8, CapacityRounding::kCeil), 313);
  // 400 tokens wanting one expert of a 2000-token batch overflow by 400 - 312 = 88.
  EXPECT_EQ(400 - rounded_capacity(1.25, 2000, 1, 8, CapacityRounding::kFloor), 88);
}

TEST(Capacity, IntegerProductsDoNotRoundUp) {
  // 1.1 * 100 * 1 / 1 is 110.00000000000001 in binary; ceil must still give 110.
  EXPECT_EQ(rounded_capacity(1.1, 100, 1, 1, CapacityRounding::kCeil), 110);
  EXPECT_EQ(rounded_capacity(1.0, 10, 2, 8, CapacityRounding::kCeil), 3);   // 2.5 -> 3
  EXPECT_EQ(rounded_capacity(1.0, 10, 2, 8, CapacityRounding::kFloor), 2);  // 2.5 -> 2
  EXPECT_EQ(rounded_capacity(2.0, 0, 2, 8, CapacityRounding::kCeil), 0);
}

// The capacity formula over a grid of factors that are exact fractions num / den, against exact integer
// arithmetic: ceil and floor of num * n * k / (den * E). (It was the CUDA planner's twin check; the one
// formula is now router/rules/capacity.h, so it is checked against exact arithmetic instead.) Non-integer
// exact values here lie at least 1 / (den * E) >= 1 / 2560 from an integer, far outside the 1e-9 snapping
// band.
TEST(Capacity, AgreesWithExactArithmetic) {
  const int64_t factors[][2] = {{1, 10}, {1, 2}, {1, 1}, {11, 10}, {5, 4}, {3, 2}, {2, 1}, {33, 10}};
  for (const auto& f : factors) {
    const double cf = static_cast<double>(f[0]) / static_cast<double>(f[1]);
    for (int64_t n = 0; n < 3000; n += 7) {
      for (int k : {1, 2, 6, 8}) {
        for (int E : {1, 3, 8, 64, 256}) {
          const int64_t num = f[0] * n * k, den = f[1] * E;
          const int64_t floor_exact = num / den, ceil_exact = (num + den - 1) / den;
          ASSERT_EQ(rounded_capacity(cf, n, k, E, CapacityRounding::kFloor), floor_exact) << cf << " " << n;
          ASSERT_EQ(rounded_capacity(cf, n, k, E, CapacityRounding::kCeil), ceil_exact) << cf << " " << n;
        }
      }
    }
  }
}

// The budgets of the scopes are the one formula, floored as docs/routing.md says.
TEST(Capacity, ScopeBudgets) {
  DispatchPolicy p;
  p.capacity_factor = 1.0;
  EXPECT_EQ(rules::batch_capacity(p, 10, 2, 8), 3);   // ceil(2.5)
  EXPECT_EQ(rules::batch_capacity(p, 0, 2, 8), 0);    // an empty batch offers nothing
  EXPECT_EQ(rules::request_capacity(p, 0, 2, 8), 1);  // a request's floor is 1
  EXPECT_EQ(rules::request_capacity(p, 10, 2, 8), 3);
  EXPECT_EQ(rules::causal_budget(p, 9, 2, 8), 3);  // position 9: a 10-token prefix
  EXPECT_EQ(rules::causal_budget(p, 0, 2, 8), 1);
  p.min_capacity = 4;
  EXPECT_EQ(rules::batch_capacity(p, 10, 2, 8), 4);
  EXPECT_EQ(rules::request_capacity(p, 10, 2, 8), 4);
  EXPECT_EQ(rules::num_ranked_needed(p, 8, 2), 2);
  p.overflow = Overflow::kReroute;
  p.reroute_depth = 3;
  EXPECT_EQ(rules::num_ranked_needed(p, 8, 2), 5);
  EXPECT_EQ(rules::num_ranked_needed(p, 4, 2), 4);  // capped at num_experts
}

TEST(RouterConfig, PresetsAreValidAndDocumented) {
  for (const auto& name : RouterConfig::preset_names()) {
    const RouterConfig c = RouterConfig::preset(name);
    EXPECT_NO_THROW(c.validate()) << name;
  }
  const RouterConfig ds = RouterConfig::preset("deepseek-v3");
  EXPECT_EQ(ds.scoring, Scoring::kSigmoid);
  EXPECT_EQ(ds.num_experts, 256);
  EXPECT_EQ(ds.top_k, 8);
  EXPECT_EQ(ds.num_groups, 8);
  EXPECT_EQ(ds.topk_groups, 4);
  EXPECT_FLOAT_EQ(ds.scaling_factor, 2.5f);
  EXPECT_TRUE(ds.renormalize);
  EXPECT_FALSE(RouterConfig::preset("qwen2-moe").renormalize);
  EXPECT_EQ(RouterConfig::preset("switch").top_k, 1);
  EXPECT_TRUE(RouterConfig::preset("mixtral").renormalize);
  ExpectInvalid([] { RouterConfig::preset("gpt-5"); }, "unknown router preset 'gpt-5'");
}

TEST(RouterConfig, ValidationNamesTheField) {
  RouterConfig c;
  c.num_experts = 8;
  c.top_k = 9;
  ExpectInvalid([&] { c.validate(); }, "top_k (9) exceeds num_experts (8)");
  c.top_k = 0;
  ExpectInvalid([&] { c.validate(); }, "top_k must be >= 1");
  c.top_k = 2;
  c.scaling_factor = 0.0f;
  ExpectInvalid([&] { c.validate(); }, "scaling_factor");
  c.scaling_factor = 1.0f;
  c.num_groups = 3;
  ExpectInvalid([&] { c.validate(); }, "multiple of num_groups");
  c.num_groups = 4;
  c.topk_groups = 5;
  ExpectInvalid([&] { c.validate(); }, "topk_groups (5)");
  c.topk_groups = 1;
  c.top_k = 3;  // one group of 2 experts cannot hold 3 choices
  ExpectInvalid([&] { c.validate(); }, "cannot hold top_k (3)");
  c = RouterConfig{};
  c.selection_bias = {1.0f};
  ExpectInvalid([&] { c.validate(); }, "selection_bias has 1 values");
}

TEST(DispatchPolicy, NamedModes) {
  const DispatchPolicy greedy = DispatchPolicy::mode("greedy");
  EXPECT_EQ(greedy.scope, CapacityScope::kBatch);
  EXPECT_EQ(greedy.priority, Priority::kArrival);
  EXPECT_EQ(greedy.overflow, Overflow::kDrop);
  const DispatchPolicy stable = DispatchPolicy::mode("stable");
  EXPECT_EQ(stable.scope, CapacityScope::kPrefix);
  EXPECT_EQ(stable.lookahead, DispatchPolicy::kDefaultLookahead);
  EXPECT_EQ(stable.priority, Priority::kRequest);
  EXPECT_EQ(stable.overflow, Overflow::kDrop);
  const DispatchPolicy rank_only = DispatchPolicy::mode("rank-only");
  EXPECT_EQ(rank_only.scope, CapacityScope::kBatch);
  EXPECT_EQ(rank_only.priority, Priority::kRequest);
  ExpectInvalid([] { DispatchPolicy::mode("fastest"); }, "unknown dispatch mode 'fastest'");
}

TEST(DispatchPolicy, ValidationAndParsing) {
  DispatchPolicy p;
  p.capacity_factor = 0.0;
  ExpectInvalid([&] { p.validate(); }, "capacity_factor must be finite and > 0");
  p.capacity_factor = -1.0;
  ExpectInvalid([&] { p.validate(); }, "capacity_factor");
  // A stated upper limit keeps cf * T * k / E inside int64 (found by the c_api fuzzer: 1.28e19 did not fit).
  p.capacity_factor = 1.2845e19;
  ExpectInvalid([&] { p.validate(); }, "capacity_factor must be at most 1e6 (got 1.2845e+19)");
  p.capacity_factor = DispatchPolicy::kMaxCapacityFactor;
  EXPECT_NO_THROW(p.validate());
  EXPECT_EQ(rules::batch_capacity(p, int64_t{1} << 31, 8, 8), int64_t{1000000} << 31);
  p.capacity_factor = 1.0;
  p.overflow = Overflow::kReroute;
  p.reroute_depth = 0;
  ExpectInvalid([&] { p.validate(); }, "reroute_depth must be >= 1");
  p.reroute_depth = 1;
  p.min_capacity = -2;
  ExpectInvalid([&] { p.validate(); }, "min_capacity");

  for (auto s : {"batch", "request", "causal", "none"}) EXPECT_EQ(to_string(parse_capacity_scope(s)), s);
  for (auto s : {"arrival", "request", "score", "random"}) EXPECT_EQ(to_string(parse_priority(s)), s);
  for (auto s : {"drop", "reroute"}) EXPECT_EQ(to_string(parse_overflow(s)), s);
  for (auto s : {"ceil", "floor"}) EXPECT_EQ(to_string(parse_capacity_rounding(s)), s);
  ExpectInvalid([] { parse_capacity_scope("global"); }, "unknown capacity scope 'global' (known: batch");
  ExpectInvalid([] { parse_priority("fifo"); }, "unknown priority 'fifo'");
  ExpectInvalid([] { parse_overflow("spill"); }, "unknown overflow 'spill'");
  ExpectInvalid([] { parse_scoring("relu"); }, "unknown scoring 'relu'");
}

}  // namespace
}  // namespace moe

// Router configuration, presets, dispatch policies and the capacity formula.
#include "router/router_config.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "router/dispatch_policy.h"

namespace moe {
namespace {

// Asserts that `fn` throws std::invalid_argument whose message contains `needle`.
template <typename Fn>
void ExpectInvalid(Fn&& fn, const std::string& needle) {
  try {
    fn();
    FAIL() << "expected std::invalid_argument containing '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

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
  EXPECT_EQ(stable.scope, CapacityScope::kRequest);
  EXPECT_EQ(stable.priority, Priority::kRequest);
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

// Dispatch planning rules, each on a hand-computed batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "router/dispatch_planner.h"
#include "router/rules/plan_rules.h"
#include "router/rules/slice_rules.h"
#include "tests/support/allocation_counter.h"
#include "tests/support/expect_invalid.h"

namespace moe {
namespace {

// Routes built by hand: rows of ranked experts, every weight 1/top_k unless given.
TokenRoutes MakeRoutes(int experts, int k, const std::vector<std::vector<int32_t>>& ranked,
                       const std::vector<std::vector<float>>& weights = {}) {
  TokenRoutes r;
  const int R = static_cast<int>(ranked.at(0).size());
  r.resize(static_cast<int>(ranked.size()), experts, k, R);
  for (size_t t = 0; t < ranked.size(); ++t) {
    for (int j = 0; j < R; ++j) {
      r.experts[t * R + j] = ranked[t][j];
      r.weights[t * R + j] = weights.empty() ? 1.0f / k : weights[t][j];
    }
    r.top1_score[t] = r.weights[t * R];
  }
  return r;
}

std::vector<TokenMeta> OneRequest(int n, uint64_t id = 1) {
  std::vector<TokenMeta> m(n);
  for (int i = 0; i < n; ++i) m[i] = {id, static_cast<uint32_t>(i)};
  return m;
}

DispatchPolicy Policy(CapacityScope scope, Priority priority, double cf) {
  DispatchPolicy p;
  p.scope = scope;
  p.priority = priority;
  p.capacity_factor = cf;
  return p;
}

// One admitted request's prompt (request `id`, positions from 0) planned in forward passes of the given
// sizes through `planner` and `state`, every weight 1/k: each pass's plan, in order.
// `first`: the position of the first pass's first row (rows before it come from a restored prefix).
std::vector<DispatchPlan> PlanPromptInChunks(DispatchPlanner& planner, RoutingState& state, uint64_t id,
                                             int experts, int k,
                                             const std::vector<std::vector<int32_t>>& prompt,
                                             const std::vector<int>& chunks, int first = 0) {
  std::vector<DispatchPlan> plans;
  int at = first;
  for (int n : chunks) {
    std::vector<std::vector<int32_t>> part(prompt.begin() + at, prompt.begin() + at + n);
    std::vector<TokenMeta> meta;
    for (int i = 0; i < n; ++i) meta.push_back({id, static_cast<uint32_t>(at + i)});
    plans.emplace_back();
    planner.plan(MakeRoutes(experts, k, part), meta, &state, plans.back());
    at += n;
  }
  return plans;
}

DispatchPlan Plan(const DispatchPolicy& policy, const TokenRoutes& routes, const std::vector<TokenMeta>& meta,
                  RoutingState* state = nullptr) {
  DispatchPlanner planner(routes.num_experts, routes.top_k, policy);
  DispatchPlan plan;
  planner.plan(routes, meta, state, plan);
  return plan;
}

using moe::testing::ExpectInvalid;

constexpr auto kKept = PairStatus::kKept;
constexpr auto kRerouted = PairStatus::kRerouted;
constexpr auto kDropped = PairStatus::kDropped;

TEST(Planner, SeedWorkedExampleOverflowsBy88) {
  // 8 experts, top-1, cf 1.25, floor; 2000 tokens of which 400 want expert 0: C = 312, 88 overflow.
  std::vector<std::vector<int32_t>> ranked;
  for (int t = 0; t < 2000; ++t) ranked.push_back({t < 400 ? 0 : 1 + t % 7});
  DispatchPolicy p = DispatchPolicy::mode("greedy");
  p.capacity_factor = 1.25;
  p.rounding = CapacityRounding::kFloor;
  const DispatchPlan plan = Plan(p, MakeRoutes(8, 1, ranked), OneRequest(2000));
  EXPECT_EQ(plan.batch_capacity, 312);
  EXPECT_EQ(plan.expert_load[0], 312);
  EXPECT_EQ(plan.num_dropped, 88);
  EXPECT_EQ(plan.num_tokens_fully_dropped, 88);
  // Arrival priority: the first 312 arrivals keep their slot.
  for (int t = 0; t < 400; ++t) EXPECT_EQ(plan.pair_status[t], t < 312 ? kKept : kDropped) << t;
  // The 800-token batch of the same example gets 125 slots.
  ranked.resize(800);
  EXPECT_EQ(Plan(p, MakeRoutes(8, 1, ranked), OneRequest(800)).batch_capacity, 125);
}

TEST(Planner, BatchScopeClaimsChoiceMajorInArrivalOrder) {
  // E=4, k=2, T=4, cf=0.5: C = 0.5*4*2/4 = 1 slot per expert.
  const TokenRoutes routes = MakeRoutes(4, 2, {{0, 1}, {0, 1}, {1, 0}, {2, 3}});
  const DispatchPlan plan =
      Plan(Policy(CapacityScope::kBatch, Priority::kArrival, 0.5), routes, OneRequest(4));
  ASSERT_EQ(plan.batch_capacity, 1);
  // First choices: t0->0 kept, t1->0 full, t2->1 kept, t3->2 kept. Second choices: t0->1 full (t2's first
  // choice came first), t1->1 full, t2->0 full, t3->3 kept.
  const std::vector<PairStatus> want = {kKept, kDropped, kDropped, kDropped, kKept, kDropped, kKept, kKept};
  EXPECT_EQ(plan.pair_status, want);
  EXPECT_EQ((std::vector<int32_t>{0, -1, -1, -1, 1, -1, 2, 3}), plan.pair_expert);
  EXPECT_EQ(plan.num_kept, 4);
  EXPECT_EQ(plan.num_dropped, 4);
  EXPECT_EQ(plan.num_tokens_fully_dropped, 1);
  EXPECT_EQ((std::vector<int32_t>{1, 1, 1, 1}), plan.expert_load);
  EXPECT_EQ((std::vector<int32_t>{0, 1, 2, 3, 4}), plan.expert_offsets);
  EXPECT_EQ((std::vector<int32_t>{0, 4, 6, 7}), plan.slot_pairs);
  EXPECT_EQ(plan.pair_weight[1], 0.0f);  // dropped pairs carry no weight
  EXPECT_EQ(plan.pair_weight[0], 0.5f);
}

TEST(Planner, RequestPriorityRanksByRequestThenPosition) {
  const TokenRoutes routes = MakeRoutes(2, 1, {{0}, {0}, {0}, {0}});
  // Rows arrive as (9,0) (3,1) (3,0) (5,0): request order is rows 2, 1, 3, 0.
  const std::vector<TokenMeta> meta = {{9, 0}, {3, 1}, {3, 0}, {5, 0}};
  // cf 1: C = 1*4*1/2 = 2 -> rows 2 and 1 win.
  const DispatchPlan plan = Plan(Policy(CapacityScope::kBatch, Priority::kRequest, 1.0), routes, meta);
  EXPECT_EQ((std::vector<PairStatus>{kDropped, kKept, kKept, kDropped}), plan.pair_status);
  EXPECT_EQ(plan.pair_slot[2], 0);
  EXPECT_EQ(plan.pair_slot[1], 1);
  // Arrival priority keeps rows 0 and 1 instead.
  const DispatchPlan greedy = Plan(Policy(CapacityScope::kBatch, Priority::kArrival, 1.0), routes, meta);
  EXPECT_EQ((std::vector<PairStatus>{kKept, kKept, kDropped, kDropped}), greedy.pair_status);
}

TEST(Planner, ScorePriorityServesTheMostConfidentFirstTiesByArrival) {
  const TokenRoutes routes = MakeRoutes(2, 1, {{0}, {0}, {0}, {0}}, {{0.2f}, {0.9f}, {0.5f}, {0.9f}});
  const DispatchPlan plan = Plan(Policy(CapacityScope::kBatch, Priority::kScore, 1.0), routes, OneRequest(4));
  // C = 2: rows 1 and 3 (0.9, tie broken by arrival: 1 before 3).
  EXPECT_EQ((std::vector<PairStatus>{kDropped, kKept, kDropped, kKept}), plan.pair_status);
  EXPECT_EQ(plan.pair_slot[1], 0);
  EXPECT_EQ(plan.pair_slot[3], 1);
}

TEST(Planner, RandomPriorityIsASeededPermutation) {
  std::vector<std::vector<int32_t>> ranked(64, std::vector<int32_t>{0});
  const TokenRoutes routes = MakeRoutes(8, 1, ranked);
  DispatchPolicy p = Policy(CapacityScope::kBatch, Priority::kRandom, 1.0);  // C = 8 of 64 wanting expert 0
  p.seed = 7;
  const DispatchPlan a = Plan(p, routes, OneRequest(64));
  const DispatchPlan b = Plan(p, routes, OneRequest(64));
  EXPECT_EQ(a.pair_status, b.pair_status);
  EXPECT_EQ(a.slot_pairs, b.slot_pairs);
  EXPECT_EQ(a.num_kept, 8);
  bool arrival_order = true;
  for (int s = 0; s < 8; ++s) arrival_order &= a.slot_pairs[s] == s;
  EXPECT_FALSE(arrival_order) << "seeded permutation should not be the identity";
  // The key is the token's identity, not its row: reversing the rows keeps the same tokens.
  std::vector<TokenMeta> reversed = OneRequest(64);
  std::reverse(reversed.begin(), reversed.end());
  const DispatchPlan r = Plan(p, routes, reversed);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(r.pair_status[63 - t], a.pair_status[t]) << t;
  p.seed = 8;
  EXPECT_NE(Plan(p, routes, OneRequest(64)).slot_pairs, a.slot_pairs);
}

TEST(Planner, RerouteTriesNextRanksAfterAllPairsArePlaced) {
  // E=4, k=1, depth 2, C = 1: rows 0,1,2 all want expert 0; row 1 ranks 1 then 2, row 2 ranks 1 then 3.
  // Row 3 wants expert 1 first. Rerouting happens after all first choices: row 3 keeps expert 1, so row 1
  // falls through to expert 2 and row 2 to expert 3.
  const TokenRoutes routes =
      MakeRoutes(4, 1, {{0, 1, 2}, {0, 1, 2}, {0, 1, 3}, {1, 2, 3}},
                 {{0.5f, 0.3f, 0.2f}, {0.6f, 0.3f, 0.1f}, {0.7f, 0.2f, 0.1f}, {0.8f, 0.1f, 0.1f}});
  DispatchPolicy p = Policy(CapacityScope::kBatch, Priority::kArrival, 1.0);
  p.overflow = Overflow::kReroute;
  p.reroute_depth = 2;
  const DispatchPlan plan = Plan(p, routes, OneRequest(4));
  EXPECT_EQ((std::vector<PairStatus>{kKept, kRerouted, kRerouted, kKept}), plan.pair_status);
  EXPECT_EQ((std::vector<int32_t>{0, 2, 3, 1}), plan.pair_expert);
  // A rerouted pair's weight is that expert's weight under the token's normalisation.
  EXPECT_EQ(plan.pair_weight[1], 0.1f);
  EXPECT_EQ(plan.pair_weight[2], 0.1f);
  EXPECT_EQ(plan.num_rerouted, 2);
  // Depth 1: row 1 tries only expert 1 (full) and is dropped; so is row 2.
  p.reroute_depth = 1;
  const DispatchPlan shallow = Plan(p, routes, OneRequest(4));
  EXPECT_EQ((std::vector<PairStatus>{kKept, kDropped, kDropped, kKept}), shallow.pair_status);
}

TEST(Planner, RerouteSkipsExpertsTheTokenAlreadyUses) {
  // k=2, depth 2, C=1. Row 0 takes experts 0 and 1. Row 1 wants 0 and 1 too; both overflow. Its pair j=0
  // takes rank 2 (expert 2); pair j=1 skips expert 2 (already its own) and takes expert 3.
  const TokenRoutes routes = MakeRoutes(4, 2, {{0, 1, 2, 3}, {0, 1, 2, 3}});
  DispatchPolicy p = Policy(CapacityScope::kBatch, Priority::kArrival, 1.0);  // C = 1*2*2/4 = 1
  p.overflow = Overflow::kReroute;
  p.reroute_depth = 2;
  const DispatchPlan plan = Plan(p, routes, OneRequest(2));
  EXPECT_EQ((std::vector<int32_t>{0, 1, 2, 3}), plan.pair_expert);
  EXPECT_EQ((std::vector<PairStatus>{kKept, kKept, kRerouted, kRerouted}), plan.pair_status);
}

TEST(Planner, RequestScopeGivesEachRequestItsOwnBudget) {
  // E=2, k=1. Request 1 has 4 tokens all wanting expert 0, request 2 has 2. Strangers cannot take each
  // other's slots.
  const TokenRoutes routes = MakeRoutes(2, 1, {{0}, {0}, {0}, {0}, {0}, {0}});
  const std::vector<TokenMeta> meta = {{2, 0}, {1, 0}, {1, 1}, {2, 1}, {1, 2}, {1, 3}};
  // Mode stable has cf 1.25: C_1 = ceil(2.5) = 3 (rows 1, 2, 4), C_2 = ceil(1.25) = 2 (rows 0, 3).
  const DispatchPlan plan = Plan(DispatchPolicy::mode("stable"), routes, meta);
  EXPECT_EQ((std::vector<PairStatus>{kKept, kKept, kKept, kKept, kKept, kDropped}), plan.pair_status);
  EXPECT_EQ(plan.expert_capacity[0], 3 + 2);
  // cf 1: C_1 = 2 (rows 1, 2), C_2 = 1 (row 0).
  DispatchPolicy p = DispatchPolicy::mode("stable");
  p.capacity_factor = 1.0;
  const DispatchPlan tight = Plan(p, routes, meta);
  EXPECT_EQ((std::vector<PairStatus>{kKept, kKept, kKept, kDropped, kDropped, kDropped}), tight.pair_status);
  // min_capacity lifts every pool.
  p.min_capacity = 3;
  EXPECT_EQ(Plan(p, routes, meta).num_dropped, 1);  // request 1: 3 of 4; request 2: both
}

TEST(Planner, CausalBudgetGrowsWithPosition) {
  // E=2, k=1, cf 1: budget at position p is max(1, ceil((p+1)/2)): 1,1,2,2,3,3,...
  // All tokens want expert 0: positions 0 (kept, held 1), 1 (budget 1: dropped), 2 (budget 2: kept),
  // 3 (budget 2, held 2: dropped), 4 (budget 3: kept).
  const TokenRoutes routes = MakeRoutes(2, 1, {{0}, {0}, {0}, {0}, {0}});
  DispatchPolicy p = Policy(CapacityScope::kCausal, Priority::kArrival, 1.0);
  const DispatchPlan plan = Plan(p, routes, OneRequest(5));
  EXPECT_EQ((std::vector<PairStatus>{kKept, kDropped, kKept, kDropped, kKept}), plan.pair_status);
}

TEST(Planner, CausalPlanDoesNotDependOnChunking) {
  // 12 tokens of one request with skewed choices, planned whole and in chunks 5 + 1 + 6 with carried state.
  std::vector<std::vector<int32_t>> ranked;
  for (int t = 0; t < 12; ++t) ranked.push_back({t % 3 == 0 ? 1 : 0, t % 3 == 0 ? 0 : 2, 3});
  const TokenRoutes all = MakeRoutes(4, 2, ranked);
  DispatchPolicy p = Policy(CapacityScope::kCausal, Priority::kRequest, 1.0);
  p.overflow = Overflow::kReroute;
  p.reroute_depth = 1;
  RoutingState whole_state(4);
  const DispatchPlan whole = Plan(p, all, OneRequest(12, 42), &whole_state);
  ASSERT_GT(whole.num_dropped + whole.num_rerouted, 0) << "the case must exercise the budget";

  RoutingState state(4);
  DispatchPlanner planner(4, 2, p);
  int begin = 0;
  for (int size : {5, 1, 6}) {
    std::vector<std::vector<int32_t>> part(ranked.begin() + begin, ranked.begin() + begin + size);
    std::vector<TokenMeta> meta;
    for (int i = 0; i < size; ++i) meta.push_back({42, static_cast<uint32_t>(begin + i)});
    DispatchPlan plan;
    planner.plan(MakeRoutes(4, 2, part), meta, &state, plan);
    for (int i = 0; i < size * 2; ++i) {
      EXPECT_EQ(plan.pair_expert[i], whole.pair_expert[begin * 2 + i]);
      EXPECT_EQ(plan.pair_status[i], whole.pair_status[begin * 2 + i]);
      EXPECT_EQ(plan.pair_weight[i], whole.pair_weight[begin * 2 + i]);
    }
    begin += size;
  }
  EXPECT_EQ(state.find(42)->slots_held, whole_state.find(42)->slots_held);
  EXPECT_EQ(state.find(42)->next_position, 12u);
}

TEST(Planner, CausalRejectsGapsAndMisplacedChunks) {
  const TokenRoutes routes = MakeRoutes(2, 1, {{0}, {0}});
  const DispatchPolicy p = Policy(CapacityScope::kCausal, Priority::kRequest, 1.0);
  ExpectInvalid(
      [&] {
        Plan(p, routes, {{1, 0}, {1, 2}});
      },
      "request 1: causal and sequence scopes need contiguous positions");
  ExpectInvalid([&] { Plan(p, routes, {{1, 3}, {1, 4}}); }, "but row 0 has position 3 where 0 was expected");
  RoutingState state(2);
  Plan(p, routes, {{1, 0}, {1, 1}}, &state);
  const std::vector<int32_t> held = state.find(1)->slots_held;
  ExpectInvalid(
      [&] {
        Plan(p, routes, {{1, 5}, {1, 6}}, &state);
      },
      "but row 0 has position 5 where 2 was expected");
  EXPECT_EQ(state.find(1)->slots_held, held) << "a rejected batch must not touch the state";
  EXPECT_EQ(state.find(1)->next_position, 2u);
  state.release(1);
  EXPECT_EQ(state.find(1), nullptr);
  ExpectInvalid([&] { state.release(1); }, "request 1 cannot be released: the state does not hold it");
}

// The worked example of docs/routing.md, sequence scope: E = 4, k = 2, cf 1 (ceil). A request admitted with
// an 8-token prompt gets one pool of C = max(1, ceil(1 * 8 * 2 / 4)) = 4 slots per expert for its whole
// prompt, claimed in (position, j) order whatever the chunking. Choices (j0, j1) by position:
//   p0 (0,3)  p1 (0,3)  p2 (2,3)  p3 (2,3)  p4 (0,3)  p5 (2,3)  p6 (2,3)  p7 (2,3)
// Every second choice goes to expert 3, which every row chooses, so the reserve holds there throughout (the
// rest of the prompt is expected to bring more than 5/4 of the pool's room): a second choice must leave
// R = round(3 (h + 1) n / (2 (p + 5))), h = 0 first choices of expert 3, n = 7 - p rows to come. p0, p1 (R 2)
// and p2 (R 1) are kept; p3 and p4 find count 3 against 4 - 1 and are refused; p5 (R 0) takes the last slot;
// p6 finds the pool full. Expert 2 fills with p2, p3, p5, p6's first choices, so p7 loses both pairs. Then a
// decode row at position 8, (2, 3), is a pool of its own (budget max(1, ceil(2 / 4)) = 1 per expert): both
// pairs kept, though the prompt's pools of experts 2 and 3 are full.
TEST(Planner, SequenceWorkedExample) {
  const std::vector<std::vector<int32_t>> prompt = {{0, 3}, {0, 3}, {2, 3}, {2, 3},
                                                    {0, 3}, {2, 3}, {2, 3}, {2, 3}};
  const DispatchPolicy p = Policy(CapacityScope::kSequence, Priority::kRequest, 1.0);
  // docs/routing.md's table: p0..p7 = KK KK KK KD KD KK KD DD.
  const std::vector<PairStatus> want = {kKept, kKept,    kKept, kKept, kKept, kKept,    kKept,    kDropped,
                                        kKept, kDropped, kKept, kKept, kKept, kDropped, kDropped, kDropped};
  for (const std::vector<int>& chunks : {std::vector<int>{8}, {3, 5}, {1, 1, 6}, {5, 2, 1}}) {
    SCOPED_TRACE(::testing::PrintToString(chunks));
    RoutingState state(4, 2);
    state.admit(7, 8);
    DispatchPlanner planner(4, 2, p);
    const std::vector<DispatchPlan> plans = PlanPromptInChunks(planner, state, 7, 4, 2, prompt, chunks);
    // Slots offered by the first pass: the prompt pool's room per expert.
    EXPECT_EQ(plans.front().expert_capacity, (std::vector<int64_t>{4, 4, 4, 4}));
    std::vector<PairStatus> got;
    for (const DispatchPlan& plan : plans)
      got.insert(got.end(), plan.pair_status.begin(), plan.pair_status.end());
    EXPECT_EQ(got, want);
    EXPECT_EQ(state.find(7)->slots_held, (std::vector<int32_t>{3, 0, 4, 4}));
    // Rank < 1 (first choices), then rank < 2 (either choice) per expert.
    EXPECT_EQ(state.find(7)->higher_choices, (std::vector<int32_t>{3, 0, 5, 0, 3, 0, 5, 8}));
    EXPECT_EQ(state.find(7)->next_position, 8u);
    DispatchPlan decode;
    const std::vector<TokenMeta> decode_row = {{7, 8}};
    planner.plan(MakeRoutes(4, 2, {{2, 3}}), decode_row, &state, decode);
    EXPECT_EQ(decode.pair_status, (std::vector<PairStatus>{kKept, kKept}));
    EXPECT_EQ(decode.expert_capacity, (std::vector<int64_t>{1, 1, 1, 1}));  // one decode row's pool
    EXPECT_EQ(state.find(7)->slots_held, (std::vector<int32_t>{3, 0, 4, 4})) << "decode rows hold nothing";
    EXPECT_EQ(state.find(7)->next_position, 9u);
  }
}

// docs/routing.md's prefix-scope worked example: the prompt above under lookahead W = 2. Row p sees the
// prompt up to its horizon h = min(L, p + 3): budget ceil(h * 2 / 4) = 2, 2, 3, 3, 4, 4, 4, 4 for L = 8.
// p0..p7 = KK KD KK KK KK KD KD DD (5 drops, as under sequence scope, but others). The first 6 positions
// (P = 6: L >= P + W) route the same for a prompt of 12 tokens, whose later rows see more (h 9, 10, ...):
// a cached prefix of 6 positions serves both; position 6 differs (its horizon is cut by L = 8).
TEST(Planner, PrefixWorkedExample) {
  const std::vector<std::vector<int32_t>> prompt = {{0, 3}, {0, 3}, {2, 3}, {2, 3},
                                                    {0, 3}, {2, 3}, {2, 3}, {2, 3}};
  DispatchPolicy p = Policy(CapacityScope::kPrefix, Priority::kRequest, 1.0);
  p.lookahead = 2;
  const std::vector<PairStatus> want = {kKept, kKept, kKept, kDropped, kKept, kKept,    kKept,    kKept,
                                        kKept, kKept, kKept, kDropped, kKept, kDropped, kDropped, kDropped};
  for (const std::vector<int>& chunks : {std::vector<int>{8}, {3, 5}, {1, 1, 6}, {5, 2, 1}}) {
    SCOPED_TRACE(::testing::PrintToString(chunks));
    RoutingState state(4, 2);
    state.admit(7, 8);
    DispatchPlanner planner(4, 2, p);
    const std::vector<DispatchPlan> plans = PlanPromptInChunks(planner, state, 7, 4, 2, prompt, chunks);
    // Slots offered by the first pass: the budget at its last row's horizon.
    const int64_t first_budget = chunks.front() >= 5 ? 4 : chunks.front() >= 3 ? 3 : 2;
    EXPECT_EQ(plans.front().expert_capacity, std::vector<int64_t>(4, first_budget));
    std::vector<PairStatus> got;
    for (const DispatchPlan& plan : plans)
      got.insert(got.end(), plan.pair_status.begin(), plan.pair_status.end());
    EXPECT_EQ(got, want);
    EXPECT_EQ(state.find(7)->slots_held, (std::vector<int32_t>{3, 0, 4, 4}));
    EXPECT_EQ(state.find(7)->higher_choices, (std::vector<int32_t>{3, 0, 5, 0, 3, 0, 5, 8}));
  }
  // A 12-token prompt beginning with the same 8 rows: the first 6 positions route alike, position 6 not.
  std::vector<std::vector<int32_t>> longer = prompt;
  for (int i = 0; i < 4; ++i) longer.push_back({1, 0});
  RoutingState state(4, 2);
  state.admit(8, 12);
  DispatchPlanner planner(4, 2, p);
  const std::vector<DispatchPlan> plans = PlanPromptInChunks(planner, state, 8, 4, 2, longer, {12});
  const std::vector<PairStatus>& got = plans.front().pair_status;
  EXPECT_TRUE(std::equal(want.begin(), want.begin() + 12, got.begin()));
  EXPECT_EQ(got[13], kKept) << "position 6's second choice: its horizon 9 gives budget 5";
  EXPECT_EQ(prefix_cache_salt(p, 6, 8), 0u);
  EXPECT_EQ(prefix_cache_salt(p, 6, 12), 0u);
  EXPECT_EQ(prefix_cache_salt(p, 7, 8), 8u);
  EXPECT_EQ(prefix_cache_salt(p, 7, 12), 0u);
}

// docs/routing.md's conversation worked example ("Conversations"): E = 4, k = 2, cf 1, ceil, W = 2. Turn 1
// is a prompt of 4 rows and an answer of 2 (decode rows); turn 2 sends them again with a new message of 3
// rows: turn ends {4, 6, 9}. Positions 0-3 are decided as the rows of a 4-token prompt in both turns (budget
// ceil(min(4, p + 3) / 2) = 2), positions 4-5 as decode rows, so turn 2 routes them as turn 1 did - in one
// pass, in chunks, or restored from turn 1's cached segments at any block end - and every block of turn 1
// keeps its key. Admitted as a plain 9-token prompt instead, position 3 would see the horizon 6 and keep its
// second choice (turn 1 dropped it), and positions 4-5 would claim from the prompt pool.
TEST(Planner, ConversationWorkedExample) {
  const std::vector<std::vector<int32_t>> rows = {{0, 3}, {0, 3}, {2, 3}, {2, 3}, {1, 3},
                                                  {1, 3}, {0, 3}, {2, 3}, {2, 3}};
  DispatchPolicy p = Policy(CapacityScope::kPrefix, Priority::kRequest, 1.0);
  p.lookahead = 2;
  // p0 KK, p1 KD (reserve 1 at e3: cap 1), p2 KK, p3 KD (e3 full at 2), p4 p5 decode rows KK.
  const std::vector<PairStatus> turn1 = {kKept, kKept,    kKept, kDropped, kKept, kKept,
                                         kKept, kDropped, kKept, kKept,    kKept, kKept};
  RoutingState first(4, 2, /*record=*/true);
  first.admit(7, 4);
  DispatchPlanner planner(4, 2, p);
  std::vector<PairStatus> got;
  for (const DispatchPlan& plan : PlanPromptInChunks(planner, first, 7, 4, 2, rows, {1, 3, 1, 1}))
    got.insert(got.end(), plan.pair_status.begin(), plan.pair_status.end());
  EXPECT_EQ(got, turn1);
  EXPECT_EQ(first.find(7)->slots_held, (std::vector<int32_t>{2, 0, 2, 2}));

  // Turn 2: positions 6-8 continue the prompt pool (held {2, 0, 2, 2}) under the turn's length 9 (budget 5);
  // the gate stays open (p6: 4 * 2 * 7 = 56 against 5 * 2 * 11 = 110), so all three rows keep both pairs.
  const uint32_t ends[] = {4, 6, 9};
  std::vector<PairStatus> turn2 = turn1;
  turn2.insert(turn2.end(), 6, kKept);
  for (const std::vector<int>& chunks : {std::vector<int>{9}, {3, 3, 3}, {5, 4}, {4, 1, 1, 3}}) {
    SCOPED_TRACE(::testing::PrintToString(chunks));
    RoutingState state(4, 2);
    state.admit(8, ends);
    got.clear();
    for (const DispatchPlan& plan : PlanPromptInChunks(planner, state, 8, 4, 2, rows, chunks))
      got.insert(got.end(), plan.pair_status.begin(), plan.pair_status.end());
    EXPECT_EQ(got, turn2);
    EXPECT_EQ(state.find(8)->slots_held, (std::vector<int32_t>{3, 0, 4, 5}));
    // h_1: the first choices of the 7 prompt rows; h_2: every choice of them (the answer rows count none).
    EXPECT_EQ(state.find(8)->higher_choices, (std::vector<int32_t>{3, 0, 4, 0, 3, 0, 4, 7}));
  }
  // Restored from turn 1's segments at every block end P <= 6: the same outcome.
  for (uint32_t P = 1; P <= 6; ++P) {
    SCOPED_TRACE("restored prefix " + std::to_string(P));
    EXPECT_EQ(prefix_cache_salt(p, P, std::span<const uint32_t>(ends)), prefix_cache_salt(p, P, 4u));
    RoutingState state(4, 2);
    const std::vector<RoutingSegment> prefix = {first.segment(7, 0, P)};
    state.restore(8, ends, prefix);
    got.clear();
    for (const DispatchPlan& plan :
         PlanPromptInChunks(planner, state, 8, 4, 2, rows, {9 - static_cast<int>(P)}, static_cast<int>(P)))
      got.insert(got.end(), plan.pair_status.begin(), plan.pair_status.end());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), turn2.begin() + 2 * P));
    EXPECT_EQ(state.find(8)->slots_held, (std::vector<int32_t>{3, 0, 4, 5}));
  }
  // The keys: 0 for [0, 1) and [0, 2) (the turn ends beyond p + W), the turn's length 4 up to 6, then the
  // whole list, which no single-turn request shares.
  EXPECT_EQ(prefix_cache_turns(RoutingRule::of(p), 2, ends), std::vector<uint32_t>{});
  EXPECT_EQ(prefix_cache_turns(RoutingRule::of(p), 4, ends), std::vector<uint32_t>{4});
  EXPECT_EQ(prefix_cache_turns(RoutingRule::of(p), 6, ends), std::vector<uint32_t>{4});
  EXPECT_EQ(prefix_cache_turns(RoutingRule::of(p), 7, ends), (std::vector<uint32_t>{4, 6}));
  EXPECT_EQ(prefix_cache_turns(RoutingRule::of(p), 8, ends), (std::vector<uint32_t>{4, 6, 9}));
  EXPECT_EQ(prefix_cache_salt(p, 2, std::span<const uint32_t>(ends)), 0u);
  EXPECT_EQ(prefix_cache_salt(p, 6, std::span<const uint32_t>(ends)), 4u);
  EXPECT_GE(prefix_cache_salt(p, 8, std::span<const uint32_t>(ends)), uint64_t{1} << 63);
  EXPECT_NE(prefix_cache_salt(p, 8, std::span<const uint32_t>(ends)),
            prefix_cache_salt(p, 7, std::span<const uint32_t>(ends)));

  // The counter-check: the same 9 rows admitted as one 9-token prompt route position 3 otherwise (horizon 6,
  // budget 3: its second choice kept), and the salt refuses turn 1's blocks that position 3 is in.
  RoutingState plain(4, 2);
  plain.admit(9, 9);
  got.clear();
  for (const DispatchPlan& plan : PlanPromptInChunks(planner, plain, 9, 4, 2, rows, {9}))
    got.insert(got.end(), plan.pair_status.begin(), plan.pair_status.end());
  EXPECT_EQ(got[7], kKept);
  EXPECT_NE(prefix_cache_salt(p, 4, 9u), prefix_cache_salt(p, 4, 4u));
  RoutingState refused(4, 2);
  const std::vector<RoutingSegment> turn1_prefix = {first.segment(7, 0, 4)};
  ExpectInvalid([&] { refused.restore(9, 9, turn1_prefix); }, "planned for a prompt of 4 tokens");
  // Turn 2's own segment past turn 1 carries its turn ends: MOERSEG2, and back.
  RoutingState recorded(4, 2, /*record=*/true);
  recorded.admit(10, ends);
  PlanPromptInChunks(planner, recorded, 10, 4, 2, rows, {9});
  const RoutingSegment s = recorded.segment(10, 6, 9);
  EXPECT_EQ(s.turn_ends, (std::vector<uint32_t>{4, 6, 9}));
  const std::vector<uint8_t> bytes = s.serialize();
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "MOERSEG2");
  EXPECT_EQ(RoutingSegment::parse(bytes).turn_ends, s.turn_ends);
}

// The key of a cache shared by several rules: 0 where every rule's salt is 0; else equal for two requests'
// blocks exactly where every rule's salt is equal; one rule's salt alone; none, 0.
TEST(Planner, PrefixCacheSaltOfSeveralRules) {
  DispatchPolicy prefix = DispatchPolicy::mode("stable");
  prefix.lookahead = 2;
  DispatchPolicy sequence = prefix;
  sequence.scope = CapacityScope::kSequence;
  const DispatchPolicy greedy = DispatchPolicy::mode("greedy");
  const std::vector<RoutingRule> one = {RoutingRule::of(prefix)};
  const std::vector<RoutingRule> tokens_only = {RoutingRule::of(greedy), RoutingRule::of(greedy)};
  const std::vector<RoutingRule> both = {RoutingRule::of(greedy), RoutingRule::of(prefix)};
  const std::vector<RoutingRule> all = {RoutingRule::of(prefix), RoutingRule::of(sequence)};
  EXPECT_EQ(prefix_cache_salt(std::span<const RoutingRule>{}, 6, 8), 0u);
  EXPECT_EQ(prefix_cache_salt(tokens_only, 7, 8), 0u);
  for (uint32_t end : {4u, 6u, 7u, 9u}) {
    for (uint32_t L : {8u, 12u}) {
      EXPECT_EQ(prefix_cache_salt(one, end, L), prefix_cache_salt(prefix, end, L));
      EXPECT_EQ(prefix_cache_salt(both, end, L) == 0, prefix_cache_salt(prefix, end, L) == 0);
    }
  }
  // Prefix scope alone shares the block ending at 6 between L = 8 and 12; beside sequence scope it does not.
  EXPECT_EQ(prefix_cache_salt(both, 6, 8), prefix_cache_salt(both, 6, 12));
  EXPECT_NE(prefix_cache_salt(all, 6, 8), prefix_cache_salt(all, 6, 12));
  EXPECT_EQ(prefix_cache_salt(all, 6, 12), prefix_cache_salt(all, 6, 12));
  EXPECT_NE(prefix_cache_salt(both, 7, 8), prefix_cache_salt(both, 7, 12));
}

// The reserve in exact integers, as docs/routing.md gives it.
TEST(Planner, SequenceReserve) {
  // Rank 1 (h = the first choices so far): round(3 * (h + 1) * n / (2 * (p + 1 + E))), halves up.
  EXPECT_EQ(rules::prompt_pool_reserve(0, 0, 8, 4, 1), 2);     // round(21 / 10) = round(2.1)
  EXPECT_EQ(rules::prompt_pool_reserve(0, 1, 8, 4, 1), 2);     // round(18 / 12) = round(1.5)
  EXPECT_EQ(rules::prompt_pool_reserve(0, 2, 8, 4, 1), 1);     // round(15 / 14)
  EXPECT_EQ(rules::prompt_pool_reserve(0, 4, 8, 4, 1), 1);     // round(9 / 18) = round(0.5)
  EXPECT_EQ(rules::prompt_pool_reserve(0, 5, 8, 4, 1), 0);     // round(6 / 20)
  EXPECT_EQ(rules::prompt_pool_reserve(4, 0, 101, 8, 1), 83);  // round(1500 / 18) = round(83.33)
  // Rank j counts the h choices of rank < j so far with a prior of j: rank 3 with h = 10 of them.
  EXPECT_EQ(rules::prompt_pool_reserve(10, 0, 101, 8, 3), 217);  // round(3 * 13 * 100 / 18) = round(216.67)
  EXPECT_EQ(rules::prompt_pool_reserve(9, 7, 8, 4, 1), 0);       // the last row leaves nothing to reserve
  EXPECT_EQ(rules::prompt_pool_reserve(INT64_MAX / 2, 0, UINT32_MAX, 4, 7), INT64_MAX);  // beyond 64 bits
}

// The reserve's gate (docs/routing.md, the second worked example): E = 4, k = 2, cf 1.5 (ceil), a 9-token
// prompt: C = ceil(1.5 * 9 * 2 / 4) = 7. At p3 = (1, 3) expert 3 holds 3 slots and every row so far chose it
// (a = 4 choices, 6 with the prior k): the rest (n = 5 rows) is expected to bring 5 * 6 / 8 = 3.75 choices,
// and 4 * 3.75 = 15 is not more than 5 times the 3 slots of room left after this pair (4 n (a + k) = 120,
// 5 (C - count - 1) (p + 1 + E) = 120), so no reserve holds and the pair is kept; with the reserve
// (round(3 * (3 + 1) * 5 / 16) = 4, cap 3) it would have been refused and expert 3 would end with an empty
// slot. The gate keeps all 18 pairs in every chunking.
// The reserve's integer arithmetic against 128-bit references, on operands of every width around the fast
// paths' bounds (products within 64 bits; h below 2^30).
TEST(Planner, ReserveArithmeticMatchesWideReference) {
  std::mt19937_64 rng(17);
  const auto operand = [&] {
    const int bits = static_cast<int>(rng() % 65);
    const uint64_t v = bits == 64 ? rng() : rng() & ((uint64_t{1} << bits) - 1);
    return rng() % 4 == 0 ? v | (uint64_t{1} << (bits == 0 ? 0 : bits - 1)) : v;
  };
  for (int i = 0; i < 200000; ++i) {
    const uint64_t a = operand(), b = operand(), c = operand(), d = operand();
    const unsigned __int128 lhs = static_cast<unsigned __int128>(a) * b,
                            rhs = static_cast<unsigned __int128>(c) * d;
    ASSERT_EQ(rules::product_greater(a, b, c, d), lhs > rhs) << a << " " << b << " " << c << " " << d;
  }
  for (int i = 0; i < 200000; ++i) {
    const uint32_t length = static_cast<uint32_t>(operand());
    const uint32_t position = length == 0 ? 0 : static_cast<uint32_t>(rng() % length);
    const int64_t h = static_cast<int64_t>(operand() >> 2);
    const int E = 1 + static_cast<int>(rng() % 512), rank = 1 + static_cast<int>(rng() % 8);
    int64_t want = 0;
    if (position + 1 < length) {
      const unsigned __int128 n = length - 1 - position, den = 2 * (uint64_t{position} + 1 + E);
      const unsigned __int128 num = 3 * (static_cast<unsigned __int128>(h) + rank) * n;
      want = num >> 64 != 0 ? INT64_MAX : static_cast<int64_t>((num + den / 2) / den);
    }
    ASSERT_EQ(rules::prompt_pool_reserve(h, position, length, E, rank), want)
        << h << " " << position << " " << length << " " << E << " " << rank;
  }
}

TEST(Planner, SequenceReserveGate) {
  EXPECT_FALSE(rules::prompt_pool_reserve_holds(4, 3, 3, 9, 4, 2));    // 120 > 120 is false
  EXPECT_TRUE(rules::prompt_pool_reserve_holds(4, 2, 3, 9, 4, 2));     // 120 > 80
  EXPECT_TRUE(rules::prompt_pool_reserve_holds(0, -1, 3, 9, 4, 2));    // a full pool: nothing to decide
  EXPECT_FALSE(rules::prompt_pool_reserve_holds(100, 0, 8, 9, 4, 2));  // the last row
  // Exact beyond 64 bits (73- and 74-bit products): L = 2^32 - 1, p = 2^31, a = 2^40, so 4 n (a + k) is about
  // 2^73 against 5 room (2^31 + 5): about 2^73.3 with room 2^40, 2^72.3 with room 2^39.
  const uint32_t big = UINT32_MAX, mid = uint32_t{1} << 31;
  EXPECT_FALSE(rules::prompt_pool_reserve_holds(int64_t{1} << 40, int64_t{1} << 40, mid, big, 4, 2));
  EXPECT_TRUE(rules::prompt_pool_reserve_holds(int64_t{1} << 40, int64_t{1} << 39, mid, big, 4, 2));
  EXPECT_TRUE(rules::product_greater(UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX - 1));
  EXPECT_FALSE(rules::product_greater(UINT64_MAX - 1, UINT64_MAX, UINT64_MAX, UINT64_MAX - 1));
  EXPECT_TRUE(
      rules::product_greater(uint64_t{1} << 32, uint64_t{1} << 32, UINT64_MAX, 1));  // 2^64 > 2^64 - 1

  const std::vector<std::vector<int32_t>> prompt = {{3, 1}, {3, 2}, {3, 0}, {1, 3}, {2, 1},
                                                    {2, 3}, {0, 1}, {3, 2}, {3, 0}};
  const DispatchPolicy p = Policy(CapacityScope::kSequence, Priority::kRequest, 1.5);
  for (const std::vector<int>& chunks : {std::vector<int>{9}, {4, 5}, {1, 3, 5}, {3, 1, 1, 4}}) {
    SCOPED_TRACE(::testing::PrintToString(chunks));
    RoutingState state(4, 2);
    state.admit(3, 9);
    DispatchPlanner planner(4, 2, p);
    std::vector<PairStatus> got;
    for (const DispatchPlan& plan : PlanPromptInChunks(planner, state, 3, 4, 2, prompt, chunks))
      got.insert(got.end(), plan.pair_status.begin(), plan.pair_status.end());
    EXPECT_EQ(got, std::vector<PairStatus>(18, kKept));
    EXPECT_EQ(state.find(3)->slots_held, (std::vector<int32_t>{3, 4, 4, 7}));
  }
}

// A state made without a top_k takes the first planner's for its sequence-scope counts; a planner of another
// top_k is refused before anything changes.
TEST(Planner, SequenceCountsKeepTheirTopK) {
  const DispatchPolicy p = Policy(CapacityScope::kSequence, Priority::kRequest, 1.0);
  RoutingState state(4);
  state.admit(1, 4);
  state.admit(2, 4);
  DispatchPlanner two(4, 2, p), three(4, 3, p);
  DispatchPlan plan;
  two.plan(MakeRoutes(4, 2, {{0, 1}, {1, 2}}), std::vector<TokenMeta>{{1, 0}, {1, 1}}, &state, plan);
  EXPECT_EQ(state.find(1)->higher_choices.size(), 8u);
  try {
    three.plan(MakeRoutes(4, 3, {{0, 1, 2}}), std::vector<TokenMeta>{{2, 0}}, &state, plan);
    FAIL() << "a planner of top_k 3 accepted counts of top_k 2";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("top_k 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(state.find(2)->next_position, 0u);
  EXPECT_TRUE(state.find(2)->higher_choices.empty());
}

// Without a routing state a request's rows in the batch are its whole prompt: the plan of admitting it with
// L = its row count and planning it in one call.
TEST(Planner, SequenceWithoutStateIsTheWholePrompt) {
  std::vector<std::vector<int32_t>> ranked;
  for (int t = 0; t < 10; ++t) ranked.push_back({t % 4 == 3 ? 2 : 0, 1});
  const TokenRoutes routes = MakeRoutes(4, 2, ranked);
  const DispatchPolicy p = Policy(CapacityScope::kSequence, Priority::kRequest, 1.0);
  const DispatchPlan stateless = Plan(p, routes, OneRequest(10, 3));
  RoutingState state(4, 2);
  state.admit(3, 10);
  const DispatchPlan admitted = Plan(p, routes, OneRequest(10, 3), &state);
  EXPECT_EQ(stateless.pair_status, admitted.pair_status);
  EXPECT_EQ(stateless.pair_expert, admitted.pair_expert);
  EXPECT_GT(stateless.num_dropped, 0);
}

// The request lifecycle: every misuse is an error naming the request, and changes nothing.
TEST(Planner, SequenceLifecycleErrorsChangeNothing) {
  const TokenRoutes two = MakeRoutes(4, 2, {{0, 1}, {0, 1}});
  const DispatchPolicy p = Policy(CapacityScope::kSequence, Priority::kRequest, 1.0);
  RoutingState state(4, 2);
  // Not admitted.
  ExpectInvalid([&] { Plan(p, two, OneRequest(2, 5), &state); },
                "request 5: sequence and prefix scopes need the request admitted");
  EXPECT_EQ(state.num_requests(), 0u);
  state.admit(5, 6);
  ExpectInvalid([&] { state.admit(5, 6); }, "request 5 is already admitted");
  ExpectInvalid([&] { state.admit(9, 0); }, "request 9: prompt_length must be >= 1");
  ExpectInvalid([&] { state.release(8); }, "request 8 cannot be released");
  // Positions that do not start at 0, skip, or go back.
  ExpectInvalid([&] { Plan(p, two, {{5, 1}, {5, 2}}, &state); }, "row 0 has position 1 where 0 was expected");
  ExpectInvalid([&] { Plan(p, two, {{5, 0}, {5, 2}}, &state); }, "row 1 has position 2 where 1 was expected");
  Plan(p, two, OneRequest(2, 5), &state);
  const RoutingState::Request before = *state.find(5);
  ExpectInvalid([&] { Plan(p, two, OneRequest(2, 5), &state); }, "row 0 has position 0 where 2 was expected");
  // A stranger in the same batch that was not admitted: the whole batch is refused, state untouched.
  ExpectInvalid(
      [&] {
        Plan(p, two, {{5, 2}, {6, 0}}, &state);
      },
      "request 6: sequence and prefix scopes need");
  EXPECT_EQ(state.find(5)->slots_held, before.slots_held);
  EXPECT_EQ(state.find(5)->next_position, before.next_position);
  // A state made for another layer shape.
  RoutingState other_experts(8, 2), other_k(4, 1);
  other_experts.admit(5, 6);
  other_k.admit(5, 6);
  ExpectInvalid([&] { Plan(p, two, OneRequest(2, 5), &other_experts); },
                "routing state is for 8 experts, not 4");
  ExpectInvalid([&] { Plan(p, two, OneRequest(2, 5), &other_k); }, "routing state is for top_k 1, not 2");
  state.release(5);
  EXPECT_EQ(state.find(5), nullptr);
  EXPECT_FALSE(state.release_if_held(5));
}

TEST(Planner, DroplessKeepsEveryPair) {
  std::vector<std::vector<int32_t>> ranked(100, std::vector<int32_t>{3, 1});
  const DispatchPlan plan =
      Plan(Policy(CapacityScope::kNone, Priority::kArrival, 0.01), MakeRoutes(4, 2, ranked), OneRequest(100));
  EXPECT_EQ(plan.num_kept, 200);
  EXPECT_EQ(plan.num_dropped, 0);
  EXPECT_EQ(plan.expert_load[3], 100);
  EXPECT_EQ(plan.expert_capacity[3], -1);
}

TEST(Planner, MinCapacityLiftsBatchCapacity) {
  DispatchPolicy p = Policy(CapacityScope::kBatch, Priority::kArrival, 0.1);
  p.min_capacity = 4;
  const DispatchPlan plan =
      Plan(p, MakeRoutes(8, 1, std::vector<std::vector<int32_t>>(10, {0})), OneRequest(10));
  EXPECT_EQ(plan.batch_capacity, 4);
  EXPECT_EQ(plan.num_kept, 4);
}

TEST(Planner, UnavailableRanksAreDropped) {
  const DispatchPlan plan = Plan(Policy(CapacityScope::kNone, Priority::kArrival, 1.0),
                                 MakeRoutes(4, 2, {{2, -1}, {1, 0}}), OneRequest(2));
  EXPECT_EQ((std::vector<PairStatus>{kKept, kDropped, kKept, kKept}), plan.pair_status);
  EXPECT_EQ(plan.pair_expert[1], -1);
}

TEST(Planner, SurvivorRenormalisationIsOptIn) {
  // E=2, k=2, C=1. j=0: row 0 -> expert 0 kept, row 1 -> expert 1 kept; j=1: both experts are full, so each
  // row keeps one pair of two.
  const TokenRoutes routes = MakeRoutes(2, 2, {{0, 1}, {1, 0}}, {{0.75f, 0.25f}, {0.6f, 0.4f}});
  DispatchPolicy p = Policy(CapacityScope::kBatch, Priority::kArrival, 0.5);
  const DispatchPlan plain = Plan(p, routes, OneRequest(2));
  EXPECT_EQ((std::vector<PairStatus>{kKept, kDropped, kKept, kDropped}), plain.pair_status);
  EXPECT_EQ(plain.pair_weight[0], 0.75f);
  EXPECT_EQ(plain.pair_weight[2], 0.6f);
  p.renormalize_survivors = true;
  const DispatchPlan renorm = Plan(p, routes, OneRequest(2));
  EXPECT_FLOAT_EQ(renorm.pair_weight[0], 1.0f);
  EXPECT_FLOAT_EQ(renorm.pair_weight[2], 1.0f);
  EXPECT_EQ(renorm.pair_weight[1], 0.0f);
}

// Batch scope planned in slices (router/rules/slice_rules.h): random batches (with unavailable ranks and
// renormalisation) cut into random slices; each slice planned from its rows and the exclusive scan of the
// slices' claim counts alone equals the whole batch's plan on its rows (expert, weight bits, status), its
// kept pairs in the whole batch's slot order; and the claim indices are the whole batch's slots.
TEST(Planner, BatchScopeInSlicesEqualsTheWholeBatch) {
  std::mt19937_64 rng(34);
  for (int trial = 0; trial < 200; ++trial) {
    const int E = 2 + static_cast<int>(rng() % 9), k = 1 + static_cast<int>(rng() % std::min(E, 4));
    const int T = static_cast<int>(rng() % 60);
    DispatchPolicy policy = Policy(CapacityScope::kBatch, Priority::kArrival, 0.5 + (rng() % 8) * 0.25);
    policy.renormalize_survivors = trial % 3 == 0;
    std::vector<std::vector<int32_t>> ranked(T);
    std::vector<std::vector<float>> weights(T);
    for (int t = 0; t < T; ++t) {
      std::vector<int32_t> all(E);
      for (int e = 0; e < E; ++e) all[e] = e;
      std::shuffle(all.begin(), all.end(), rng);
      ranked[t].assign(all.begin(), all.begin() + k);
      if (rng() % 7 == 0) ranked[t][k - 1] = -1;  // an unavailable rank
      for (int j = 0; j < k; ++j) weights[t].push_back(static_cast<float>(rng() % 100 + 1) / 100.0f);
    }
    std::vector<TokenMeta> meta(T);
    for (int t = 0; t < T; ++t) meta[t] = {static_cast<uint64_t>(rng() % 5), static_cast<uint32_t>(t)};
    const TokenRoutes whole = T > 0 ? MakeRoutes(E, k, ranked, weights) : TokenRoutes{0, E, k, k, {}, {}, {}};
    const DispatchPlan want = Plan(policy, whole, meta);
    // Slices and their claims.
    const int S = 1 + static_cast<int>(rng() % 4);
    std::vector<int> cut = {0, T};
    for (int s = 1; s < S; ++s) cut.push_back(static_cast<int>(rng() % (T + 1)));
    std::sort(cut.begin(), cut.end());
    std::vector<TokenRoutes> slices;
    std::vector<int64_t> claims(static_cast<size_t>(S) * k * E, 0);  // [s][j][e]
    for (int s = 0; s < S; ++s) {
      std::vector<std::vector<int32_t>> r(ranked.begin() + cut[s], ranked.begin() + cut[s + 1]);
      std::vector<std::vector<float>> w(weights.begin() + cut[s], weights.begin() + cut[s + 1]);
      slices.push_back(r.empty() ? TokenRoutes{0, E, k, k, {}, {}, {}} : MakeRoutes(E, k, r, w));
      const rules::RouteArrays a{slices[s].experts.data(), slices[s].weights.data(), k, k};
      rules::count_slice_claims(a, cut[s + 1] - cut[s], E, &claims[static_cast<size_t>(s) * k * E]);
    }
    std::vector<int64_t> before(claims.size());
    for (int e = 0; e < E; ++e) {  // per expert: [s][j] in, [s][j] out
      std::vector<int64_t> c(static_cast<size_t>(S) * k), b(c.size());
      for (int s = 0; s < S; ++s)
        for (int j = 0; j < k; ++j) c[s * k + j] = claims[(static_cast<size_t>(s) * k + j) * E + e];
      rules::slice_claims_before(c.data(), S, k, b.data());
      for (int s = 0; s < S; ++s)
        for (int j = 0; j < k; ++j) before[(static_cast<size_t>(s) * k + j) * E + e] = b[s * k + j];
    }
    DispatchPlanner planner(E, k, policy);
    for (int s = 0; s < S; ++s) {
      DispatchPlan got;
      const std::vector<TokenMeta> m(meta.begin() + cut[s], meta.begin() + cut[s + 1]);
      planner.plan_slice(slices[s], m, &before[static_cast<size_t>(s) * k * E], want.batch_capacity, got);
      for (int t = cut[s]; t < cut[s + 1]; ++t) {
        for (int j = 0; j < k; ++j) {
          const size_t p = static_cast<size_t>(t) * k + j, q = static_cast<size_t>(t - cut[s]) * k + j;
          ASSERT_EQ(got.pair_expert[q], want.pair_expert[p]) << "trial " << trial;
          ASSERT_EQ(got.pair_status[q], want.pair_status[p]) << "trial " << trial;
          ASSERT_EQ(std::bit_cast<uint32_t>(got.pair_weight[q]),
                    std::bit_cast<uint32_t>(want.pair_weight[p]));
        }
      }
      // The slice's kept pairs at e are the whole batch's, in its slot order.
      for (int e = 0; e < E; ++e) {
        std::vector<int32_t> mine;
        for (int32_t g = want.expert_offsets[e]; g < want.expert_offsets[e + 1]; ++g) {
          const int32_t t = want.slot_pairs[g] / k;
          if (t >= cut[s] && t < cut[s + 1]) mine.push_back(want.slot_pairs[g] - cut[s] * k);
        }
        const std::vector<int32_t> slots(got.slot_pairs.begin() + got.expert_offsets[e],
                                         got.slot_pairs.begin() + got.expert_offsets[e + 1]);
        ASSERT_EQ(slots, mine) << "trial " << trial << " expert " << e;
      }
      EXPECT_EQ(got.batch_capacity, want.batch_capacity);
    }
  }
  ExpectInvalid(
      [] {
        DispatchPlanner p(4, 2, Policy(CapacityScope::kRequest, Priority::kArrival, 1.0));
        DispatchPlan out;
        const int64_t before[8] = {};
        p.plan_slice(TokenRoutes{0, 4, 2, 2, {}, {}, {}}, {}, before, 1, out);
      },
      "plan_slice needs batch scope, arrival priority and drop");
}

TEST(Planner, RejectsMismatchedInputs) {
  const TokenRoutes routes = MakeRoutes(4, 2, {{0, 1}, {1, 2}});
  ExpectInvalid([&] { Plan(DispatchPolicy::mode("greedy"), routes, OneRequest(3)); },
                "token metadata has 3 rows but the routes have 2");
  ExpectInvalid(
      [&] {
        Plan(DispatchPolicy::mode("stable"), routes, {{1, 0}, {1, 0}});
      },
      "both claim request 1 position 0");
  DispatchPolicy reroute = DispatchPolicy::mode("greedy");
  reroute.overflow = Overflow::kReroute;
  ExpectInvalid([&] { Plan(reroute, routes, OneRequest(2)); },
                "routes rank 2 experts per token but the policy needs 3");
  DispatchPlanner planner(8, 2, DispatchPolicy::mode("greedy"));
  DispatchPlan plan;
  ExpectInvalid([&] { planner.plan(routes, OneRequest(2), nullptr, plan); }, "routes are for 4 experts");
  ExpectInvalid([] { DispatchPlanner(4, 5, DispatchPolicy{}); }, "top_k (5) must be in [1, num_experts=4]");
}

TEST(Planner, EmptyBatch) {
  TokenRoutes routes;
  routes.resize(0, 4, 2, 2);
  const DispatchPlan plan = Plan(DispatchPolicy::mode("stable"), routes, {});
  EXPECT_EQ(plan.num_pairs(), 0);
  EXPECT_EQ((std::vector<int32_t>{0, 0, 0, 0, 0}), plan.expert_offsets);
}

TEST(Planner, PlanningAllocatesNothingAfterWarmUp) {
  const int E = 16, k = 2, T = 512;
  std::vector<std::vector<int32_t>> ranked;
  std::vector<TokenMeta> meta;
  for (int t = 0; t < T; ++t) {
    ranked.push_back({t % 5, 5 + t % 11, (t * 7) % 16 == t % 5 ? 15 : (t * 7) % 16});
    meta.push_back({static_cast<uint64_t>(1000 - t / 16), static_cast<uint32_t>(t % 16)});
  }
  const TokenRoutes routes = MakeRoutes(E, k, ranked);
  for (const char* mode : {"greedy", "stable", "rank-only"}) {
    for (Overflow overflow : {Overflow::kDrop, Overflow::kReroute}) {
      DispatchPolicy p = DispatchPolicy::mode(mode);
      p.overflow = overflow;
      p.capacity_factor = 0.5;
      DispatchPlanner planner(E, k, p);
      planner.reserve(T);
      DispatchPlan plan;
      plan.reserve(T, k, E);
      planner.plan(routes, meta, nullptr, plan);  // warm-up
      const long before = moe::testing::allocation_count();
      for (int i = 0; i < 3; ++i) planner.plan(routes, meta, nullptr, plan);
      EXPECT_EQ(moe::testing::allocation_count() - before, 0) << mode;
    }
  }
}

}  // namespace
}  // namespace moe

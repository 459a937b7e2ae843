// Property tests over thousands of random batches: which policies make a request's plan independent of the
// strangers sharing its batch and of the row order, and that the others do not.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "router/dispatch_planner.h"
#include "router/topk_router.h"
#include "tests/support/serving_planner.h"

namespace moe {
namespace {

// The serving tests' shapes and logits (tests/support/serving_planner.h): a token's logits depend only on
// (request id, position), with a skewed popularity so that capacity binds.
constexpr int kExperts = testing::kServingExperts;
constexpr int kTopK = testing::kServingTopK;
constexpr int kRanked = testing::kServingRanked;  // top_k + reroute depth 2

struct Request {
  uint64_t id;
  uint32_t first_position;
  int length;
};

struct Batch {
  std::vector<TokenMeta> meta;
  std::vector<float> logits;
};

Batch MakeBatch(const std::vector<Request>& requests, std::mt19937_64* shuffle) {
  Batch b;
  for (const Request& r : requests) {
    for (int i = 0; i < r.length; ++i) b.meta.push_back({r.id, r.first_position + static_cast<uint32_t>(i)});
  }
  if (shuffle) std::shuffle(b.meta.begin(), b.meta.end(), *shuffle);
  b.logits.resize(b.meta.size() * kExperts);
  for (size_t t = 0; t < b.meta.size(); ++t) {
    testing::ServingLogits(b.meta[t].request_id, b.meta[t].position, &b.logits[t * kExperts]);
  }
  return b;
}

// One pair's outcome: expert, weight bits and status.
struct Outcome {
  int32_t expert;
  uint32_t weight_bits;
  PairStatus status;
  bool operator==(const Outcome&) const = default;
};

// The probe's outcomes in (position, j) order.
std::vector<Outcome> ProbeOutcomes(const Batch& b, const DispatchPlan& plan, uint64_t probe) {
  std::vector<std::pair<uint32_t, int>> rows;
  for (size_t t = 0; t < b.meta.size(); ++t) {
    if (b.meta[t].request_id == probe) rows.push_back({b.meta[t].position, static_cast<int>(t)});
  }
  std::sort(rows.begin(), rows.end());
  std::vector<Outcome> out;
  for (auto [position, t] : rows) {
    for (int j = 0; j < kTopK; ++j) {
      const int64_t p = static_cast<int64_t>(t) * kTopK + j;
      out.push_back({plan.pair_expert[p], std::bit_cast<uint32_t>(plan.pair_weight[p]), plan.pair_status[p]});
    }
  }
  return out;
}

RouterConfig Config() {
  RouterConfig c = RouterConfig::preset("mixtral");
  c.num_experts = kExperts;
  c.top_k = kTopK;
  return c;
}

DispatchPlan PlanBatch(const Batch& b, const DispatchPolicy& policy, RoutingState* state = nullptr) {
  TopKRouter router(Config(), kRanked);
  TokenRoutes routes;
  router.route(b.logits.data(), static_cast<int>(b.meta.size()), routes);
  DispatchPlanner planner(kExperts, kTopK, policy);
  DispatchPlan plan;
  planner.plan(routes, b.meta, state, plan);
  return plan;
}

struct Search {
  int trials = 0;
  int displaced = 0;  // trials where the probe's plan differed from the probe alone
  int64_t probe_drops_alone = 0;
};

// Routes a probe request alone, then with `trials` random stranger mixes in shuffled row order.
Search SearchForDisplacement(const DispatchPolicy& policy, int trials, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Search s;
  for (int trial = 0; trial < trials; ++trial) {
    const Request probe{1000 + rng() % 50, 0, 1 + static_cast<int>(rng() % 24)};
    const Batch alone = MakeBatch({probe}, nullptr);
    const std::vector<Outcome> reference = ProbeOutcomes(alone, PlanBatch(alone, policy), probe.id);
    for (const Outcome& o : reference) s.probe_drops_alone += o.status != PairStatus::kKept;

    std::vector<Request> requests = {probe};
    const int strangers = static_cast<int>(rng() % 12);
    for (int i = 0; i < strangers; ++i) {
      uint64_t id;
      do id = rng() % 2000;
      while (id == probe.id);
      bool duplicate = false;
      for (const Request& r : requests) duplicate |= r.id == id;
      if (duplicate) continue;
      requests.push_back({id, 0, 1 + static_cast<int>(rng() % 40)});
    }
    const Batch mixed = MakeBatch(requests, &rng);
    ++s.trials;
    if (ProbeOutcomes(mixed, PlanBatch(mixed, policy), probe.id) != reference) ++s.displaced;
  }
  return s;
}

DispatchPolicy WithOverflow(DispatchPolicy p, Overflow overflow, double cf) {
  p.overflow = overflow;
  p.reroute_depth = 2;
  p.capacity_factor = cf;
  return p;
}

class InvariantPolicies : public ::testing::TestWithParam<std::tuple<CapacityScope, Priority, Overflow>> {};

TEST_P(InvariantPolicies, ProbePlanIgnoresStrangersAndRowOrder) {
  const auto [scope, priority, overflow] = GetParam();
  DispatchPolicy p;
  p.scope = scope;
  p.priority = priority;
  const Search s = SearchForDisplacement(WithOverflow(p, overflow, 1.0), 1500, 11);
  EXPECT_EQ(s.trials, 1500);
  EXPECT_EQ(s.displaced, 0);
  if (scope != CapacityScope::kNone) {
    EXPECT_GT(s.probe_drops_alone, 0) << "capacity must bind for the property to mean anything";
  }
}

INSTANTIATE_TEST_SUITE_P(Router, InvariantPolicies,
                         ::testing::Combine(::testing::Values(CapacityScope::kRequest, CapacityScope::kCausal,
                                                              CapacityScope::kSequence, CapacityScope::kNone),
                                            ::testing::Values(Priority::kRequest),
                                            ::testing::Values(Overflow::kDrop, Overflow::kReroute)));

// A random priority keyed by (request_id, position) keeps request scope invariant too.
INSTANTIATE_TEST_SUITE_P(RouterRandomPriority, InvariantPolicies,
                         ::testing::Combine(::testing::Values(CapacityScope::kRequest),
                                            ::testing::Values(Priority::kRandom),
                                            ::testing::Values(Overflow::kDrop, Overflow::kReroute)));

// Causal and sequence scopes decide by position whatever the priority says.
INSTANTIATE_TEST_SUITE_P(
    RouterAnyPriority, InvariantPolicies,
    ::testing::Combine(::testing::Values(CapacityScope::kCausal, CapacityScope::kSequence),
                       ::testing::Values(Priority::kArrival, Priority::kScore, Priority::kRandom),
                       ::testing::Values(Overflow::kDrop, Overflow::kReroute)));

TEST(Invariance, StableModeIsInvariant) {
  const Search s = SearchForDisplacement(DispatchPolicy::mode("stable"), 2000, 5);
  EXPECT_EQ(s.displaced, 0);
}

TEST(Invariance, GreedyModeDisplacesTheProbe) {
  const Search s =
      SearchForDisplacement(WithOverflow(DispatchPolicy::mode("greedy"), Overflow::kDrop, 1.0), 500, 5);
  EXPECT_GT(s.displaced, 25) << "greedy dispatch should let strangers take the probe's slots";
}

TEST(Invariance, GreedyWithRerouteDisplacesTheProbe) {
  const Search s =
      SearchForDisplacement(WithOverflow(DispatchPolicy::mode("greedy"), Overflow::kReroute, 1.0), 500, 6);
  EXPECT_GT(s.displaced, 25);
}

TEST(Invariance, RankOnlyStillDisplacesTheProbe) {
  // Ranking by request alone does not protect a request from strangers with smaller ids.
  const Search s =
      SearchForDisplacement(WithOverflow(DispatchPolicy::mode("rank-only"), Overflow::kDrop, 1.0), 500, 7);
  EXPECT_GT(s.displaced, 25);
}

TEST(Invariance, CausalPlanIgnoresChunkingAndStrangers) {
  // One request prefilled in random chunks, each chunk co-batched with random strangers (whose own causal
  // state advances too), equals the request planned whole and alone.
  DispatchPolicy p = WithOverflow(DispatchPolicy{}, Overflow::kReroute, 1.0);
  p.scope = CapacityScope::kCausal;
  p.priority = Priority::kArrival;
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 300; ++trial) {
    const int length = 1 + static_cast<int>(rng() % 60);
    const Request probe{7, 0, length};
    const Batch whole = MakeBatch({probe}, nullptr);
    const std::vector<Outcome> reference = ProbeOutcomes(whole, PlanBatch(whole, p), probe.id);

    RoutingState state(kExperts);
    std::vector<Outcome> chunked;
    std::vector<uint32_t> stranger_next(5, 0);
    for (int begin = 0; begin < length;) {
      const int size = std::min(length - begin, 1 + static_cast<int>(rng() % 17));
      std::vector<Request> requests = {{probe.id, static_cast<uint32_t>(begin), size}};
      for (int s = 0; s < 5; ++s) {
        if (rng() % 2) continue;
        const int n = 1 + static_cast<int>(rng() % 9);
        requests.push_back({100 + static_cast<uint64_t>(s), stranger_next[s], n});
        stranger_next[s] += n;
      }
      const Batch b = MakeBatch(requests, &rng);
      const std::vector<Outcome> part = ProbeOutcomes(b, PlanBatch(b, p, &state), probe.id);
      chunked.insert(chunked.end(), part.begin(), part.end());
      begin += size;
    }
    ASSERT_EQ(chunked, reference) << "trial " << trial;
  }
}

// Sequence scope (the stable mode) under a serving engine: a probe request admitted with its prompt length,
// prefilled in random chunks and then decoded one token a step, every step co-batched with random admitted
// strangers (their own prompts and decodes in flight) in shuffled row order, with overflow drop and reroute:
// its outcomes equal the probe alone and unchunked (its whole prompt and decode rows in one call).
TEST(Invariance, SequencePlanIgnoresChunkingStrangersAndOrder) {
  std::mt19937_64 rng(2024);
  int64_t probe_drops = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    DispatchPolicy p = DispatchPolicy::mode("stable");
    p.overflow = trial % 2 ? Overflow::kReroute : Overflow::kDrop;
    p.reroute_depth = 2;
    p.capacity_factor = trial % 3 == 0 ? 0.75 : 1.0;
    const uint32_t prompt = 1 + static_cast<uint32_t>(rng() % 48);
    const int decode = static_cast<int>(rng() % 6);
    const uint64_t probe = 7;
    const Batch whole = MakeBatch({{probe, 0, static_cast<int>(prompt) + decode}}, nullptr);
    RoutingState alone_state(kExperts, kTopK);
    alone_state.admit(probe, prompt);
    const std::vector<Outcome> reference = ProbeOutcomes(whole, PlanBatch(whole, p, &alone_state), probe);
    for (const Outcome& o : reference) probe_drops += o.status != PairStatus::kKept;

    RoutingState state(kExperts, kTopK);
    state.admit(probe, prompt);
    struct Stranger {
      uint64_t id;
      uint32_t prompt, next;
    };
    std::vector<Stranger> strangers;
    uint64_t next_id = 100;
    std::vector<Outcome> served;
    uint32_t at = 0;
    const uint32_t end = prompt + static_cast<uint32_t>(decode);
    while (at < end) {
      // The probe's rows this step: a prompt chunk of random size, or one decode row.
      const uint32_t n = at < prompt ? std::min(prompt - at, 1 + static_cast<uint32_t>(rng() % 16)) : 1;
      std::vector<Request> requests = {{probe, at, static_cast<int>(n)}};
      // Strangers arrive (admitted with their prompt length), advance by a chunk or a decode row, and finish.
      if (rng() % 2) {
        strangers.push_back({next_id++, 1 + static_cast<uint32_t>(rng() % 40), 0});
        state.admit(strangers.back().id, strangers.back().prompt);
      }
      for (Stranger& st : strangers) {
        const uint32_t m =
            st.next < st.prompt ? std::min(st.prompt - st.next, 1 + static_cast<uint32_t>(rng() % 24)) : 1;
        requests.push_back({st.id, st.next, static_cast<int>(m)});
        st.next += m;
      }
      const Batch b = MakeBatch(requests, &rng);
      const std::vector<Outcome> part = ProbeOutcomes(b, PlanBatch(b, p, &state), probe);
      served.insert(served.end(), part.begin(), part.end());
      for (size_t i = 0; i < strangers.size();) {
        if (strangers[i].next >= strangers[i].prompt + 3) {
          state.release(strangers[i].id);
          strangers.erase(strangers.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
      at += n;
    }
    ASSERT_EQ(served, reference) << "trial " << trial << ": prompt " << prompt << ", decode " << decode;
  }
  EXPECT_GT(probe_drops, 0) << "capacity must bind for the property to mean anything";
}

using moe::testing::ServingTally;

// The CPU planner under serving trials (tests/support/serving_planner.h).
ServingTally ServeProbes(const DispatchPolicy& base, int trials, uint64_t seed,
                         const moe::testing::ServingDrawOptions& opt, bool stop_at_mismatch) {
  const ServingTally t =
      moe::testing::ServeProbes(base, trials, seed, opt, stop_at_mismatch, [](const DispatchPolicy& p) {
        return DispatchPlanner(moe::testing::kServingExperts, moe::testing::kServingTopK, p);
      });
  if (stop_at_mismatch && t.mismatched > 0) {
    ADD_FAILURE() << "trial " << t.first_mismatch << ": " << t.first_mismatch_trial;
  }
  return t;
}

// Prefix scope (the stable mode) under everything a serving engine does (docs/determinism.md clause 2b; the
// engine model of sim/serving driven by its lifecycle driver): a probe whose first P positions come from a
// prefix cache (a writer that shared them, with another prompt length where prefix_cache_salt allows),
// prefilled in random chunks, decoding with speculative drafts partly rejected, preempted and recomputed
// from what the cache still holds, among strangers doing the same, rows shuffled: 2400 draws, each equal to
// the probe alone in one call. (Rolling a prompt back into its prompt rows, which no engine here does, is
// RoutingStateLifecycle.RollbackForgetsThePositions.)
TEST(Invariance, PrefixScopeServesCachedPreemptedAndSpeculatedProbesAsAlone) {
  const ServingTally t = ServeProbes(DispatchPolicy::mode("stable"), 2400, 77, {}, true);
  EXPECT_EQ(t.mismatched, 0);
  EXPECT_GT(t.probe_drops, 0) << "capacity must bind for the property to mean anything";
  EXPECT_GT(t.cached, t.trials / 2);
  EXPECT_GT(t.preempted, t.trials / 10);
  EXPECT_GT(t.speculated, t.trials / 10);
}

// The same engine for causal scope (no decision depends on the prompt length) and for sequence scope with
// a cache keyed by its salt (the prompt length): both are serving-invariant too.
TEST(Invariance, CausalAndSaltedSequenceScopesServeProbesAsAlone) {
  DispatchPolicy causal = DispatchPolicy::mode("stable");
  causal.scope = CapacityScope::kCausal;
  EXPECT_EQ(ServeProbes(causal, 600, 78, {}, true).mismatched, 0);
  DispatchPolicy sequence = DispatchPolicy::mode("stable");
  sequence.scope = CapacityScope::kSequence;
  EXPECT_EQ(ServeProbes(sequence, 600, 79, {}, true).mismatched, 0);
}

// Counter-check, the bug prefix scope fixes: sequence scope sizes a prompt's budget from its whole length, so
// a prefix cached by a request of another prompt length (a cache keyed by tokens alone) is not the probe's
// routing - the probe served with it differs from the probe alone.
TEST(Invariance, SequenceScopeWithATokenKeyedCacheDiverges) {
  DispatchPolicy sequence = DispatchPolicy::mode("stable");
  sequence.scope = CapacityScope::kSequence;
  moe::testing::ServingDrawOptions forge;
  forge.forge = true;
  const ServingTally t = ServeProbes(sequence, 600, 80, forge, false);
  EXPECT_GT(t.mismatched, t.trials / 10) << t.mismatched << " of " << t.trials;
}

// Conversations (docs/routing.md, "Conversations"): a conversation of 2-4 turns, each turn a new request
// whose prompt is every earlier turn's prompt and answer plus a new message, admitted with its turn ends.
// Each turn is served among admitted strangers in shuffled rows, its first P positions restored from the
// previous turn's recorded segments (P drawn up to everything the previous turn computed; 0: recomputed), the
// rest prefilled in random chunks, its answer decoded one row a step. Every turn routes the previous turn's
// positions - prompt and answer - exactly as the previous turn did, the previous turn's block keys equal this
// turn's at every block end, and restoring from them is accepted. Drops inside the reused positions are
// counted (capacity must bind there), with the shipped W = 16 among the draws. Counter-checks: the same
// prompt admitted as one plain prompt ({L}) routes the previous turns' positions otherwise in many draws, and
// a segment whose key is forced onto a request of another prompt length changes its bits.
TEST(Invariance, ConversationTurnsRouteEarlierTurnsAsTheyWere) {
  std::mt19937_64 rng(35);
  int64_t reused_drops = 0, reused_drops_w16 = 0, restored = 0, plain_differs = 0, forged_differs = 0;
  const int kTrials = 400;
  for (int trial = 0; trial < kTrials; ++trial) {
    DispatchPolicy p = DispatchPolicy::mode("stable");
    const uint32_t lookaheads[] = {16, 16, 2, 5, 8, 32};
    p.lookahead = lookaheads[rng() % 6];
    const double cfs[] = {0.75, 1.0, 1.25};
    p.capacity_factor = cfs[rng() % 3];
    p.overflow = rng() % 3 == 0 ? Overflow::kReroute : Overflow::kDrop;
    p.reroute_depth = 2;
    const uint64_t probe = 5;
    const int turns = 2 + static_cast<int>(rng() % 3);
    std::vector<uint32_t> ends;     // the conversation so far
    std::vector<Outcome> previous;  // the previous turn's outcomes at positions [0, previous end)
    std::vector<RoutingSegment> previous_segments;  // one per position block of the previous turn
    for (int turn = 0; turn < turns; ++turn) {
      if (turn > 0)
        ends.push_back(static_cast<uint32_t>(previous.size() / kTopK));  // the previous answer's end
      ends.push_back((ends.empty() ? 0 : ends.back()) + 1 + static_cast<uint32_t>(rng() % 40));
      const uint32_t L = ends.back();
      const uint32_t answer = 1 + static_cast<uint32_t>(rng() % 12);
      const uint32_t total = L + answer;
      // Where the previous turn's routing is reused up to: a block end drawn in [0, what it computed].
      const uint32_t reused = previous.empty() ? 0 : static_cast<uint32_t>(previous.size() / kTopK);
      const uint32_t P = reused == 0 ? 0 : static_cast<uint32_t>(rng() % (reused + 1));
      RoutingState state(kExperts, kTopK, /*record=*/true);
      std::vector<RoutingSegment> prefix;
      for (const RoutingSegment& seg : previous_segments) {
        if (seg.end <= P) prefix.push_back(seg);
      }
      const uint32_t start = prefix.empty() ? 0 : prefix.back().end;
      ASSERT_NO_THROW(state.restore(probe, ends, prefix)) << "trial " << trial << " turn " << turn;
      restored += start > 0;
      for (const RoutingSegment& seg : prefix) {
        EXPECT_EQ(prefix_cache_salt(p, seg.end, seg.planned_turns()),
                  prefix_cache_salt(p, seg.end, std::span<const uint32_t>(ends)));
      }
      std::vector<Outcome> served(previous.begin(),
                                  previous.begin() + static_cast<std::ptrdiff_t>(start) * kTopK);
      uint64_t next_stranger = 100;
      for (uint32_t at = start; at < total;) {
        const uint32_t n = at < L ? std::min(L - at, 1 + static_cast<uint32_t>(rng() % 16)) : 1;
        std::vector<Request> requests = {{probe, at, static_cast<int>(n)}};
        for (int k = static_cast<int>(rng() % 3); k > 0; --k) {  // strangers, each a fresh prompt chunk
          const uint64_t id = next_stranger++;
          const uint32_t len = 1 + static_cast<uint32_t>(rng() % 24);
          state.admit(id, len);
          requests.push_back({id, 0, static_cast<int>(len)});
        }
        const Batch b = MakeBatch(requests, &rng);
        const std::vector<Outcome> part = ProbeOutcomes(b, PlanBatch(b, p, &state), probe);
        served.insert(served.end(), part.begin(), part.end());
        for (size_t r = 1; r < requests.size(); ++r) state.release(requests[r].id);
        at += n;
      }
      if (!previous.empty()) {
        ASSERT_TRUE(std::equal(previous.begin(), previous.end(), served.begin()))
            << "trial " << trial << " turn " << turn << ": W " << p.lookahead << ", cf " << p.capacity_factor;
        for (size_t x = 0; x < previous.size(); ++x) {
          const bool dropped = previous[x].status == PairStatus::kDropped;
          reused_drops += dropped;
          reused_drops_w16 += dropped && p.lookahead == 16;
        }
        // Counter-check: the same positions admitted as one plain prompt of L tokens.
        RoutingState plain(kExperts, kTopK);
        plain.admit(probe, L);
        const Batch whole = MakeBatch({{probe, 0, static_cast<int>(total)}}, nullptr);
        const std::vector<Outcome> as_plain = ProbeOutcomes(whole, PlanBatch(whole, p, &plain), probe);
        plain_differs += !std::equal(previous.begin(), previous.end(), as_plain.begin());
      }
      previous = served;
      previous_segments.clear();  // blocks of 1-8 positions tiling [0, total)
      for (uint32_t b = 0; b < total;) {
        const uint32_t e = std::min(total, b + 1 + static_cast<uint32_t>(rng() % 8));
        previous_segments.push_back(state.segment(probe, b, e));
        b = e;
      }
      // Counter-check: a segment ending within W of this turn's end, its key forced onto a single-turn
      // request of another prompt length (an engine whose key lacks the salt), is not that request's routing.
      if (turn == 0 && L > 1 && p.lookahead > 0) {
        const uint32_t end = L - 1;
        const uint32_t other = L + 1 + static_cast<uint32_t>(rng() % 8);
        RoutingSegment forged = state.segment(probe, 0, end);
        if (prefix_cache_salt(p, end, L) != prefix_cache_salt(p, end, other)) {
          forged.prompt_length = other;
          RoutingState cached(kExperts, kTopK);
          cached.restore(probe, other, std::vector<RoutingSegment>{forged});
          const Batch rest = MakeBatch({{probe, end, static_cast<int>(other - end)}}, nullptr);
          std::vector<Outcome> with_cache(served.begin(),
                                          served.begin() + static_cast<std::ptrdiff_t>(end) * kTopK);
          const std::vector<Outcome> tail = ProbeOutcomes(rest, PlanBatch(rest, p, &cached), probe);
          with_cache.insert(with_cache.end(), tail.begin(), tail.end());
          RoutingState alone(kExperts, kTopK);
          alone.admit(probe, other);
          const Batch whole = MakeBatch({{probe, 0, static_cast<int>(other)}}, nullptr);
          forged_differs += with_cache != ProbeOutcomes(whole, PlanBatch(whole, p, &alone), probe);
        }
      }
    }
  }
  std::printf("restored %lld reused drops %lld (W16 %lld) plain differs %lld forged differs %lld\n",
              (long long)restored, (long long)reused_drops, (long long)reused_drops_w16,
              (long long)plain_differs, (long long)forged_differs);
  EXPECT_GT(restored, kTrials / 2);
  EXPECT_GT(reused_drops, 0) << "capacity must bind inside the reused positions";
  EXPECT_GT(reused_drops_w16, 0) << "... under the shipped W = 16 too";
  EXPECT_GT(plain_differs, kTrials / 10) << "a plain prompt must route the earlier turns otherwise";
  EXPECT_GT(forged_differs, kTrials / 20) << "a forged key must change bits";
}

}  // namespace
}  // namespace moe

// Serving trials (tests/support/serving_trial.h) on a planner: the CPU planner or the GPU planner's OpenMP
// twin, which must both give every probe the plan of the probe alone.
#pragma once

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "base/splitmix64.h"
#include "router/dispatch_plan.h"
#include "router/dispatch_planner.h"
#include "router/topk_router.h"
#include "tests/support/serving_trial.h"

namespace moe::testing {

inline constexpr int kServingExperts = 8;
inline constexpr int kServingTopK = 2;
inline constexpr int kServingRanked = 4;  // top_k + reroute depth 2

// A row's logits from its content and position: a skewed popularity, so capacity binds.
inline void ServingLogits(uint64_t content, uint32_t position, float* out) {
  for (int e = 0; e < kServingExperts; ++e) {
    const uint64_t h = mix64(mix64(content * 1315423911ull + position) ^ static_cast<uint64_t>(e));
    const float noise = static_cast<float>(h >> 40) / static_cast<float>(1ull << 24);  // [0, 1)
    out[e] = 2.0f * noise - 0.4f * static_cast<float>(e);                              // low ids are popular
  }
}

struct ServingPair {
  int32_t expert;
  uint32_t weight_bits;
  PairStatus status;
  bool operator==(const ServingPair&) const = default;
};
struct ServingPairs {
  ServingPair pair[kServingTopK];
  bool operator==(const ServingPairs&) const = default;
};

// One forward pass of `planner` (anything with DispatchPlanner::plan's signature) over serving rows.
template <class Planner>
std::vector<ServingPairs> PlanServingRows(Planner& planner, const std::vector<ServingRow>& rows,
                                          RoutingState& state) {
  RouterConfig config = RouterConfig::preset("mixtral");
  config.num_experts = kServingExperts;
  config.top_k = kServingTopK;
  TopKRouter router(config, kServingRanked);
  std::vector<float> logits(rows.size() * kServingExperts);
  std::vector<TokenMeta> meta;
  for (size_t t = 0; t < rows.size(); ++t) {
    ServingLogits(rows[t].content, rows[t].meta.position, &logits[t * kServingExperts]);
    meta.push_back(rows[t].meta);
  }
  TokenRoutes routes;
  router.route(logits.data(), static_cast<int>(rows.size()), routes);
  DispatchPlan plan;
  planner.plan(routes, meta, &state, plan);
  std::vector<ServingPairs> out(rows.size());
  for (size_t t = 0; t < rows.size(); ++t) {
    for (int j = 0; j < kServingTopK; ++j) {
      const size_t p = t * kServingTopK + j;
      out[t].pair[j] = {plan.pair_expert[p], std::bit_cast<uint32_t>(plan.pair_weight[p]),
                        plan.pair_status[p]};
    }
  }
  return out;
}

struct ServingTally {
  int trials = 0, mismatched = 0, cached = 0, preempted = 0, speculated = 0;
  int64_t probe_drops = 0;
  int first_mismatch = -1;
  std::string first_mismatch_trial;
};

// `trials` serving trials under `base` (overflow drop / reroute, capacity factor 0.75 / 1 and lookahead
// 0, 2, 8, 64 varied over the trials), each replayed with make_planner(policy) on a recording state and
// compared with the CPU planner's probe alone. Stops at the first mismatch when `stop_at_mismatch`.
template <class MakePlanner>
ServingTally ServeProbes(const DispatchPolicy& base, int trials, uint64_t seed, const ServingDrawOptions& opt,
                         bool stop_at_mismatch, MakePlanner&& make_planner) {
  std::mt19937_64 rng(seed);
  ServingTally tally;
  const uint32_t lookaheads[] = {0, 2, 8, 64};
  for (int trial = 0; trial < trials; ++trial) {
    DispatchPolicy p = base;
    p.overflow = trial % 2 ? Overflow::kReroute : Overflow::kDrop;
    p.reroute_depth = 2;
    p.capacity_factor = trial % 3 == 0 ? 0.75 : 1.0;
    p.lookahead = lookaheads[(trial / 2) % 4];
    const ServingTrial t = DrawServingTrial(rng, p, opt);
    DispatchPlanner reference_planner(kServingExperts, kServingTopK, p);
    RoutingState alone(kServingExperts, kServingTopK);
    alone.admit(t.probe, t.prompt_length);
    const std::vector<ServingPairs> reference = PlanServingRows(reference_planner, ProbeAloneRows(t), alone);
    for (const ServingPairs& r : reference) {
      for (const ServingPair& o : r.pair) tally.probe_drops += o.status == PairStatus::kDropped;
    }
    auto planner = make_planner(p);
    RoutingState state(kServingExperts, kServingTopK, /*record=*/true);
    const std::vector<ServingPairs> served = ReplayServingTrial<ServingPairs>(
        t, state, [&](const std::vector<ServingRow>& rows, RoutingState& st) {
          return PlanServingRows(planner, rows, st);
        });
    ++tally.trials;
    tally.cached += t.cached > 0;
    tally.preempted += t.preemptions > 0;
    tally.speculated += t.rejected > 0;
    if (served != reference || state.num_requests() != 0) {
      if (tally.mismatched++ == 0) {
        tally.first_mismatch = trial;
        tally.first_mismatch_trial = t.describe();
      }
      if (stop_at_mismatch) return tally;
    }
  }
  return tally;
}

}  // namespace moe::testing

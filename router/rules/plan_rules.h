// The planning steps that the sequential CPU planner (router/dispatch_planner.cc) and the data-parallel GPU
// planner (router/cuda/plan_core.h) share, written once: pair status, rerouting one overflowing pair,
// deciding one request's tokens in (position, j) order (causal scope), and a token's totals and survivor
// renormalisation. docs/routing.md gives the rules; both planners call these functions, so a rule changes in
// one place for every backend.
//
// The functions work on plain arrays in the plan's layout (pair p = t * top_k + j) and on a caller's `place`
// callback, which records a placed pair: place(pair, expert, weight, status, held_before), where held_before
// is the pool's count at that expert before this pair took its slot (the GPU derives its slot from it; the
// CPU numbers slots across pools itself).
#pragma once

#include <cstdint>

#include "base/host_device.h"
#include "router/dispatch_policy.h"
#include "router/token_meta.h"

namespace moe {

enum class PairStatus : uint8_t { kKept = 0, kRerouted = 1, kDropped = 2 };

namespace rules {

// A batch's routes as plain arrays (TokenRoutes' layout): for token t and rank r < num_ranked, expert(t, r)
// (-1 = unavailable rank) and the weight the token gives it.
struct RouteArrays {
  const int32_t* experts = nullptr;
  const float* weights = nullptr;
  int top_k = 0;
  int num_ranked = 0;

  MOE_HD int32_t expert(int64_t t, int r) const { return experts[t * num_ranked + r]; }
  MOE_HD float weight(int64_t t, int r) const { return weights[t * num_ranked + r]; }
};

// Overflow::kReroute for one overflowing pair: the token's ranks [top_k, top_k + reroute_depth) that it does
// not already use (pair_expert of its other pairs), the first whose count is below `capacity` takes it.
// Returns whether it was placed. Unavailable ranks come last, so the first one ends the search.
template <class Place>
MOE_HD inline bool try_reroute(const RouteArrays& routes, int reroute_depth, int64_t pair,
                               const int32_t* pair_expert, int64_t capacity, int32_t* count, Place&& place) {
  const int k = routes.top_k;
  const int64_t t = pair / k;
  const int32_t* used = pair_expert + t * k;
  const int last_rank = routes.num_ranked < k + reroute_depth ? routes.num_ranked : k + reroute_depth;
  for (int r = k; r < last_rank; ++r) {
    const int32_t e = routes.expert(t, r);
    if (e < 0) return false;
    bool in_use = false;
    for (int j = 0; j < k; ++j) {
      if (used[j] == e) {
        in_use = true;
        break;
      }
    }
    if (in_use) continue;
    if (count[e] < capacity) {
      const int32_t held_before = count[e]++;
      place(pair, e, routes.weight(t, r), PairStatus::kRerouted, held_before);
      return true;
    }
  }
  return false;
}

// Decides the tokens order[begin .. end) of ONE request, in that order (ascending position), pair by pair in
// (position, j) order: pair (t, j) takes a slot at its expert e while count[e] < budget(position of t); when
// rerouting, a token's overflowing pairs reroute (in j order) right after its own choices, before the next
// position. count[e] holds the slots the request holds at e (its prefix's, on entry) and is advanced in
// place. This is what makes a decision depend only on the request's own prefix (causal scope). pair_expert
// and pair_status must read as kDropped / -1 for the request's undecided pairs (the plan's initial state).
template <class Budget, class Place>
MOE_HD inline void decide_in_position_order(const RouteArrays& routes, const DispatchPolicy& policy,
                                            const int32_t* order, int32_t begin, int32_t end,
                                            const TokenMeta* meta, const Budget& budget, int32_t* count,
                                            const int32_t* pair_expert, const PairStatus* pair_status,
                                            Place&& place) {
  const int k = routes.top_k;
  const bool reroute = policy.overflow == Overflow::kReroute;
  for (int32_t i = begin; i < end; ++i) {
    const int32_t t = order[i];
    const int64_t capacity = budget(meta[t].position);
    for (int j = 0; j < k; ++j) {
      const int32_t e = routes.expert(t, j);
      if (e < 0) continue;  // unavailable: stays dropped
      if (count[e] < capacity) {
        const int32_t held_before = count[e]++;
        place(int64_t{t} * k + j, e, routes.weight(t, j), PairStatus::kKept, held_before);
      }
    }
    if (!reroute) continue;
    for (int j = 0; j < k; ++j) {
      const int64_t pair = int64_t{t} * k + j;
      if (routes.expert(t, j) >= 0 && pair_status[pair] == PairStatus::kDropped) {
        try_reroute(routes, policy.reroute_depth, pair, pair_expert, capacity, count, place);
      }
    }
  }
}

// Overflow's survivor renormalisation (DispatchPolicy::renormalize_survivors) of one token that lost `lost`
// of its k pairs: when 0 < lost < k and the survivors' weights sum to survivors > 0, every pair weight is
// scaled by (sum of the token's k chosen route weights, in j order) / survivors. weight: the token's k pair
// weights (dropped pairs hold 0); chosen: its route weights, rank j at index j.
MOE_HD inline void renormalize_survivors(int k, int lost, float survivors, const float* chosen,
                                         float* weight) {
  if (lost <= 0 || lost >= k || !(survivors > 0.0f)) return;
  float total = 0.0f;
  for (int j = 0; j < k; ++j) total += chosen[j];
  const float scale = total / survivors;
  for (int j = 0; j < k; ++j) weight[j] *= scale;
}

}  // namespace rules
}  // namespace moe

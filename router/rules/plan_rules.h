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
#include <type_traits>

#include "base/host_device.h"
#include "router/dispatch_policy.h"
#include "router/rules/capacity.h"
#include "router/token_meta.h"

namespace moe {

enum class PairStatus : uint8_t { kKept = 0, kRerouted = 1, kDropped = 2 };

namespace rules {

// Which tokens claim in (request_id, position) order: request priority, and the scopes whose decisions follow
// a request's positions (causal, sequence) whatever the priority.
MOE_HD inline bool orders_by_request(const DispatchPolicy& p) {
  return p.priority == Priority::kRequest || p.scope == CapacityScope::kCausal || pools_prompt(p);
}
// Whether every request of a batch is its own pool (or pools): request, causal and sequence scopes.
MOE_HD inline bool pools_per_request(const DispatchPolicy& p) {
  return p.scope == CapacityScope::kRequest || p.scope == CapacityScope::kCausal || pools_prompt(p);
}
// Whether decisions read and advance a RoutingState carried across forward passes.
MOE_HD inline bool carries_routing_state(const DispatchPolicy& p) {
  return p.scope == CapacityScope::kCausal || pools_prompt(p);
}

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
// not already use (pair_expert of its other pairs), the first whose count is below its capacity takes it.
// capacity: one budget for every expert, or a functor capacity(e) (sequence scope's later-choice budgets).
// Returns whether it was placed. Unavailable ranks come last, so the first one ends the search.
template <class Capacity, class Place>
MOE_HD inline bool try_reroute(const RouteArrays& routes, int reroute_depth, int64_t pair,
                               const int32_t* pair_expert, const Capacity& capacity, int32_t* count,
                               Place&& place) {
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
    int64_t cap;
    if constexpr (std::is_integral_v<Capacity>) {
      cap = capacity;
    } else {
      cap = capacity(e);
    }
    if (count[e] < cap) {
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

// The size of a request's prompt-pool choice counts (sequence and prefix scopes;
// RoutingState::Request::higher_choices, the GPU state table's row): top_k blocks of num_experts; block j - 1
// (j = 1 .. top_k) at expert e counts the prompt rows so far whose choices of rank < j include e. (Block
// top_k - 1 counts every choice: a reroute's.)
MOE_HD inline int64_t prompt_choice_counts_size(int top_k, int num_experts) {
  return int64_t{top_k} * num_experts;
}

// Sequence and prefix scopes: a prompt row's ranked choices row_choices[0 .. k) (-1: unavailable) counted
// into the prompt's choice counts: higher[(j - 1) * E + e] += sign for every rank r < j <= k with choice e.
// The planner counts a row (sign 1) before its later choices decide; RoutingState::restore and rollback count
// recorded rows in (1) and out (-1), so a restored state holds the counts the planner would have.
MOE_HD inline void count_prompt_choices(const int32_t* row_choices, int k, int num_experts, int32_t* higher,
                                        int sign) {
  for (int r = 0; r < k; ++r) {
    const int32_t e = row_choices[r];
    if (e < 0) continue;
    for (int j = r + 1; j <= k; ++j) higher[int64_t{j - 1} * num_experts + e] += sign;
  }
}

// Whether the row at `position` of a request with prompt length L changed its routing state's counts: every
// row under causal scope, the prompt rows (position < L) under sequence and prefix scopes.
MOE_HD inline bool row_changes_counts(CapacityScope scope, uint32_t position, uint32_t prompt_length) {
  return scope == CapacityScope::kCausal || position < prompt_length;
}

// The prompt pool's reserve (sequence and prefix scopes; prefix scope passes its horizon as the prompt
// length) at expert e for a pair of rank j >= 1 (a reroute counts as rank top_k) of the prompt row at
// `position` of a prompt of `prompt_length` tokens: the room it must leave for the choices of
// rank < j that the rest of the prompt (n = L - 1 - position rows) is expected to bring to e, which claiming
// choice-major within one batch would have served first. The estimate is 1.5 times n * (h_e + j) /
// (position + 1 + E), from the h_e choices of rank < j that the prompt's positions <= `position` made for e
// (with a Laplace prior of 1/E per rank), rounded to the nearest integer (halves up) - in exact integer
// arithmetic:
//   R_e = floor((3 * (h_e + j) * n + D / 2) / D),  D = 2 * (position + 1 + E)
// For top-2 (only rank 1 reserves, h_e = the first choices) this is 1.5 n (f_e + 1) / (position + 1 + E).
// (Counting only first choices, graded by (j + 1) / 2, left 2-4.5x request scope's fully dropped tokens under
// top-8; rounding up instead of to nearest dropped 8.9 % of the divergence lab probe's pairs at cf 1.25
// against 8.0 %; a factor 2 instead of 1.5 dropped 1.31x request scope's pairs at cf 2 on serving.toml
// against 1.03x: docs/results.md.) INT64_MAX when the product exceeds 64 bits: more than any pool can hold.
MOE_HD inline int64_t prompt_pool_reserve(int64_t higher_choices_so_far, uint32_t position,
                                          uint32_t prompt_length, int num_experts, int rank) {
  if (position + 1 >= prompt_length) return 0;
  const uint64_t remaining = uint64_t{prompt_length} - 1 - position;
  const uint64_t h = static_cast<uint64_t>(higher_choices_so_far) + static_cast<uint64_t>(rank);
  // 3 h n < 2^64 when h < 2^30 (n < 2^32): the usual case, without the check's division.
  if (h >= (uint64_t{1} << 30) && h > (~uint64_t{0} / 3) / remaining) return INT64_MAX;
  const uint64_t num = 3 * h * remaining;
  const uint64_t den = 2 * (uint64_t{position} + 1 + static_cast<uint64_t>(num_experts));
  return static_cast<int64_t>((num + den / 2) / den);
}

// The exact comparison a * b > c * d of unsigned 64-bit values (128-bit products from 32-bit halves, the same
// on the host and the device).
MOE_HD inline bool product_greater(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  if (((a | b | c | d) >> 32) == 0) return a * b > c * d;  // both products fit in 64 bits
  auto product = [](uint64_t x, uint64_t y, uint64_t& hi, uint64_t& lo) {
    const uint64_t x0 = x & 0xffffffffu, x1 = x >> 32, y0 = y & 0xffffffffu, y1 = y >> 32;
    const uint64_t p00 = x0 * y0, p01 = x0 * y1, p10 = x1 * y0, p11 = x1 * y1;
    const uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    lo = (mid << 32) | (p00 & 0xffffffffu);
    hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
  };
  uint64_t lhs_hi, lhs_lo, rhs_hi, rhs_lo;
  product(a, b, lhs_hi, lhs_lo);
  product(c, d, rhs_hi, rhs_lo);
  return lhs_hi != rhs_hi ? lhs_hi > rhs_hi : lhs_lo > rhs_lo;
}

// Whether the prompt pool's reserve (sequence and prefix scopes) holds at expert e for a later choice of the
// prompt row at `position`: only while the pool is expected to overflow, i.e. while the choices of every rank
// that the rest of the prompt (n = L - 1 - position rows) is expected to bring to e, n (a_e + k) / (position
// + 1 + E) from the a_e choices of e so far (every rank; Laplace prior 1/E per rank), exceed 5/4 of the room
// the pool has left after this pair, capacity - count - 1. A pool that the rest of the prompt is not expected
// to fill keeps room for every claim, and slots held back there would only stay empty (without this gate
// sequence scope dropped up to 1.24x request scope's pairs on serving.toml under the calibrated Mixtral
// scores, with it up to 1.06x over 40 seeds: docs/results.md section 5). Exact integer arithmetic:
//   4 n (a_e + k) > 5 (capacity - count - 1) (position + 1 + E)
MOE_HD inline bool prompt_pool_reserve_holds(int64_t all_choices_so_far, int64_t room_after,
                                             uint32_t position, uint32_t prompt_length, int num_experts,
                                             int top_k) {
  if (position + 1 >= prompt_length) return false;  // nothing left to reserve for
  if (room_after < 0) return true;                  // the pool is full: nothing to decide
  const uint64_t remaining = uint64_t{prompt_length} - 1 - position;
  return product_greater(
      4 * remaining, static_cast<uint64_t>(all_choices_so_far) + static_cast<uint64_t>(top_k),
      static_cast<uint64_t>(room_after), 5 * (uint64_t{position} + 1 + static_cast<uint64_t>(num_experts)));
}

// Sequence and prefix scopes, the prompt rows order[begin .. end) of ONE request in ascending position
// (docs/routing.md section 2): one pool per expert for the prompt, claimed in (position, j) order across
// forward passes. order[begin] is the prompt's row number `first_row` (0-based: its position under a routing
// state, which keeps positions contiguous; 0 without one), and the rule below reads a row's number in the
// prompt, p = first_row + (i - begin), as its position. At that row the pool's budget is
// capacity = prompt_budget(policy, p, L) and its horizon h = prompt_horizon(policy, p, L) (sequence scope: L
// and request_capacity(L) at every row; prefix scope: the prompt up to `lookahead` positions past p), the
// budget read from `capacity` (PromptCapacity of this prompt). count[e] holds the pool's slots at e and
// higher[(j - 1) * E + e] the prompt's choice counts (prompt_choice_counts_size; both carried in the
// request's RoutingState; advanced in place). At a row:
//   its first choice (j = 0) is kept while count[e] < capacity;
//   a later choice of rank j, or a reroute (rank top_k), of a token that already holds a slot is kept while
//     count[e] < capacity - prompt_pool_reserve(higher[(j - 1) * E + e], p, h, E, j)
//   when prompt_pool_reserve_holds(higher[(k - 1) * E + e], capacity - count[e] - 1, p, h, E, k),
//   and while count[e] < capacity otherwise, so that lower choices cannot take the slots the rest of the
//   horizon's higher choices need in a pool they are expected to fill (as choice-major claiming within one
//   batch guarantees, but decided causally);
//   a later choice or reroute of a token that holds no slot yet claims like a first choice (it is the token's
//   only chance not to lose every pair).
// The counts include the row's own choices before its later choices decide. Every quantity a row reads is a
// function of the request's rows at positions <= p and of its horizon: under prefix scope the decisions of
// positions 0..p do not depend on L when L >= p + 1 + lookahead.
// The rows order[begin .. end) of decide_prompt_pool below, the first at `first_position`: kGrows, rows
// whose horizon is position + 1 + lookahead < L (prefix scope); else rows whose horizon is L (sequence scope,
// and a prefix-scope prompt's last lookahead + 1 rows). Two instantiations keep the second's budget a
// constant.
template <bool kGrows, class Place>
MOE_HD inline void decide_prompt_pool_rows(const RouteArrays& routes, const DispatchPolicy& policy,
                                           int num_experts, const int32_t* order, int32_t begin, int32_t end,
                                           uint32_t first_position, uint32_t prompt_length,
                                           const PromptCapacity& capacity_of, int32_t* count, int32_t* higher,
                                           const int32_t* pair_expert, const PairStatus* pair_status,
                                           Place& place) {
  const int k = routes.top_k;
  const bool reroute = policy.overflow == Overflow::kReroute;
  // In locals: the planner's stores through `place` must not make the loop reload them.
  const uint32_t lookahead = policy.lookahead;
  const int64_t* const table = capacity_of.table;
  const int64_t table_size = capacity_of.table_size, whole = capacity_of.whole;
  for (int32_t i = begin; i < end; ++i) {
    const int32_t t = order[i];
    const uint32_t position = first_position + static_cast<uint32_t>(i - begin);
    const uint32_t horizon = kGrows ? position + 1 + lookahead : prompt_length;
    const int64_t capacity = !kGrows                ? whole
                             : horizon < table_size ? table[horizon]
                                                    : capacity_of.at(horizon);
    count_prompt_choices(routes.experts + int64_t{t} * routes.num_ranked, k, num_experts, higher, 1);
    auto later_capacity = [&](int32_t e, int rank) {
      if (!prompt_pool_reserve_holds(higher[int64_t{k - 1} * num_experts + e], capacity - count[e] - 1,
                                     position, horizon, num_experts, k))
        return capacity;
      const int64_t reserve = prompt_pool_reserve(higher[int64_t{rank - 1} * num_experts + e], position,
                                                  horizon, num_experts, rank);
      return reserve >= capacity ? int64_t{0} : capacity - reserve;
    };
    bool holds = false;
    for (int j = 0; j < k; ++j) {
      const int32_t e = routes.expert(t, j);
      if (e < 0) continue;
      const int64_t cap = j == 0 || !holds ? capacity : later_capacity(e, j);
      if (count[e] < cap) {
        const int32_t held_before = count[e]++;
        place(int64_t{t} * k + j, e, routes.weight(t, j), PairStatus::kKept, held_before);
        holds = true;
      }
    }
    if (!reroute) continue;
    for (int j = 0; j < k; ++j) {
      const int64_t pair = int64_t{t} * k + j;
      if (routes.expert(t, j) < 0 || pair_status[pair] != PairStatus::kDropped) continue;
      const bool had_slot = holds;
      auto reroute_capacity = [&](int32_t e) { return had_slot ? later_capacity(e, k) : capacity; };
      if (try_reroute(routes, policy.reroute_depth, pair, pair_expert, reroute_capacity, count, place))
        holds = true;
    }
  }
}

template <class Place>
MOE_HD inline void decide_prompt_pool(const RouteArrays& routes, const DispatchPolicy& policy,
                                      int num_experts, const int32_t* order, int32_t begin, int32_t end,
                                      uint32_t first_row, uint32_t prompt_length, PromptCapacity capacity_of,
                                      int32_t* count, int32_t* higher, const int32_t* pair_expert,
                                      const PairStatus* pair_status, Place&& place) {
  // Rows at positions < grows_until have the horizon position + 1 + lookahead (prompt_horizon, hoisted).
  const uint32_t grows_until = growing_horizon_end(policy, prompt_length);
  const int32_t split =
      first_row >= grows_until
          ? begin
          : static_cast<int32_t>(begin + (int64_t{grows_until} - first_row < int64_t{end} - begin
                                              ? int64_t{grows_until} - first_row
                                              : int64_t{end} - begin));
  decide_prompt_pool_rows<true>(routes, policy, num_experts, order, begin, split, first_row, prompt_length,
                                capacity_of, count, higher, pair_expert, pair_status, place);
  decide_prompt_pool_rows<false>(routes, policy, num_experts, order, split, end,
                                 first_row + static_cast<uint32_t>(split - begin), prompt_length, capacity_of,
                                 count, higher, pair_expert, pair_status, place);
}

// Sequence scope, the decode rows order[begin .. end) of one request (positions >= its prompt length): each
// row is a pool of its own with budget decode_capacity = request_capacity(1) >= 1. A token's ranked experts
// are distinct, so each of its pairs finds its pool's count at 0 and is kept; decode rows neither read nor
// touch the prompt pool (place gets held_before 0).
template <class Place>
MOE_HD inline void keep_decode_rows(const RouteArrays& routes, const int32_t* order, int32_t begin,
                                    int32_t end, int64_t decode_capacity, Place&& place) {
  const int k = routes.top_k;
  for (int32_t i = begin; i < end && decode_capacity > 0; ++i) {
    const int32_t t = order[i];
    for (int j = 0; j < k; ++j) {
      const int32_t e = routes.expert(t, j);
      if (e >= 0) place(int64_t{t} * k + j, e, routes.weight(t, j), PairStatus::kKept, 0);
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

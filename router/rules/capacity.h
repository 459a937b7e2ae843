// Capacity and budget formulas of every scope (docs/routing.md section 2), one definition for the CPU
// planner, the GPU planner and whoever reports capacities. Integer results of double arithmetic whose every
// operation is exact or correctly rounded IEEE, so host and device give the same integers.
#pragma once

#include <cmath>
#include <cstdint>

#include "base/host_device.h"
#include "router/dispatch_policy.h"

namespace moe::rules {

// round(cf * num_tokens * top_k / num_experts) in double. NOTES: a product that is an integer in exact
// arithmetic but lands a hair above it in binary (1.1 * 100 = 110.00000000000001) is taken as that
// integer, so ceil does not add a phantom slot: values within 1e-9 (relative) of an integer snap to it.
MOE_HD inline int64_t rounded_capacity(double capacity_factor, int64_t num_tokens, int top_k, int num_experts,
                                       CapacityRounding rounding) {
  const double exact = capacity_factor * static_cast<double>(num_tokens) * top_k / num_experts;
  // ::round (halves away from zero) as rint (an instruction where the target has one; ::round is a libm
  // call on the planner's per-row path) plus the halves' case.
  double nearest = ::rint(exact);
  if (::fabs(exact - nearest) == 0.5) nearest = exact + (exact > 0 ? 0.5 : -0.5);
  const double magnitude = ::fabs(exact) > 1.0 ? ::fabs(exact) : 1.0;
  if (::fabs(exact - nearest) <= 1e-9 * magnitude) return static_cast<int64_t>(nearest);
  return static_cast<int64_t>(rounding == CapacityRounding::kCeil ? ::ceil(exact) : ::floor(exact));
}

MOE_HD inline int64_t max_of(int64_t a, int64_t b) {
  return a > b ? a : b;
}

// Batch scope: every expert's one pool, C = max(min_capacity, round(cf * T * k / E)).
MOE_HD inline int64_t batch_capacity(const DispatchPolicy& p, int64_t num_tokens, int top_k,
                                     int num_experts) {
  return max_of(p.min_capacity,
                rounded_capacity(p.capacity_factor, num_tokens, top_k, num_experts, p.rounding));
}

// The budget per expert of a pool of `num_tokens` tokens of one request: max(1, min_capacity,
// round(cf * num_tokens * k / E)). Request scope gives it to each request's rows in the batch (T_r); causal
// scope to the prefix of a token at position p (num_tokens = p + 1).
MOE_HD inline int64_t request_capacity(const DispatchPolicy& p, int64_t num_tokens, int top_k,
                                       int num_experts) {
  return max_of(1, batch_capacity(p, num_tokens, top_k, num_experts));
}

// Sequence and prefix scopes: a request's prompt is one pool per expert, claimed in (position, j) order
// across forward passes; each decode row (position >= L) is a pool of its own with budget
// request_capacity(1) >= 1.
MOE_HD inline bool pools_prompt(const DispatchPolicy& p) {
  return p.scope == CapacityScope::kSequence || p.scope == CapacityScope::kPrefix;
}

// The prompt rows whose horizon (below) is short of the prompt: positions < this one have the horizon
// position + 1 + lookahead < L (prefix scope); every other row's is L. The one definition of where the
// horizon stops growing: prompt_horizon reads it, and the planners split a prompt's rows at it.
MOE_HD inline uint32_t growing_horizon_end(const DispatchPolicy& p, uint32_t prompt_length) {
  if (p.scope != CapacityScope::kPrefix) return 0;
  const uint64_t reach = uint64_t{p.lookahead} + 1;
  return prompt_length > reach ? static_cast<uint32_t>(prompt_length - reach) : 0;
}

// The horizon of the prompt row at `position` of a prompt of `prompt_length` (L) tokens: the prompt positions
// its budget and its reserve look at. Sequence scope: the whole prompt, L. Prefix scope: the positions up to
// `lookahead` past the row, min(L, position + 1 + lookahead), so that the decision at a position depends on
// L only within `lookahead` of the prompt's end. position < L.
MOE_HD inline uint32_t prompt_horizon(const DispatchPolicy& p, uint32_t position, uint32_t prompt_length) {
  return position < growing_horizon_end(p, prompt_length) ? position + 1 + p.lookahead : prompt_length;
}

// The prompt pool's budget per expert at the prompt row at `position`: request_capacity(horizon). Sequence
// scope: request_capacity(L) at every row.
MOE_HD inline int64_t prompt_budget(const DispatchPolicy& p, uint32_t position, uint32_t prompt_length,
                                    int top_k, int num_experts) {
  return request_capacity(p, prompt_horizon(p, position, prompt_length), top_k, num_experts);
}

// A prompt pool's budget by horizon, as a planner reads it per row: request_capacity(policy, h, k, E), from
// `table` where the caller keeps its values (table[h] for h < table_size: a host planner's cache, filled
// once, so that the per-row budgets of prefix and causal scopes cost a load, not the formula) or computed;
// `whole` is its value at the prompt length (the sequence-scope budget of every row).
struct PromptCapacity {
  const DispatchPolicy* policy = nullptr;
  int top_k = 0, num_experts = 0;
  uint32_t prompt_length = 0;
  int64_t whole = 0;
  const int64_t* table = nullptr;
  int64_t table_size = 0;

  MOE_HD int64_t operator()(int64_t horizon) const { return horizon == prompt_length ? whole : at(horizon); }
  MOE_HD int64_t at(int64_t horizon) const {
    return horizon < table_size ? table[horizon] : request_capacity(*policy, horizon, top_k, num_experts);
  }
};

//
// Causal scope: a token at `position` may take a slot at an expert while its request's earlier tokens hold
// fewer than this many there.
MOE_HD inline int64_t causal_budget(const DispatchPolicy& p, uint32_t position, int top_k, int num_experts) {
  return request_capacity(p, int64_t{position} + 1, top_k, num_experts);
}

// Ranks per token the planner reads: top_k, plus reroute_depth when rerouting (capped at num_experts).
MOE_HD inline int num_ranked_needed(const DispatchPolicy& p, int num_experts, int top_k) {
  if (p.overflow != Overflow::kReroute) return top_k;
  const int wanted = top_k + p.reroute_depth;
  return wanted < num_experts ? wanted : num_experts;
}

}  // namespace moe::rules

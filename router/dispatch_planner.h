// Dispatch planning: turns routes into a plan under a capacity policy.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "router/dispatch_plan.h"
#include "router/dispatch_policy.h"
#include "router/routing_state.h"
#include "router/rules/capacity.h"
#include "router/rules/plan_error.h"
#include "router/token_meta.h"
#include "router/token_routes.h"

namespace moe {

// Plans batches for a fixed (num_experts, top_k, policy). The rules are those of docs/routing.md:
// choice-major claiming in priority order within each capacity pool, then (kReroute) each overflowing pair
// in the same order tries the token's next-ranked experts it does not already use. Under kCausal and
// kSequence every request is decided in (position, j) order and rerouting happens per token, so that
// decisions see only the request's prefix.
//
// Invariance: with scope kRequest, kCausal, kSequence or kNone the plan restricted to one request's tokens
// (expert, weight, status) depends only on that request's tokens (and its routing state), not on other rows
// or the row order; with kCausal, kSequence or kNone also not on how its prompt is chunked into calls. Slot
// numbers may depend on the rest of the batch.
//
// Not thread-safe (it owns a workspace). After reserve(max_tokens), plan() allocates nothing for batches of
// up to max_tokens (except RoutingState growth for new requests).
class DispatchPlanner {
 public:
  // Throws std::invalid_argument for an invalid policy or shape.
  DispatchPlanner(int num_experts, int top_k, DispatchPolicy policy);

  const DispatchPolicy& policy() const { return policy_; }
  int num_experts() const { return num_experts_; }
  int top_k() const { return top_k_; }
  // Ranks per token that plan() reads: top_k, plus reroute_depth when rerouting (capped at num_experts).
  int num_ranked_needed() const;

  void reserve(int max_tokens);

  // routes: num_tokens tokens of this planner's (num_experts, top_k) with at least num_ranked_needed() ranks.
  // meta: one entry per token. state: used and advanced under kCausal (nullptr = every request starts
  // fresh, so each must start at position 0) and kSequence (every request must be admitted; nullptr = each
  // request's rows are its whole prompt); ignored otherwise.
  // Throws std::invalid_argument for mismatched shapes (a state of another expert count or top_k included),
  // duplicate (request_id, position) where the policy depends on it, a request the state has not admitted
  // (kSequence), or (kCausal, kSequence with a state) positions not contiguous from the state's next
  // position. All checks run before anything is written: on a throw, `state` is unchanged (`out` is
  // unspecified).
  void plan(const TokenRoutes& routes, std::span<const TokenMeta> meta, RoutingState* state,
            DispatchPlan& out);

  // The checks of plan() alone: throws what plan() would throw for these arguments, changes nothing (a caller
  // that must agree with others before any state changes - expert parallelism - checks first, then plans).
  void check(const TokenRoutes& routes, std::span<const TokenMeta> meta, const RoutingState* state);

  // Batch scope, arrival priority, drop (rules::plans_in_slices): the plan of these rows as one slice of a
  // larger batch (router/rules/slice_rules.h). claims_before[j * E + e]: the pairs of the whole batch that
  // claim expert e before this slice's rank-j pairs (rules::slice_claims_before); capacity: the whole batch's
  // (rules::batch_capacity of its token count). The plan covers this slice's rows: pair_expert, pair_weight,
  // pair_status as the whole batch's plan has them for these rows; pair_slot, expert_load, expert_offsets
  // and slot_pairs count this slice's kept pairs (in the whole batch's slot order); batch_capacity and
  // expert_capacity are `capacity`. Throws std::invalid_argument for another policy or bad shapes.
  void plan_slice(const TokenRoutes& routes, std::span<const TokenMeta> meta, const int64_t* claims_before,
                  int64_t capacity, DispatchPlan& out);

 private:
  struct OrderKey {
    uint64_t major;
    uint64_t minor;
    int32_t token;
  };

  void order_tokens(const TokenRoutes& routes, std::span<const TokenMeta> meta);
  void split_groups(std::span<const TokenMeta> meta);
  // The first duplicate (request_id, position) in claiming order, or kPlanOk.
  PlanError find_duplicate(std::span<const TokenMeta> meta) const;
  // Causal and sequence scopes: the first request the state does not admit (sequence, with a state) or whose
  // positions are not contiguous from its state's next position.
  PlanError find_state_error(std::span<const TokenMeta> meta, const RoutingState* state) const;
  void plan_pooled_group(const TokenRoutes& routes, int32_t begin, int32_t end, int64_t capacity,
                         DispatchPlan& out);
  // Sequence scope: one request (request = its state; null: the rows are its whole prompt). Returns its
  // number of decode rows, whose offered slots (decode_capacity each per expert) the caller adds.
  int32_t plan_sequence_group(const TokenRoutes& routes, std::span<const TokenMeta> meta, int32_t begin,
                              int32_t end, RoutingState::Request* request, int64_t decode_capacity,
                              DispatchPlan& out);
  void plan_causal_group(const TokenRoutes& routes, std::span<const TokenMeta> meta, int32_t begin,
                         int32_t end, RoutingState::Request& request, DispatchPlan& out);
  // Zeroes pool_count_ after the pool of order_[begin .. end) was planned into `out`.
  void reset_pool(int32_t begin, int32_t end, const DispatchPlan& out);
  void finish(const TokenRoutes& routes, DispatchPlan& out);

  int num_experts_;
  int top_k_;
  DispatchPolicy policy_;
  RoutingRule rule_;  // stamped on (and checked against) every request this planner plans under a state

  // Workspace, sized by reserve().
  std::vector<OrderKey> keys_;
  std::vector<int32_t> order_;        // tokens in claiming order (grouped by pool for request/causal)
  std::vector<int32_t> group_begin_;  // group g is order_[group_begin_[g] .. group_begin_[g+1])
  std::vector<int32_t> pool_count_;   // [num_experts] slots taken in the current pool
  std::vector<int64_t> overflow_;     // pairs waiting to reroute, in claiming order
  // [num_experts] causal: the counts of a request planned without a state
  std::vector<int32_t> scratch_held_;
  // [top_k * num_experts] sequence: the choice counts of a request planned without a state
  std::vector<int32_t> scratch_counts_;
  std::vector<int64_t> slice_seen_;  // [top_k * num_experts] plan_slice's claims so far
  bool rows_distinct_ = false;       // order_tokens() found the rows in strict (request, position) order
  // Prefix and causal scopes: request_capacity(policy_, n) for n < kCapacityTableSize (their per-row budgets;
  // longer prompts' rows beyond it compute the formula), filled by the constructor.
  static constexpr int64_t kCapacityTableSize = 4097;
  std::vector<int64_t> capacity_table_;
  // The budgets of a prompt of prompt_length rows (whole: request_capacity at it) from the table.
  rules::PromptCapacity prompt_capacity(uint32_t prompt_length, int64_t whole) const;
};

}  // namespace moe

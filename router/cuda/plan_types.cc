#include "router/cuda/plan_types.h"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

#include "router/cuda/plan_bits.h"
#include "router/plan_checks.h"
#include "router/rules/capacity.h"
#include "router/rules/plan_rules.h"

namespace moe::cuda {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument("dispatch planner: " + msg);
}

size_t align_up(size_t n) {
  return (n + 255) & ~size_t{255};
}

}  // namespace

void PlanShape::validate() const {
  check_planner_config(num_experts, top_k, policy);
  if (max_tokens < 0) fail("max_tokens must be >= 0 (got " + std::to_string(max_tokens) + ")");
  const int needed = rules::num_ranked_needed(policy, num_experts, top_k);
  if (num_ranked < needed) {
    fail("num_ranked (" + std::to_string(num_ranked) + ") is below what the policy reads (" +
         std::to_string(needed) + " = top_k + reroute_depth)");
  }
  const int64_t pairs = int64_t{max_tokens} * top_k;
  if (pairs > (int64_t{1} << 30))
    fail("max_tokens * top_k must be <= 2^30 (got " + std::to_string(pairs) + ")");
  const PlanKeyBits bits(max_tokens, num_experts, top_k, policy.scope);
  if (bits.claim_total() > 63 || bits.slot_total() > 63) {
    fail("shape too large for 63-bit sort keys (max_tokens " + std::to_string(max_tokens) + ", num_experts " +
         std::to_string(num_experts) + ", top_k " + std::to_string(top_k) + ")");
  }
}

void check_plan_args(const PlanShape& shape, const PlanInputs& in, const PlanOutputs& out) {
  if (in.num_tokens < 0 || in.num_tokens > shape.max_tokens) {
    fail("num_tokens (" + std::to_string(in.num_tokens) +
         ") must be in [0, max_tokens=" + std::to_string(shape.max_tokens) + "]");
  }
  auto need = [](const void* p, const char* name) {
    if (p == nullptr) fail(std::string(name) + " is null");
  };
  need(out.expert_load, "outputs.expert_load");
  need(out.expert_capacity, "outputs.expert_capacity");
  need(out.expert_offsets, "outputs.expert_offsets");
  need(out.counts, "outputs.counts");
  need(out.error, "outputs.error");
  if (in.num_tokens == 0) return;
  need(in.route_experts, "inputs.route_experts");
  need(in.route_weights, "inputs.route_weights");
  need(in.meta, "inputs.meta");
  if (shape.policy.priority == Priority::kScore) need(in.top1_score, "inputs.top1_score (score priority)");
  if (rules::carries_routing_state(shape.policy) && in.token_state_row != nullptr) {
    need(in.state_slots_held, "inputs.state_slots_held (token_state_row is set)");
    need(in.state_next_position, "inputs.state_next_position (token_state_row is set)");
    if (rules::pools_prompt(shape.policy)) {
      need(in.state_prompt_length,
           "inputs.state_prompt_length (sequence/prefix scope, token_state_row is set)");
      need(in.state_higher_choices,
           "inputs.state_higher_choices (sequence/prefix scope, token_state_row is set)");
      if (in.state_turn_offsets != nullptr)
        need(in.state_turn_ends, "inputs.state_turn_ends (state_turn_offsets is set)");
    }
  }
  need(out.pair_expert, "outputs.pair_expert");
  need(out.pair_slot, "outputs.pair_slot");
  need(out.pair_weight, "outputs.pair_weight");
  need(out.pair_status, "outputs.pair_status");
  need(out.slot_pairs, "outputs.slot_pairs");
}

int64_t plan_batch_capacity(const PlanShape& shape, int num_tokens) {
  if (shape.policy.scope != CapacityScope::kBatch) return -1;
  return rules::batch_capacity(shape.policy, num_tokens, shape.top_k, shape.num_experts);
}

PlanWorkspaceLayout::PlanWorkspaceLayout(const PlanShape& shape) {
  const size_t T = static_cast<size_t>(std::max(shape.max_tokens, 1));
  const size_t P = T * static_cast<size_t>(shape.top_k);
  const size_t E = static_cast<size_t>(shape.num_experts);
  size_t count_rows = 1;
  const CapacityScope scope = shape.policy.scope;
  const bool stateful = rules::carries_routing_state(shape.policy);
  if (stateful || (scope == CapacityScope::kRequest && shape.policy.overflow == Overflow::kReroute)) {
    count_rows = T;
  }
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at += align_up(bytes);
    return here;
  };
  token_key = take(T * 8);
  order = take(T * 4);
  inv_order = take(T * 4);
  group_of = take(T * 4);
  group_begin = take((T + 1) * 4);
  group_cap = take(T * 8);
  group_cap_sum = take(T * 8);
  token_stats = take(T * 32);
  pair_key = take(P * 8);
  pair_val = take(P * 4);
  pair_aux = take((P + 1) * 4);
  overflow = take(P * 4);
  group_counts = take(count_rows * E * 4);
  group_higher = take(rules::pools_prompt(shape.policy) ? P * E * 4 : 4);  // T * k * E
  capacity_partial = take(stateful ? ((T + 255) / 256) * E * 8 : 8);
  bytes = at;
}

}  // namespace moe::cuda

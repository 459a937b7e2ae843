// The planner's output: where every (token, choice) pair goes.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "router/rules/plan_rules.h"  // PairStatus

namespace moe {

std::string_view to_string(PairStatus s);

// A dispatch plan for num_tokens tokens with top_k pairs each; pair p = t * top_k + j.
//
// Per pair:   expert (-1 if dropped), slot within that expert (-1 if dropped), weight (0 if dropped; for a
//             rerouted pair, the weight of the expert it landed on), status.
// Per expert: its slots in order: slot_pairs[expert_offsets[e] + s] is the pair holding slot s of expert e;
//             expert_load[e] = slots used; expert_capacity[e] = slots it offered this batch (batch scope: C;
//             request scope: the sum of the requests' budgets; causal: the sum over the batch's requests of
//             the budget at their last position less what their prefix already held; -1 for dropless).
// Counts are integers: a plan is exactly reproducible and identical on every backend.
struct DispatchPlan {
  int num_tokens = 0;
  int top_k = 0;
  int num_experts = 0;
  int64_t batch_capacity = -1;  // C of batch scope, -1 for other scopes

  std::vector<int32_t> pair_expert;
  std::vector<int32_t> pair_slot;
  std::vector<float> pair_weight;
  std::vector<PairStatus> pair_status;

  std::vector<int32_t> expert_load;      // [num_experts]
  std::vector<int64_t> expert_capacity;  // [num_experts]
  std::vector<int32_t> expert_offsets;   // [num_experts + 1]
  std::vector<int32_t> slot_pairs;       // [expert_offsets[num_experts]]

  int64_t num_kept = 0;
  int64_t num_rerouted = 0;
  int64_t num_dropped = 0;
  int64_t num_tokens_fully_dropped = 0;  // tokens none of whose k pairs got an expert

  int64_t num_pairs() const { return static_cast<int64_t>(num_tokens) * top_k; }

  // Reserves room for batches of up to max_tokens, so planning into this plan does not allocate.
  void reserve(int max_tokens, int k, int experts);
};

}  // namespace moe

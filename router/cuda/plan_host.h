// Host-side adapter: runs the array planner (GPU or OpenMP) behind DispatchPlanner::plan's interface, so
// tests can compare its plans with the CPU planner's field by field.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "router/cuda/plan_types.h"
#include "router/dispatch_plan.h"
#include "router/dispatch_policy.h"
#include "router/plan_checks.h"  // throw_if_plan_error
#include "router/routing_state.h"
#include "router/token_meta.h"
#include "router/token_routes.h"

namespace moe::cuda {

// The routing-state table of one batch (causal and sequence scopes), in the layout PlanInputs reads (one row
// per request of the batch, in order of first appearance), filled from and written back to a RoutingState.
// Reuses its vectors' capacity from call to call.
struct RoutingStateTable {
  std::vector<uint64_t> request_ids;    // row -> request id
  std::vector<int32_t> token_row;       // [T]: the row of token t's request
  std::vector<int32_t> slots_held;      // [rows * E]
  std::vector<uint32_t> next_position;  // [rows]
  std::vector<uint32_t> prompt_length;  // [rows]: 0 = not admitted
  std::vector<int32_t> higher_choices;  // [rows * top_k * E] (rules::prompt_choice_counts_size per row)
  // Conversations: PlanInputs::state_turn_ends / state_turn_offsets; both empty when every row is one turn.
  std::vector<uint32_t> turn_ends;
  std::vector<int32_t> turn_offsets;
  size_t counts_size = 0;  // top_k * E

  // Rows for the requests of `meta`; a request `state` knows starts from its state, a new one from zero (and
  // prompt length 0: not admitted). Throws std::invalid_argument (kPlanRuleMismatch, the CPU planner's words)
  // when a request of `state` was planned or restored under another rule than `rule`.
  void build(std::span<const TokenMeta> meta, const RoutingState& state, int num_experts, int top_k,
             const RoutingRule& rule);
  // Stores every row in `state` (creating the requests it does not know yet: causal scope), stamped with
  // `rule`. Call after a successful plan.
  void write_back(RoutingState& state, const RoutingRule& rule) const;
  int num_rows() const { return static_cast<int>(request_ids.size()); }

 private:
  std::unordered_map<uint64_t, int32_t> row_of_;
};

// Executes one plan on host arrays: every pointer of `in` and `out` is host memory with the sizes that
// plan_types.h gives. The OpenMP runner plans in place; a CUDA runner copies to the device and back.
using ArrayPlanRunner = std::function<void(const PlanShape&, const PlanInputs&, const PlanOutputs&)>;

// DispatchPlanner::plan's contract on top of a runner: same shape checks, same exceptions
// (std::invalid_argument for duplicate (request_id, position) where the policy ranks by it, and for
// non-contiguous causal/sequence positions and for sequence requests not admitted), and `state` advanced only
// when the plan succeeds. Requests are mapped
// to rows of a routing-state table built from `state` (rows of new requests start at zero).
class ArrayPlanner {
 public:
  // Throws std::invalid_argument for an invalid policy or shape.
  ArrayPlanner(int num_experts, int top_k, DispatchPolicy policy, ArrayPlanRunner runner);

  void plan(const TokenRoutes& routes, std::span<const TokenMeta> meta, RoutingState* state,
            DispatchPlan& out) const;

 private:
  int num_experts_;
  int top_k_;
  DispatchPolicy policy_;
  ArrayPlanRunner runner_;
};

}  // namespace moe::cuda

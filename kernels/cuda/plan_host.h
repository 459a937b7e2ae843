// Host-side adapter: runs the array planner (GPU or OpenMP) behind DispatchPlanner::plan's interface, so
// tests can compare its plans with the CPU planner's field by field.
#pragma once

#include <functional>
#include <span>

#include "kernels/cuda/plan_types.h"
#include "router/causal_state.h"
#include "router/dispatch_plan.h"
#include "router/dispatch_policy.h"
#include "router/token_meta.h"
#include "router/token_routes.h"

namespace moe::cuda {

// Executes one plan on host arrays: every pointer of `in` and `out` is host memory with the sizes that
// plan_types.h gives. The OpenMP runner plans in place; a CUDA runner copies to the device and back.
using ArrayPlanRunner = std::function<void(const PlanShape&, const PlanInputs&, const PlanOutputs&)>;

// DispatchPlanner::plan's contract on top of a runner: same shape checks, same exceptions
// (std::invalid_argument for duplicate (request_id, position) where the policy ranks by it, and for
// non-contiguous causal positions), and `state` advanced only when the plan succeeds. Requests are mapped
// to rows of a routing-state table built from `state` (rows of new requests start at zero).
class ArrayPlanner {
 public:
  // Throws std::invalid_argument for an invalid policy or shape.
  ArrayPlanner(int num_experts, int top_k, DispatchPolicy policy, ArrayPlanRunner runner);

  int num_ranked_needed() const;
  void plan(const TokenRoutes& routes, std::span<const TokenMeta> meta, CausalRoutingState* state,
            DispatchPlan& out) const;

 private:
  int num_experts_;
  int top_k_;
  DispatchPolicy policy_;
  ArrayPlanRunner runner_;
};

}  // namespace moe::cuda

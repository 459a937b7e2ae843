// The argument checks of dispatch planning, one definition for every planner (the CPU DispatchPlanner, the
// GPU and OpenMP array planners, the expert-parallel layer's global plan): they throw std::invalid_argument
// in the same words whichever backend plans the batch ("dispatch planner: ...").
#pragma once

#include <cstddef>

#include "router/dispatch_policy.h"
#include "router/routing_state.h"
#include "router/rules/plan_error.h"
#include "router/token_routes.h"

namespace moe {

// A planner for (num_experts, top_k, policy): num_experts >= 1, top_k in [1, num_experts], a valid policy.
void check_planner_config(int num_experts, int top_k, const DispatchPolicy& policy);

// One batch for that planner: routes of this (num_experts, top_k) ranking at least num_ranked_needed experts
// per token, one metadata row per token, a routing state (if any) that check_routing_state accepts.
void check_plan_inputs(int num_experts, int top_k, const DispatchPolicy& policy, const TokenRoutes& routes,
                       size_t num_meta_rows, const RoutingState* state);

// A routing state (null: none) for a planner of (num_experts, top_k): the same expert count, and the same
// top_k when the state records one.
void check_routing_state(const RoutingState* state, int num_experts, int top_k);

// Throws the planner's std::invalid_argument for a PlanError whose code is not kPlanOk; returns when it is.
void throw_if_plan_error(const PlanError& error);

}  // namespace moe

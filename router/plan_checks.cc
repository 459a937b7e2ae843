#include "router/plan_checks.h"

#include <stdexcept>
#include <string>

#include "router/rules/capacity.h"

namespace moe {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument("dispatch planner: " + msg);
}

}  // namespace

void check_planner_config(int num_experts, int top_k, const DispatchPolicy& policy) {
  if (num_experts < 1) fail("num_experts must be >= 1 (got " + std::to_string(num_experts) + ")");
  if (top_k < 1 || top_k > num_experts) {
    fail("top_k (" + std::to_string(top_k) + ") must be in [1, num_experts=" + std::to_string(num_experts) +
         "]");
  }
  policy.validate();
}

void check_plan_inputs(int num_experts, int top_k, const DispatchPolicy& policy, const TokenRoutes& routes,
                       size_t num_meta_rows, const RoutingState* state) {
  if (routes.num_experts != num_experts || routes.top_k != top_k) {
    fail("routes are for " + std::to_string(routes.num_experts) + " experts, top_k " +
         std::to_string(routes.top_k) + " but the planner for " + std::to_string(num_experts) +
         " experts, top_k " + std::to_string(top_k));
  }
  const int needed = rules::num_ranked_needed(policy, num_experts, top_k);
  if (routes.num_ranked < needed) {
    fail("routes rank " + std::to_string(routes.num_ranked) + " experts per token but the policy needs " +
         std::to_string(needed) + " (top_k + reroute_depth)");
  }
  if (num_meta_rows != static_cast<size_t>(routes.num_tokens)) {
    fail("token metadata has " + std::to_string(num_meta_rows) + " rows but the routes have " +
         std::to_string(routes.num_tokens));
  }
  check_routing_state(state, num_experts, top_k);
}

void check_routing_state(const RoutingState* state, int num_experts, int top_k) {
  if (state == nullptr) return;
  if (state->num_experts() != num_experts) {
    fail("the routing state is for " + std::to_string(state->num_experts()) + " experts, not " +
         std::to_string(num_experts));
  }
  if (state->top_k() != 0 && state->top_k() != top_k) {
    fail("the routing state is for top_k " + std::to_string(state->top_k()) + ", not " +
         std::to_string(top_k));
  }
  if (state->top_k() == 0) {
    const int counted = state->counts_top_k();
    if (counted != 0 && counted != top_k) {
      fail("the routing state holds sequence-scope counts of top_k " + std::to_string(counted) + ", not " +
           std::to_string(top_k) + " (one state per layer)");
    }
  }
}

void throw_if_plan_error(const PlanError& error) {
  switch (error.code) {
    case kPlanOk:
      return;
    case kPlanDuplicateToken:
      fail("rows " + std::to_string(error.row_a) + " and " + std::to_string(error.row_b) +
           " both claim request " + std::to_string(error.request_id) + " position " +
           std::to_string(error.position));
    case kPlanNonContiguousPosition:
      fail("request " + std::to_string(error.request_id) +
           ": causal and sequence scopes need contiguous positions from the request's next position (0 for a "
           "request the routing state does not hold), but row " +
           std::to_string(error.row_b) + " has position " + std::to_string(error.position) + " where " +
           std::to_string(error.expected) + " was expected");
    case kPlanNotAdmitted:
      fail("request " + std::to_string(error.request_id) +
           ": sequence and prefix scopes need the request admitted with its prompt length before its first "
           "forward pass "
           "(RoutingState::admit), but the routing state does not hold it (row " +
           std::to_string(error.row_b) + ", position " + std::to_string(error.position) + ")");
    case kPlanRuleMismatch:
      fail(
          "request " + std::to_string(error.request_id) +
          ": its routing state was planned (or restored from a prefix cache) under another rule - capacity "
          "factor, rounding, min_capacity, scope, overflow, reroute depth or lookahead - than this planner's "
          "(row " +
          std::to_string(error.row_b) + ", position " + std::to_string(error.position) + ")");
    case kPlanStateRowMismatch:
      fail("request " + std::to_string(error.request_id) + ": rows " + std::to_string(error.row_a) + " and " +
           std::to_string(error.row_b) + " name different routing-state rows");
    default:
      fail("unknown plan error code " + std::to_string(error.code));
  }
}

}  // namespace moe

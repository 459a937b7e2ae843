// Running a dispatch policy over a workload: routes computed once, planned step by step.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "router/dispatch_plan.h"
#include "router/dispatch_policy.h"
#include "router/router_config.h"
#include "router/token_routes.h"
#include "sim/progress.h"
#include "sim/sim_config.h"
#include "sim/workload.h"

namespace moe::sim {

// A workload with its scheduled steps and each step's routes (synthetic logits from the score model, routed
// once): the part that does not depend on the dispatch policy, so several policies can be planned over it.
struct PreparedWorkload {
  RouterConfig router;
  std::vector<RequestSpec> requests;
  std::vector<Step> steps;
  std::vector<TokenRoutes> routes;  // one per step, `num_ranked` ranks per token
  int num_ranked = 0;
  int64_t num_tokens = 0;
};

// Ranks per token a policy needs: rules::num_ranked_needed (router/rules/capacity.h) for this router.
int ranks_needed(const RouterConfig& router, const DispatchPolicy& policy);

// Schedules config.workload and routes every step under config.router with `num_ranked` ranks.
// Throws UsageError / DataError (trace file) on bad input.
// show_progress draws a bar (see Progress) when there are many steps.
PreparedWorkload prepare_workload(const SimConfig& config, int num_ranked, bool show_progress = false);

// Totals and per-step statistics of one policy over a prepared workload.
struct RunStats {
  int64_t steps = 0;
  int64_t tokens = 0;
  int64_t pairs = 0;
  int64_t kept = 0;      // pairs on one of their top-k experts
  int64_t rerouted = 0;  // pairs placed on a reroute candidate
  int64_t dropped = 0;
  int64_t tokens_fully_dropped = 0;
  std::vector<int64_t> expert_load;      // slots used per expert, summed over steps
  std::vector<int64_t> expert_capacity;  // slots offered per expert, summed over steps (-1: dropless)
  double drop_rate = 0.0;                // dropped / pairs
  double load_imbalance = 0.0;           // max / mean of expert_load (0 when nothing was placed)
  // Per step: drop rate, load imbalance (max/mean of that step's loads), and capacity in slots per expert
  // (batch scope: C; other scopes: the mean over experts of the slots offered; dropless: -1).
  double step_drop_rate_mean = 0.0, step_drop_rate_max = 0.0;
  double step_imbalance_mean = 0.0, step_imbalance_max = 0.0;
  double step_capacity_min = 0.0, step_capacity_mean = 0.0, step_capacity_max = 0.0;
  // Per step: the busiest expert's load against the nominal batch capacity cf * T * k / E of that step's T
  // tokens - what an engine sizes an expert's buffer from. Batch scope keeps it at most C / (cf*T*k/E), about
  // 1; request, causal and sequence scopes bound each request's share only, so their sum can exceed it
  // (docs/routing.md section 2, "What each scope bounds").
  double step_peak_load_mean = 0.0, step_peak_load_max = 0.0;
  int64_t peak_live_requests = 0;  // most requests held in the routing state at once
};

// Called with each step's index and plan, right after it was planned (the plan is reused for the next step).
using PlanObserver = std::function<void(size_t step, const DispatchPlan& plan)>;

// Plans every step under `policy` (causal scope: one RoutingState across steps; finished requests
// are released after their last step). Deterministic: the same inputs give the same stats. `observe` (if set)
// sees every plan, so callers that need the plans themselves (replay's CSV) do not plan again.
RunStats simulate(const PreparedWorkload& workload, const DispatchPolicy& policy,
                  Progress* progress = nullptr, const PlanObserver& observe = nullptr);

}  // namespace moe::sim

// Running dispatch policies over a workload: steps streamed, routed once, planned by every policy.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "router/dispatch_plan.h"
#include "router/dispatch_planner.h"
#include "router/dispatch_policy.h"
#include "router/router_config.h"
#include "router/routing_state.h"
#include "router/token_routes.h"
#include "sim/progress.h"
#include "sim/routing_stats.h"
#include "sim/sim_config.h"
#include "sim/workload.h"

namespace moe::sim {

// Ranks per token a policy needs: rules::num_ranked_needed (router/rules/capacity.h) for this router.
int ranks_needed(const RouterConfig& router, const DispatchPolicy& policy);

// Totals and per-step statistics of one policy over a workload.
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
  RoutingStats routing;            // the workload's choices before capacity: the same for every policy
};

// One policy planned step by step, its statistics folded as it goes (causal scope: one RoutingState across
// steps; finished requests are released after their last step). Sequence scope admits each request with its
// prompt length when its first row (position 0) is planned, from `prompt_length` (request id -> prompt
// length, outliving the simulator); without it (replay: one batch of logits) sequence scope plans without a
// state: each request's rows are its whole prompt. Deterministic: the same steps give the same stats.
class PolicySimulator {
 public:
  PolicySimulator(int num_experts, int top_k, const DispatchPolicy& policy,
                  const std::unordered_map<uint64_t, uint32_t>* prompt_length);
  // Plans `step` (rows) with `routes` (its rows' routes), then folds the plan into the statistics.
  void add(const Step& step, const TokenRoutes& routes);
  // The plan of the last step add() planned.
  const DispatchPlan& last_plan() const { return plan_; }
  // The totals so far, with `routing` as their routing statistics.
  RunStats result(const RoutingStats& routing) const;

 private:
  int num_experts_, top_k_;
  DispatchPolicy policy_;
  DispatchPlanner planner_;
  RoutingState state_;
  const std::unordered_map<uint64_t, uint32_t>* prompt_length_;
  bool sequence_, stateful_;
  DispatchPlan plan_;
  RunStats r_;
  std::vector<int64_t> step_load_;
  double cap_sum_ = 0.0, drop_sum_ = 0.0, imbalance_sum_ = 0.0, peak_sum_ = 0.0;
};

// How simulate_workload streams: tokens routed ahead of planning (whole steps, at least one) and a progress
// bar. Neither changes a result.
struct StreamOptions {
  int64_t window_tokens = kDefaultWindowTokens;
  bool show_progress = false;
};

// One pass over a workload under several policies.
struct WorkloadRun {
  int64_t num_requests = 0;
  int64_t num_tokens = 0;
  int64_t num_steps = 0;
  RoutingStats routing;         // the workload's choices before capacity: the same for every policy
  std::vector<RunStats> stats;  // per policy, in the order given (each with `routing`)
};

// Streams config.workload through config.router under every policy at once: steps are scheduled
// incrementally (StepScheduler); a window of whole steps (options.window_tokens tokens, at least one step) is
// routed (synthetic logits from the score model, parallel over 256-row items on config.threads workers, which
// also count the routing statistics), the statistics linked and every policy planned over it in step order
// (one PolicySimulator each; each policy's planning one work item beside the next window's routing), and the
// window dropped. Memory: the request specs, the live requests and one window (three with two or more
// threads), checked first (check_workload_size). Every token's logits are a function of (seed, request,
// position), so neither the window nor the thread count changes any result. Throws UsageError / DataError
// (trace file, size).
WorkloadRun simulate_workload(const SimConfig& config, const std::vector<DispatchPolicy>& policies,
                              const StreamOptions& options = {});

}  // namespace moe::sim

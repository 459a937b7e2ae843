// Running dispatch policies over a workload: steps streamed, routed once, planned by every policy.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "router/dispatch_plan.h"
#include "router/dispatch_planner.h"
#include "router/dispatch_policy.h"
#include "router/router_config.h"
#include "router/routing_rule.h"
#include "router/routing_state.h"
#include "router/token_routes.h"
#include "sim/deploy/accounting.h"
#include "sim/deploy/deploy_stats.h"
#include "sim/progress.h"
#include "sim/routing_stats.h"
#include "sim/serving/block_store.h"
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
  // The workload's choices before capacity (every policy of a run sees the same steps: RoutingStats of them).
  RoutingStats routing;
  // The serving engine's counts for the steps (continuous batching; the same for every policy of a run): what
  // its prefix cache served, preemptions, drafts.
  serving::EngineStats engine;
  // The rules whose prefix_cache_salt keyed the prefix cache (every policy's of the run, so that each may
  // restore what it serves; empty: no cache). A block is shared only where every rule allows it.
  std::vector<RoutingRule> cache_rules;
  // The deployment accounting of this policy's steps (enabled with SimConfig::deploy, ep-size > 0).
  deploy::DeployStats deploy;
};

// One policy planned step by step, its statistics folded as it goes. With `stateful` (a workload's steps)
// the scopes that carry a routing state (causal, sequence, prefix) keep one across steps and apply each
// step's lifecycle events (serving::replay_step, sim/serving/lifecycle.h): release the preempted, admit the
// admitted - restoring the positions a prefix cache served from the routing segments it kept for those
// blocks under this policy -, plan the rows, roll back, keep the segments of newly registered blocks
// (`kv_blocks` of them at most), release the finished. Without (replay: one batch of logits) sequence and
// prefix scopes plan without a state: each request's rows are its whole prompt. Deterministic: the same steps
// give the same stats.
class PolicySimulator : private serving::StepHandler {
 public:
  PolicySimulator(int num_experts, int top_k, const DispatchPolicy& policy, bool stateful,
                  int64_t kv_blocks = 0, bool record = false);
  // Applies `step`'s lifecycle events around planning its rows with `routes` (its rows' routes), and folds
  // the plan into the statistics.
  void add(const serving::Step& step, const TokenRoutes& routes);
  // Accounts every planned step on `deployment` too (sim/deploy/accounting.h; validated for this router).
  void account(const deploy::DeployConfig& deployment, const RouterConfig& router);
  // The plan of the last step add() planned.
  const DispatchPlan& last_plan() const { return plan_; }
  // The totals so far, with `routing` as their routing statistics.
  RunStats result(const RoutingStats& routing) const;

 private:
  // The lifecycle's hooks (serving::StepHandler) on this policy's routing state.
  void release(uint64_t id) override;
  void admit(const serving::Admission& admission) override;
  void forward(const serving::Step& step) override;
  void rollback(uint64_t id, uint32_t position) override;
  void keep(const serving::Registered& block) override;
  void fold_plan(const std::vector<TokenMeta>& rows);

  int num_experts_, top_k_;
  DispatchPolicy policy_;
  DispatchPlanner planner_;
  RoutingState state_;
  bool prompt_pools_, stateful_;
  // Per KV block: the routing segment the cache keeps beside it (a recording stateful policy; else empty).
  serving::BlockStore<RoutingSegment> cached_;
  std::vector<const RoutingSegment*> taken_;
  std::vector<RoutingSegment> prefix_;
  const TokenRoutes* routes_ = nullptr;  // the routes of the step being added
  DispatchPlan plan_;
  std::optional<deploy::DeployAccounter> deploy_;
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
  RoutingStats routing;  // the workload's choices before capacity (the first group's, RunStats::routing)
  std::vector<RunStats> stats;  // per policy, in the order given (each with `routing`)
};

// Streams config.workload through config.router under every policy at once, over one sequence of steps
// (StepStream, scheduled incrementally; with the prefix cache on, its blocks keyed by the salts of every
// policy's rule, so that every policy sees the same steps and may restore every hit): a window of whole steps
// (options.window_tokens tokens, at least one step) is routed (synthetic logits from the score model,
// parallel over 256-row items on config.threads workers, which also count the routing statistics), the
// statistics linked and every policy planned over it in step order (one PolicySimulator each; each policy's
// planning one work item beside the next window's routing), and the window dropped. Memory: the request
// specs, the live requests and one window (three with two or more threads), checked first
// (check_workload_size). Every token's logits are a function of (seed, request, position), so neither the
// window nor the thread count changes any result. `schedule_policies`, when given, are the policies whose
// rules key the cache instead of `policies`: a caller that plans a sweep's points in parts (the ranks of an
// MPI job) passes every point's, so that each part plans the steps of the whole sweep. Throws UsageError /
// DataError (trace file, size).
WorkloadRun simulate_workload(const SimConfig& config, const std::vector<DispatchPolicy>& policies,
                              const StreamOptions& options = {},
                              const std::vector<DispatchPolicy>& schedule_policies = {});

}  // namespace moe::sim

#include "sim/experiment.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "router/dispatch_planner.h"
#include "router/routing_state.h"
#include "router/rules/capacity.h"
#include "router/rules/plan_rules.h"
#include "router/topk_router.h"
#include "sim/errors.h"
#include "sim/score_model.h"

namespace moe::sim {
namespace {

double imbalance(const std::vector<int64_t>& loads) {
  int64_t sum = 0, max = 0;
  for (int64_t l : loads) {
    sum += l;
    max = std::max(max, l);
  }
  if (sum == 0) return 0.0;
  return static_cast<double>(max) * static_cast<double>(loads.size()) / static_cast<double>(sum);
}

}  // namespace

int ranks_needed(const RouterConfig& router, const DispatchPolicy& policy) {
  return rules::num_ranked_needed(policy, router.num_experts, router.top_k);
}

PreparedWorkload prepare_workload(const SimConfig& config, int num_ranked, bool show_progress) {
  PreparedWorkload w;
  w.router = config.router;
  w.num_ranked = std::min(std::max(num_ranked, config.router.top_k), config.router.num_experts);
  // The workload's size is checked before anything of its size is allocated: synthetic workloads from the
  // expected lengths before the requests are drawn, every workload exactly before it is scheduled.
  const int E = config.router.num_experts, k = config.router.top_k;
  const char* advice = "use fewer --requests or shorter --prompt-len / --decode-len";
  if (config.workload.trace_file.empty()) {
    check_workload_size(expected_footprint(config.workload), E, k, w.num_ranked, advice);
  }
  w.requests = make_requests(config.workload, config.seed);
  check_workload_size(footprint(w.requests, config.workload.token_budget), E, k, w.num_ranked,
                      config.workload.trace_file.empty() ? advice : "use a shorter trace");
  w.steps = schedule(w.requests, config.workload.token_budget);
  const ScoreModel scores(config.scores, config.router.num_experts, config.seed);
  const TopKRouter router(config.router, w.num_ranked);
  std::vector<float> logits;
  Progress progress("route", static_cast<int64_t>(w.steps.size()), show_progress && w.steps.size() > 50);
  w.routes.resize(w.steps.size());
  for (size_t s = 0; s < w.steps.size(); ++s) {
    scores.logits(w.steps[s].rows, logits);
    router.route(logits.data(), static_cast<int>(w.steps[s].rows.size()), w.routes[s]);
    w.num_tokens += static_cast<int64_t>(w.steps[s].rows.size());
    progress.advance();
  }
  return w;
}

RunStats simulate(const PreparedWorkload& w, const DispatchPolicy& policy, Progress* progress,
                  const PlanObserver& observe) {
  const int E = w.router.num_experts;
  const int k = w.router.top_k;
  DispatchPlanner planner(E, k, policy);
  // Causal and sequence scopes carry a routing state across steps. Sequence scope admits each request with
  // its prompt length when its first row is scheduled (a serving engine knows it at admission). A workload
  // without request specs (replay: one batch of logits) plans sequence scope without a state: each request's
  // rows are its whole prompt.
  RoutingState state(E, k);
  const bool sequence = policy.scope == CapacityScope::kSequence && !w.requests.empty();
  const bool stateful = sequence || policy.scope == CapacityScope::kCausal;
  std::unordered_map<uint64_t, uint32_t> prompt_length;
  if (sequence) {
    for (const RequestSpec& r : w.requests) prompt_length[r.id] = r.prompt_len;
  }
  DispatchPlan plan;
  RunStats r;
  r.expert_load.assign(E, 0);
  r.expert_capacity.assign(E, policy.scope == CapacityScope::kNone ? -1 : 0);
  r.step_capacity_min = 1e300;
  r.step_capacity_max = -1e300;
  std::vector<int64_t> step_load(E);
  double cap_sum = 0.0, drop_sum = 0.0, imbalance_sum = 0.0, peak_sum = 0.0;
  for (size_t s = 0; s < w.steps.size(); ++s) {
    const Step& step = w.steps[s];
    if (step.rows.empty()) continue;
    if (sequence) {
      for (const TokenMeta& m : step.rows) {
        if (m.position == 0) state.admit(m.request_id, prompt_length.at(m.request_id));
      }
    }
    planner.plan(w.routes[s], step.rows, stateful ? &state : nullptr, plan);
    if (observe) observe(s, plan);
    if (stateful) r.peak_live_requests = std::max<int64_t>(r.peak_live_requests, state.num_requests());
    ++r.steps;
    r.tokens += plan.num_tokens;
    r.pairs += plan.num_pairs();
    r.kept += plan.num_kept;
    r.rerouted += plan.num_rerouted;
    r.dropped += plan.num_dropped;
    r.tokens_fully_dropped += plan.num_tokens_fully_dropped;
    double offered = 0.0;
    for (int e = 0; e < E; ++e) {
      r.expert_load[e] += plan.expert_load[e];
      step_load[e] = plan.expert_load[e];
      if (policy.scope != CapacityScope::kNone) r.expert_capacity[e] += plan.expert_capacity[e];
      offered += static_cast<double>(plan.expert_capacity[e]);
    }
    const double cap = policy.scope == CapacityScope::kNone    ? -1.0
                       : policy.scope == CapacityScope::kBatch ? static_cast<double>(plan.batch_capacity)
                                                               : offered / E;
    r.step_capacity_min = std::min(r.step_capacity_min, cap);
    r.step_capacity_max = std::max(r.step_capacity_max, cap);
    cap_sum += cap;
    const double drop = static_cast<double>(plan.num_dropped) / static_cast<double>(plan.num_pairs());
    drop_sum += drop;
    r.step_drop_rate_max = std::max(r.step_drop_rate_max, drop);
    const double imb = imbalance(step_load);
    imbalance_sum += imb;
    r.step_imbalance_max = std::max(r.step_imbalance_max, imb);
    const double nominal = policy.capacity_factor * static_cast<double>(plan.num_tokens) * k / E;
    const double peak =
        static_cast<double>(*std::max_element(plan.expert_load.begin(), plan.expert_load.end())) / nominal;
    peak_sum += peak;
    r.step_peak_load_max = std::max(r.step_peak_load_max, peak);
    if (stateful) {
      for (uint64_t id : step.finished) state.release(id);
    }
    if (progress) progress->advance();
  }
  if (r.steps > 0) {
    r.step_capacity_mean = cap_sum / static_cast<double>(r.steps);
    r.step_drop_rate_mean = drop_sum / static_cast<double>(r.steps);
    r.step_imbalance_mean = imbalance_sum / static_cast<double>(r.steps);
    r.step_peak_load_mean = peak_sum / static_cast<double>(r.steps);
    r.drop_rate = static_cast<double>(r.dropped) / static_cast<double>(r.pairs);
  } else {
    r.step_capacity_min = r.step_capacity_max = 0.0;
  }
  r.load_imbalance = imbalance(r.expert_load);
  return r;
}

}  // namespace moe::sim

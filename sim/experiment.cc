#include "sim/experiment.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <unordered_map>

#include "router/rules/capacity.h"
#include "router/rules/plan_rules.h"
#include "router/topk_router.h"
#include "sim/errors.h"
#include "sim/parallel.h"
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

PolicySimulator::PolicySimulator(int num_experts, int top_k, const DispatchPolicy& policy, bool stateful,
                                 int64_t kv_blocks, bool record)
    : num_experts_(num_experts),
      top_k_(top_k),
      policy_(policy),
      planner_(num_experts, top_k, policy),
      state_(num_experts, top_k, record && stateful && rules::carries_routing_state(policy)),
      prompt_pools_(rules::pools_prompt(policy)),
      stateful_(stateful && rules::carries_routing_state(policy)),
      step_load_(num_experts) {
  r_.expert_load.assign(num_experts, 0);
  r_.expert_capacity.assign(num_experts, policy.scope == CapacityScope::kNone ? -1 : 0);
  r_.step_capacity_min = 1e300;
  r_.step_capacity_max = -1e300;
  if (stateful_ && state_.records()) cached_ = serving::BlockStore<RoutingSegment>(kv_blocks);
}

void PolicySimulator::account(const deploy::DeployConfig& deployment, const RouterConfig& router) {
  deploy_.emplace(deployment, num_experts_, top_k_, router.num_groups, policy_);
}

void PolicySimulator::add(const serving::Step& step, const TokenRoutes& routes) {
  routes_ = &routes;
  serving::replay_step(step, *this);
  routes_ = nullptr;
}

void PolicySimulator::release(uint64_t id) {
  if (stateful_) state_.release_if_held(id);
}

void PolicySimulator::admit(const serving::Admission& a) {
  if (!stateful_) return;
  if (a.cached > 0) {
    cached_.take(a, taken_);  // the segments of exactly its cached positions, kept under the matched keys
    prefix_.clear();
    for (const RoutingSegment* s : taken_) prefix_.push_back(*s);
    state_.restore(a.id, a.turns(), prefix_);
  } else if (prompt_pools_) {
    state_.admit(a.id, a.turns());
  }
}

void PolicySimulator::forward(const serving::Step& step) {
  if (!step.rows.empty()) fold_plan(step.rows);
}

void PolicySimulator::rollback(uint64_t id, uint32_t position) {
  if (stateful_ && state_.find(id) != nullptr) state_.rollback(id, position);
}

void PolicySimulator::keep(const serving::Registered& b) {
  if (stateful_ && state_.records()) cached_.keep(b, state_.segment(b.id, b.begin, b.end));
}

void PolicySimulator::fold_plan(const std::vector<TokenMeta>& rows) {
  const int E = num_experts_;
  const TokenRoutes& routes = *routes_;
  planner_.plan(routes, rows, stateful_ ? &state_ : nullptr, plan_);
  const DispatchPlan& plan = plan_;
  RunStats& r = r_;
  if (stateful_) r.peak_live_requests = std::max<int64_t>(r.peak_live_requests, state_.num_requests());
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
    step_load_[e] = plan.expert_load[e];
    if (policy_.scope != CapacityScope::kNone) r.expert_capacity[e] += plan.expert_capacity[e];
    offered += static_cast<double>(plan.expert_capacity[e]);
  }
  const double cap = policy_.scope == CapacityScope::kNone    ? -1.0
                     : policy_.scope == CapacityScope::kBatch ? static_cast<double>(plan.batch_capacity)
                                                              : offered / E;
  r.step_capacity_min = std::min(r.step_capacity_min, cap);
  r.step_capacity_max = std::max(r.step_capacity_max, cap);
  cap_sum_ += cap;
  const double drop = static_cast<double>(plan.num_dropped) / static_cast<double>(plan.num_pairs());
  drop_sum_ += drop;
  r.step_drop_rate_max = std::max(r.step_drop_rate_max, drop);
  const double imb = imbalance(step_load_);
  imbalance_sum_ += imb;
  r.step_imbalance_max = std::max(r.step_imbalance_max, imb);
  const double nominal = policy_.capacity_factor * static_cast<double>(plan.num_tokens) * top_k_ / E;
  const double peak =
      static_cast<double>(*std::max_element(plan.expert_load.begin(), plan.expert_load.end())) / nominal;
  peak_sum_ += peak;
  r.step_peak_load_max = std::max(r.step_peak_load_max, peak);
  if (deploy_) deploy_->add(rows, routes, plan);
}

RunStats PolicySimulator::result(const RoutingStats& routing) const {
  RunStats r = r_;
  r.routing = routing;
  if (r.steps > 0) {
    r.step_capacity_mean = cap_sum_ / static_cast<double>(r.steps);
    r.step_drop_rate_mean = drop_sum_ / static_cast<double>(r.steps);
    r.step_imbalance_mean = imbalance_sum_ / static_cast<double>(r.steps);
    r.step_peak_load_mean = peak_sum_ / static_cast<double>(r.steps);
    r.drop_rate = static_cast<double>(r.dropped) / static_cast<double>(r.pairs);
  } else {
    r.step_capacity_min = r.step_capacity_max = 0.0;
  }
  r.load_imbalance = imbalance(r.expert_load);
  if (deploy_) r.deploy = deploy_->result();
  return r;
}

namespace {

// One streamed pass of the workload's steps under `policies`.
WorkloadRun simulate_steps(const SimConfig& config, const std::vector<RequestSpec>& requests,
                           const WorkloadFootprint& f, const std::vector<DispatchPolicy>& policies,
                           const std::vector<DispatchPolicy>& schedule_policies, int num_ranked,
                           const StreamOptions& options) {
  const int E = config.router.num_experts, k = config.router.top_k;
  const bool record = config.workload.prefix_cache || config.workload.spec_tokens > 0;
  std::vector<PolicySimulator> sims;
  sims.reserve(policies.size());
  for (const DispatchPolicy& p : policies) {
    sims.emplace_back(E, k, p, true, config.workload.kv_blocks, record);
    if (config.deploy.enabled()) sims.back().account(config.deploy, config.router);
  }
  // The prefix cache serves a block only where every policy's rule allows it: one schedule for all.
  std::vector<RoutingRule> cache_rules;
  if (config.workload.prefix_cache) {
    for (const DispatchPolicy& p : schedule_policies) cache_rules.push_back(RoutingRule::of(p));
  }

  const ScoreModel scores(config.scores, E, config.seed);
  const TopKRouter router(config.router, num_ranked);
  const int threads = config.threads > 0 ? config.threads : default_threads();
  std::vector<ScoreModel::TopicCache> caches;
  std::vector<std::vector<float>> logits(threads);
  for (int t = 0; t < threads; ++t) caches.emplace_back(scores);
  // Routing statistics: each worker counts its items' choices and inner pairs (count_range), an in-order
  // chain links the steps (link); integer counts, so the split changes nothing.
  RoutingStatsCounter counter(E, k);
  std::vector<RoutingStatsCounts> counts(threads, counter.make_counts());

  WorkloadRun out;
  out.num_requests = static_cast<int64_t>(requests.size());
  Progress progress("simulate", static_cast<int64_t>(f.tokens),
                    options.show_progress && f.tokens > 4.0 * kDefaultWindowTokens);
  // A window: whole steps, their routes and their routing work items of at most kRowsPerItem rows of one step
  // (vectors kept across windows, so their capacity is reused). With more than one thread three windows are
  // held (below).
  constexpr int kRowsPerItem = 256;
  struct Item {
    size_t step;
    int first, count;
  };
  struct Window {
    std::vector<serving::Step> steps;
    std::vector<std::vector<TokenMeta>> keys;  // per step: its rows' router-input keys (empty: the rows)
    std::vector<TokenRoutes> routes;
    std::vector<Item> items;
    size_t n = 0;
  };
  StepStream stream(requests, config.workload, config.seed, cache_rules);
  // Schedules the next window into w (at least one step unless the workload is done); false once the
  // stream has no more steps.
  const auto schedule = [&](Window& w) {
    w.n = 0;
    w.items.clear();
    int64_t window_rows = 0;
    while (window_rows < options.window_tokens || w.n == 0) {
      if (w.n == w.steps.size()) {
        w.steps.emplace_back();
        w.keys.emplace_back();
        w.routes.emplace_back();
      }
      if (!stream.next(w.steps[w.n], w.keys[w.n])) return false;
      const int rows = static_cast<int>(w.steps[w.n].rows.size());
      w.routes[w.n].resize(rows, E, k, router.num_ranked());
      for (int first = 0; first < rows; first += kRowsPerItem)
        w.items.push_back(Item{w.n, first, std::min(kRowsPerItem, rows - first)});
      window_rows += rows;
      ++w.n;
    }
    return true;
  };
  // Scores, routes and counts the statistics of one work item of w.
  const auto route_item = [&](Window& w, const Item& item, int worker) {
    const serving::Step& step = w.steps[item.step];
    const std::vector<TokenMeta>& keys = w.keys[item.step].empty() ? step.rows : w.keys[item.step];
    const std::span<const TokenMeta> rows(keys.data() + item.first, item.count);
    std::vector<float>& buffer = logits[worker];
    buffer.resize(static_cast<size_t>(item.count) * E);
    scores.logits(rows, buffer.data(), caches[worker]);
    router.route_rows(buffer.data(), item.first, item.count, w.routes[item.step]);
    counter.count_range(w.steps[item.step].rows, w.routes[item.step], item.first, item.count, counts[worker]);
  };
  // The in-order work of a window, as independent chains that each see the steps in order: chain 0 links
  // the routing statistics (and counts the steps), chain 1 + i plans policy i.
  const size_t num_chains = 1 + sims.size();
  const auto run_chain = [&](const Window& w, size_t chain) {
    for (size_t s = 0; s < w.n; ++s) {
      if (chain > 0) {
        sims[chain - 1].add(w.steps[s], w.routes[s]);
        continue;
      }
      counter.link(w.steps[s].rows, w.routes[s], kRowsPerItem);
      for (uint64_t id : w.steps[s].finished) counter.release(id);
      out.num_tokens += static_cast<int64_t>(w.steps[s].rows.size());
      ++out.num_steps;
      progress.advance(static_cast<int64_t>(w.steps[s].rows.size()));
    }
  };
  if (threads == 1) {
    Window w;
    for (bool more = true; more;) {
      more = schedule(w);
      for (const Item& item : w.items) route_item(w, item, 0);
      for (size_t c = 0; c < num_chains; ++c) run_chain(w, c);
    }
  } else {
    // Three windows in flight: while window i is routed, window i - 1's chains run and window i + 1 is
    // scheduled, each of these a work item ahead of the routing items (the chains first, the longest), so
    // every in-order part overlaps the parallel one and no core waits while another has work.
    ItemRunner runner(threads);
    Window windows[3];
    bool more = schedule(windows[0]);
    const Window* pending = nullptr;  // routed, its chains not yet run
    for (int i = 0;; ++i) {
      Window& w = windows[i % 3];
      Window& next = windows[(i + 1) % 3];
      const bool schedule_next = more;
      // Lead items: the chains of the previous window (the statistics' chain with the first policy's, so that
      // one core reads the window for both), then the scheduling of the next window.
      const size_t chain_items = pending != nullptr ? std::max<size_t>(1, sims.size()) : 0;
      const size_t lead = chain_items + (schedule_next ? 1 : 0);
      runner.run(lead + w.items.size(), [&](size_t item, int worker) {
        if (item >= lead) {
          route_item(w, w.items[item - lead], worker);
        } else if (item < chain_items) {
          if (item == 0) run_chain(*pending, 0);
          if (item < sims.size()) run_chain(*pending, item + 1);
        } else {
          more = schedule(next);
        }
      });
      pending = &w;
      if (!schedule_next) break;
    }
    runner.run(num_chains, [&](size_t c, int) { run_chain(*pending, c); });
  }
  for (const RoutingStatsCounts& c : counts) counter.merge(c);
  out.routing = counter.result();
  const serving::EngineStats engine = stream.engine_stats();
  for (const PolicySimulator& sim : sims) {
    out.stats.push_back(sim.result(out.routing));
    out.stats.back().engine = engine;
    out.stats.back().cache_rules = cache_rules;
  }
  return out;
}

}  // namespace

WorkloadRun simulate_workload(const SimConfig& config, const std::vector<DispatchPolicy>& policies,
                              const StreamOptions& options,
                              const std::vector<DispatchPolicy>& schedule_policies) {
  const int E = config.router.num_experts, k = config.router.top_k;
  int num_ranked = k;
  for (const DispatchPolicy& p : policies) num_ranked = std::max(num_ranked, ranks_needed(config.router, p));
  num_ranked = std::min(num_ranked, E);
  // The workload's size is checked before anything of its size is allocated: synthetic workloads from the
  // expected lengths before the requests are drawn, every workload exactly before it is scheduled.
  const char* advice = "use fewer --requests or shorter --prompt-len / --decode-len";
  const double window = static_cast<double>(std::max<int64_t>(1, options.window_tokens));
  if (config.workload.trace_file.empty()) {
    WorkloadFootprint f = expected_footprint(config.workload);
    f.window_tokens = window;
    check_workload_size(f, E, k, num_ranked, advice);
  }
  const std::vector<RequestSpec> requests = make_requests(config.workload, config.seed);
  WorkloadFootprint f = footprint(requests, config.workload.token_budget);
  f.window_tokens = window;
  check_workload_size(f, E, k, num_ranked,
                      config.workload.trace_file.empty() ? advice : "use a shorter trace");

  return simulate_steps(config, requests, f, policies,
                        schedule_policies.empty() ? policies : schedule_policies, num_ranked, options);
}

}  // namespace moe::sim

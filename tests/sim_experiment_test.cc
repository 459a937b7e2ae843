// Experiments: run statistics, causal scope across steps, the probe's invariance readings, and the sweep.
#include <gtest/gtest.h>

#include "sim/errors.h"
#include "sim/experiment.h"
#include "sim/probe.h"
#include "sim/report.h"
#include "sim/sim_config.h"
#include "sim/sweep.h"

namespace moe::sim {
namespace {

RunStats run(const Overrides& o) {
  const SimConfig c = build_config(o);
  return simulate_workload(c, {c.policy}).stats.front();
}

TEST(SimExperiment, CountsAddUp) {
  for (const char* mode : {"greedy", "stable", "rank-only"}) {
    const RunStats s = run({{"mode", mode}, {"requests", "12"}, {"capacity-factor", "1"}});
    EXPECT_EQ(s.pairs, s.tokens * 2);
    EXPECT_EQ(s.kept + s.rerouted + s.dropped, s.pairs);
    int64_t load = 0;
    for (int64_t l : s.expert_load) load += l;
    EXPECT_EQ(load, s.kept + s.rerouted);
    EXPECT_GT(s.dropped, 0) << mode;
    EXPECT_GE(s.load_imbalance, 1.0);
  }
  const RunStats dropless = run({{"scope", "none"}});
  EXPECT_EQ(dropless.dropped, 0);
  const RunStats reroute = run({{"overflow", "reroute"}, {"reroute-depth", "2"}, {"capacity-factor", "1"}});
  EXPECT_GT(reroute.rerouted, 0);
}

TEST(SimExperiment, SameSeedSameStats) {
  const Overrides o = {
      {"token-budget", "96"}, {"arrival-rate", "0.5"}, {"seed", "17"}, {"skew", "dirichlet:0.5"}};
  const RunStats a = run(o), b = run(o);
  EXPECT_EQ(a.dropped, b.dropped);
  EXPECT_EQ(a.expert_load, b.expert_load);
  EXPECT_EQ(a.step_drop_rate_max, b.step_drop_rate_max);
  EXPECT_GT(a.steps, 1);
}

TEST(SimExperiment, CausalAndSequenceScopesAreIndependentOfChunkingAndBatching) {
  // Under causal and sequence scopes a request's decisions depend only on the request (its prefix, or its
  // prompt length), so the totals are the same whatever the token budget (chunk sizes, batch mates, decode
  // interleaving) and arrival pattern.
  for (const char* scope : {"causal", "sequence"}) {
    RunStats reference;
    bool first = true;
    for (const char* budget : {"13", "64", "1000000"}) {
      for (const char* rate : {"0", "0.3"}) {
        const RunStats s = run({{"scope", scope},
                                {"token-budget", budget},
                                {"arrival-rate", rate},
                                {"requests", "10"},
                                {"decode-len", "uniform:0,12"},
                                {"capacity-factor", "1"}});
        if (first) {
          reference = s;
          first = false;
          EXPECT_GT(s.dropped, 0);
          continue;
        }
        SCOPED_TRACE(std::string(scope) + " budget " + budget + " rate " + rate);
        EXPECT_EQ(s.tokens, reference.tokens);
        EXPECT_EQ(s.dropped, reference.dropped);
        EXPECT_EQ(s.expert_load, reference.expert_load);
      }
    }
  }
  // Batch scope is not: the budget changes what is dropped.
  const RunStats a = run({{"token-budget", "13"}, {"capacity-factor", "1"}, {"requests", "10"}});
  const RunStats b = run({{"token-budget", "500"}, {"capacity-factor", "1"}, {"requests", "10"}});
  EXPECT_NE(a.dropped, b.dropped);
}

// The busiest expert's load per step against cf * T * k / E: batch scope keeps it within the rounding of C;
// the per-request scopes bound each request's share, so a decode-heavy step (every row its own request, each
// offered at least one slot per expert) can exceed it.
TEST(SimExperiment, PeakLoadAgainstTheNominalCapacity) {
  const Overrides base = {
      {"requests", "64"},    {"prompt-len", "fixed:4"}, {"decode-len", "fixed:16"}, {"token-budget", "64"},
      {"arrival-rate", "0"}, {"capacity-factor", "1"},  {"experts", "8"},           {"top-k", "2"}};
  Overrides batch = base;
  batch["scope"] = "batch";
  const RunStats b = run(batch);
  EXPECT_GT(b.step_peak_load_max, 0.0);
  // C = ceil(cf*T*k/E) < cf*T*k/E + 1: within 1 + E / (cf*T*k), 4 for the last step's single row.
  EXPECT_LE(b.step_peak_load_max, 1.0 + 8.0 / (1.0 * 1 * 2));
  for (const char* scope : {"request", "sequence"}) {
    Overrides o = base;
    o["scope"] = scope;
    const RunStats s = run(o);
    // The steps of 64 decode rows offer every row a slot at every expert: 1.45x vs 2.3x on average here.
    EXPECT_GT(s.step_peak_load_mean, 1.4 * b.step_peak_load_mean) << scope;
  }
}

// Streaming changes nothing: every policy's JSON is the same with a window of one token (one step at a time)
// as with the whole workload in one window, on 1 and 3 threads, planned alone or in lockstep with others -
// plain continuous batching, and with the serving engine's shared system prompts, prefix cache, preemption
// and speculation. With the cache every policy of a run sees the same steps (the cache keyed by every rule's
// salt): planned in another order, each policy's JSON is the same; planned alone, a policy whose rule salts
// the cache as the run's do gets the same steps too.
TEST(SimExperiment, WindowSizeChangesNoResult) {
  const Overrides plain = {
      {"requests", "40"},     {"prompt-len", "uniform:1,90"}, {"decode-len", "uniform:0,30"},
      {"token-budget", "64"}, {"arrival-rate", "2"},          {"experts", "16"},
      {"top-k", "2"},         {"skew", "dirichlet:0.5"}};
  Overrides serving = plain;
  for (const auto& [k, v] : Overrides{{"system-prompts", "3"},
                                      {"system-prompt-len", "uniform:10,40"},
                                      {"prefix-cache", "true"},
                                      {"kv-blocks", "40"},
                                      {"block-size", "8"},
                                      {"spec-tokens", "2"},
                                      {"chunk-size", "24"}}) {
    serving[k] = v;
  }
  for (const Overrides& base : {plain, serving}) {
    const SimConfig c = build_config(base);
    const bool cache = c.workload.prefix_cache;
    std::vector<DispatchPolicy> policies;
    std::vector<std::string> names;
    for (const char* mode : {"greedy", "stable", "rank-only"}) {
      for (const char* scope : {"batch", "causal", "sequence", "prefix", "request", "none"}) {
        // Sequence scope salts every block with the prompt length: beside it the cache would serve nothing.
        if (cache && std::string(scope) == "sequence") continue;
        Overrides o = base;
        o["mode"] = mode;
        o["scope"] = scope;
        if (std::string(scope) == "batch") o["overflow"] = "reroute";
        if (std::string(mode) == "rank-only") o["lookahead"] = "8";
        policies.push_back(build_config(o).policy);
        names.push_back(std::string(mode) + " " + scope);
      }
    }
    SCOPED_TRACE(cache ? "serving engine" : "plain");
    const auto json = [](const RunStats& s) { return run_stats_json(s, true).dump(); };
    const WorkloadRun whole =
        simulate_workload(c, policies, StreamOptions{.window_tokens = int64_t{1} << 40});
    ASSERT_EQ(whole.stats.size(), policies.size());
    EXPECT_GT(whole.num_steps, 10);
    if (cache) {
      EXPECT_GT(whole.stats[0].engine.cached_prompt_tokens, 0);
      EXPECT_GT(whole.stats[0].engine.preemptions, 0);
      EXPECT_GT(whole.stats[0].engine.accepted, 0);
      EXPECT_EQ(whole.stats[0].cache_rules.size(), policies.size());
    }
    for (int threads : {1, 3}) {
      SimConfig t = c;
      t.threads = threads;
      const WorkloadRun one = simulate_workload(t, policies, StreamOptions{.window_tokens = 1});
      EXPECT_EQ(one.num_steps, whole.num_steps);
      EXPECT_EQ(one.num_tokens, whole.num_tokens);
      for (size_t i = 0; i < policies.size(); ++i) {
        EXPECT_EQ(json(one.stats[i]), json(whole.stats[i])) << names[i] << ", " << threads << " threads";
      }
    }
    const std::vector<DispatchPolicy> reversed(policies.rbegin(), policies.rend());
    const WorkloadRun backwards = simulate_workload(c, reversed, StreamOptions{.window_tokens = 100});
    for (size_t i = 0; i < policies.size(); ++i) {
      EXPECT_EQ(json(backwards.stats[policies.size() - 1 - i]), json(whole.stats[i]))
          << names[i] << " reversed";
    }
    for (size_t i = 0; i < policies.size(); i += 4) {
      if (cache) break;  // alone, a policy keys the cache by its own salt: other steps (the next test)
      const WorkloadRun alone = simulate_workload(c, {policies[i]}, StreamOptions{.window_tokens = 100});
      EXPECT_EQ(json(alone.stats.front()), json(whole.stats[i])) << names[i] << " alone";
    }
  }
}

// One schedule for every policy of a sweep: the prefix cache is keyed by every rule's salt, so adding
// sequence scope (salted by the prompt length everywhere) to a sweep of prefix-scope policies changes the
// steps of all of them - the same steps for each, the cache serving only blocks of equal prompt length - and
// a policy whose rule never salts (batch scope) gets the salting rules' steps beside them. The table names
// the key.
TEST(SimExperiment, PoliciesOfASweepShareOneSchedule) {
  const SimConfig c = build_config({{"requests", "60"},
                                    {"prompt-len", "uniform:1,90"},
                                    {"decode-len", "uniform:0,30"},
                                    {"token-budget", "64"},
                                    {"arrival-rate", "2"},
                                    {"system-prompts", "3"},
                                    {"system-prompt-len", "uniform:16,48"},
                                    {"prefix-cache", "true"},
                                    {"kv-blocks", "60"},
                                    {"block-size", "8"},
                                    {"spec-tokens", "2"}});
  DispatchPolicy greedy = DispatchPolicy::mode("greedy");
  DispatchPolicy stable = DispatchPolicy::mode("stable");
  DispatchPolicy sequence = stable;
  sequence.scope = CapacityScope::kSequence;
  const auto serving = [](const RunStats& s) { return serving_stats_json(s).dump(); };
  const WorkloadRun prefix_only = simulate_workload(c, {stable});
  const WorkloadRun both = simulate_workload(c, {greedy, stable});
  const WorkloadRun with_sequence = simulate_workload(c, {greedy, stable, sequence});
  // Greedy's rule never salts: beside stable it gets stable's steps.
  EXPECT_EQ(serving(both.stats[0]), serving(both.stats[1]));
  EXPECT_EQ(both.stats[1].engine.cached_prompt_tokens, prefix_only.stats[0].engine.cached_prompt_tokens);
  EXPECT_EQ(both.num_steps, prefix_only.num_steps);
  EXPECT_EQ(both.stats[1].dropped, prefix_only.stats[0].dropped);
  EXPECT_GT(prefix_only.stats[0].engine.cached_prompt_tokens, 0);
  EXPECT_EQ(cache_key_name(both.stats[0].cache_rules), "tokens+salt(prefix, lookahead 16)");
  // With sequence scope in the sweep every policy's cache serves only equal prompt lengths, fewer hits.
  for (const RunStats& s : with_sequence.stats) {
    EXPECT_EQ(serving(s), serving(with_sequence.stats[0]));
    EXPECT_EQ(s.engine.steps, with_sequence.num_steps);
  }
  EXPECT_LT(with_sequence.stats[0].engine.cached_prompt_tokens,
            prefix_only.stats[0].engine.cached_prompt_tokens);
  EXPECT_EQ(cache_key_name(with_sequence.stats[0].cache_rules),
            "tokens+salt(prefix, lookahead 16; sequence: prompt length)");
  EXPECT_EQ(cache_key_name({}), "tokens");
}

std::vector<ProbeResult> probe(const Overrides& o) {
  const SimConfig c = build_config(o);
  std::vector<SimConfig> per_mode;
  for (const auto& m : c.compared_modes()) {
    Overrides with_mode = o;
    with_mode["mode"] = m;
    per_mode.push_back(build_config(with_mode));
  }
  return run_probe(c, per_mode);
}

TEST(SimProbe, StableIsInvariantGreedyIsNot) {
  const auto results = probe({{"capacity-factor", "1.0"}, {"trials", "30"}, {"seed", "4"}});
  ASSERT_EQ(results.size(), 3u);
  for (const auto& r : results) {
    if (r.mode == "stable") {
      EXPECT_EQ(r.displaced_pairs, 0);
      EXPECT_EQ(r.distinct_outcomes, 1);
      EXPECT_EQ(r.mean_drop_rate, r.alone_drop_rate);
    } else {
      EXPECT_GT(r.displacement_rate, 0.0) << r.mode;
      EXPECT_GT(r.distinct_outcomes, 1) << r.mode;
    }
  }
  // Causal, sequence and dropless scopes are invariant too.
  for (const char* scope : {"causal", "sequence", "none"}) {
    const auto rs = probe({{"mode", "greedy"}, {"scope", scope}, {"trials", "10"}});
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].displaced_pairs, 0) << scope;
    EXPECT_EQ(rs[0].distinct_outcomes, 1) << scope;
  }
}

TEST(SimProbe, ArrivalPriorityUnderRequestScopeNeedsTheRequestsRowsInOrder) {
  // Request scope with arrival priority orders a request's own rows by arrival: invariant when each request's
  // rows stay together in position order (shuffle=requests), not when the probe's own rows are permuted.
  const Overrides base = {{"mode", "stable"},
                          {"scope", "request"},
                          {"priority", "arrival"},
                          {"capacity-factor", "1"},
                          {"trials", "15"}};
  Overrides by_request = base;
  by_request["shuffle"] = "requests";
  const auto kept_order = probe(by_request);
  ASSERT_EQ(kept_order.size(), 1u);
  EXPECT_EQ(kept_order[0].displaced_pairs, 0);
  EXPECT_EQ(kept_order[0].distinct_outcomes, 1);
  const auto permuted = probe(base);
  EXPECT_GT(permuted[0].displaced_pairs, 0);
}

TEST(SimSweep, GridOrderAndAxes) {
  const auto points =
      run_sweep({{"capacity-factors", "0.5,2"}, {"modes", "greedy,stable"}, {"axis", "top-k=1,2"}}, false);
  ASSERT_EQ(points.size(), 8u);
  EXPECT_EQ(points[0].axis_values[0], (std::pair<std::string, std::string>{"top-k", "1"}));
  EXPECT_EQ(points[0].mode, "greedy");
  EXPECT_EQ(points[1].capacity_factor, 2.0);
  EXPECT_EQ(points[2].mode, "stable");
  EXPECT_EQ(points[4].axis_values[0].second, "2");
  EXPECT_EQ(points[4].series(), "greedy top-k=2");
  // More capacity never drops more, for the same mode.
  for (size_t i = 0; i < points.size(); i += 2)
    EXPECT_LE(points[i + 1].stats.drop_rate, points[i].stats.drop_rate);
  EXPECT_THROW(parse_axis("bogus=1,2"), UsageError);
  EXPECT_THROW(parse_axis("mode=greedy"), UsageError);
}

}  // namespace
}  // namespace moe::sim

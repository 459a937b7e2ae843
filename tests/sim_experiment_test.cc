// Experiments: run statistics, causal scope across steps, the probe's invariance readings, and the sweep.
#include <gtest/gtest.h>

#include "sim/errors.h"
#include "sim/experiment.h"
#include "sim/probe.h"
#include "sim/sim_config.h"
#include "sim/sweep.h"

namespace moe::sim {
namespace {

RunStats run(const Overrides& o) {
  const SimConfig c = build_config(o);
  return simulate(prepare_workload(c, ranks_needed(c.router, c.policy)), c.policy);
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

TEST(SimExperiment, CausalScopeIsIndependentOfChunkingAndBatching) {
  // Under causal scope a request's decisions depend only on its own prefix, so the totals are the same
  // whatever the token budget (chunk sizes, batch mates, decode interleaving) and arrival pattern.
  RunStats reference;
  bool first = true;
  for (const char* budget : {"13", "64", "1000000"}) {
    for (const char* rate : {"0", "0.3"}) {
      const RunStats s = run({{"scope", "causal"},
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
      SCOPED_TRACE(std::string("budget ") + budget + " rate " + rate);
      EXPECT_EQ(s.tokens, reference.tokens);
      EXPECT_EQ(s.dropped, reference.dropped);
      EXPECT_EQ(s.expert_load, reference.expert_load);
    }
  }
  // Batch scope is not: the budget changes what is dropped.
  const RunStats a = run({{"token-budget", "13"}, {"capacity-factor", "1"}, {"requests", "10"}});
  const RunStats b = run({{"token-budget", "500"}, {"capacity-factor", "1"}, {"requests", "10"}});
  EXPECT_NE(a.dropped, b.dropped);
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
  // Causal and dropless scopes are invariant too.
  for (const char* scope : {"causal", "none"}) {
    const auto rs = probe({{"mode", "greedy"}, {"scope", scope}, {"trials", "10"}});
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].displaced_pairs, 0) << scope;
    EXPECT_EQ(rs[0].distinct_outcomes, 1) << scope;
  }
}

TEST(SimProbe, ArrivalPriorityUnderRequestScopeNeedsTheRequestsRowsInOrder) {
  // Request scope with arrival priority orders a request's own rows by arrival: invariant when each request's
  // rows stay together in position order (shuffle=requests), not when the probe's own rows are permuted.
  const Overrides base = {
      {"mode", "stable"}, {"priority", "arrival"}, {"capacity-factor", "1"}, {"trials", "15"}};
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

// sim/diverge: the deterministic preset (stable dispatch: prefix scope, invariant kernels) gives the probe
// exactly one completion - the one it gets alone, with bit-identical logits - over 30+ trials with varied
// traffic (Poisson and fixed-interval arrivals, shared system prompts, twins), prefill chunk sizes, token
// budgets, prefix caching, preemption and speculative decoding; so do causal scope and dropless dispatch.
// The same at temperature 0.7, each request sampling by its (seed, position). Request scope, whose budgets
// follow the forward pass, and sequence scope under a cache keyed by tokens alone are the counter-checks.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sim/diverge/diverge.h"

namespace moe::sim::diverge {
namespace {

DivergeOptions options() {
  DivergeOptions o;
  o.shape = model::ModelShape::tiny();
  o.trials = 32;
  o.probe_length = 20;
  o.gen_length = 24;
  o.engine.token_budget = 32;
  o.engine.chunk_size = 8;
  o.vary_chunks = {1, 3, 8, 16, 32};
  o.vary_budgets = {16, 32, 64};
  o.traffic.arrival_rate = 0.7;
  o.traffic.prompt_max = 40;
  o.traffic.decode_max = 24;
  o.traffic.probe_arrival_step = 5;
  o.traffic.horizon_steps = 100;
  o.traffic.system_min = 10;
  o.traffic.system_max = 40;
  o.tight_kv_blocks = 16;
  o.sweep_capacity_factors.clear();
  o.seed = 77;
  o.threads = 2;
  return o;
}

TEST(DivergeInvariance, StableAndCausalGiveOneCompletionWithTheSameBits) {
  for (const char* mode : {"stable", "causal"}) {
    for (double cf : {0.5, 1.0}) {
      for (int fixed_interval : {0, 2}) {
        DivergeOptions o = options();
        o.traffic.fixed_interval = fixed_interval;
        o.grid = {{mode, kernels::KernelKind::kInvariant, cf, true}};
        const DivergeReport rep = run_diverge(o);
        const ConfigResult& r = rep.grid[0];
        const std::string what =
            std::string(mode) + " cf " + std::to_string(cf) + " interval " + std::to_string(fixed_interval);
        EXPECT_EQ(r.distinct, 1) << what;
        EXPECT_EQ(r.diverged, 0) << what;
        EXPECT_EQ(r.bitwise_same, o.trials) << what;
        // The traffic really varied the probe's batches, its chunks and budgets, its cached prefix, its
        // preemptions and drafts, and the probe lost pairs.
        EXPECT_GT(r.rows, 32 * 44) << what;
        EXPECT_EQ(std::set<int>(r.token_budgets.begin(), r.token_budgets.end()).size(), 3u) << what;
        EXPECT_GT(r.trials_with_cache_hits(), 4) << what;
        EXPECT_GT(r.trials_preempted(), 0) << what;
        int accepted = 0;
        for (int a : r.probe_accepted) accepted += a;
        EXPECT_GT(accepted, 0) << what;
        if (cf == 0.5) {
          EXPECT_GT(r.probe_pairs_dropped, 0) << what;
        }
      }
    }
  }
}

// At temperature 0.7 (top_p 0.95) every request samples by its (seed, position): the deterministic preset
// still gives the probe one completion, its alone one, with the same logits bits, whatever the traffic,
// chunking, budget, cache, preemption and speculation (drafts verified against the sampled token); and the
// sampled completion is not the greedy one.
TEST(DivergeInvariance, StableSampledGivesOneCompletionWithTheSameBits) {
  for (int fixed_interval : {0, 2}) {
    DivergeOptions o = options();
    o.traffic.fixed_interval = fixed_interval;
    o.grid = {{"stable", kernels::KernelKind::kInvariant, 1.0, true, false, 0.7},
              {"stable", kernels::KernelKind::kInvariant, 1.0, false, false, 0.7},
              {"stable", kernels::KernelKind::kInvariant, 1.0, true}};
    const DivergeReport rep = run_diverge(o);
    for (size_t i = 0; i < 2; ++i) {
      const ConfigResult& r = rep.grid[i];
      const std::string what = r.spec.label() + " interval " + std::to_string(fixed_interval);
      EXPECT_EQ(r.distinct, 1) << what;
      EXPECT_EQ(r.diverged, 0) << what;
      EXPECT_EQ(r.bitwise_same, o.trials) << what;
    }
    const ConfigResult& varied = rep.grid[0];
    EXPECT_GT(varied.trials_with_cache_hits(), 4);
    EXPECT_GT(varied.trials_preempted(), 0);
    int accepted = 0;
    for (int a : varied.probe_accepted) accepted += a;
    EXPECT_GT(accepted, 0);
    EXPECT_NE(varied.alone, rep.grid[2].alone);  // sampled, not greedy
  }
}

// The counter-check: request scope sizes the probe's budget from its rows in each forward pass, so varying
// the chunk size and budget changes its logits.
TEST(DivergeInvariance, RequestScopeDependsOnTheServerConfiguration) {
  DivergeOptions o = options();
  o.grid = {{"request", kernels::KernelKind::kInvariant, 0.5, true}};
  const DivergeReport rep = run_diverge(o);
  EXPECT_LT(rep.grid[0].bitwise_same, o.trials);
}

// The bug prefix scope fixes: sequence scope sizes a prompt's budget from its whole length, so a cached
// prefix written by a request of another prompt length (a cache keyed by tokens alone, which shared system
// prompts and twins fill) is not the probe's routing.
TEST(DivergeInvariance, SequenceScopeUnderATokenKeyedCacheDiverges) {
  DivergeOptions o = options();
  o.grid = {{"sequence", kernels::KernelKind::kInvariant, 0.5, true, true}};
  const DivergeReport rep = run_diverge(o);
  EXPECT_GT(rep.grid[0].trials_with_cache_hits(), 4);
  EXPECT_LT(rep.grid[0].bitwise_same, o.trials);
}

TEST(DivergeInvariance, DroplessInvariantGivesOneCompletion) {
  DivergeOptions o = options();
  o.grid = {{"dropless", kernels::KernelKind::kInvariant, 1.0, true}};
  const DivergeReport rep = run_diverge(o);
  EXPECT_EQ(rep.grid[0].distinct, 1);
  EXPECT_EQ(rep.grid[0].diverged, 0);
}

// The trials of every configuration share one pool of threads: the report's bytes (its JSON, times aside) are
// the same on 1 and 3 threads, for a grid of two configurations and a sweep of two more.
TEST(DivergeInvariance, ThreadCountDoesNotChangeResults) {
  DivergeOptions o = options();
  o.trials = 6;
  o.grid = {{"greedy", kernels::KernelKind::kFast, 1.0, false},
            {"stable", kernels::KernelKind::kInvariant, 1.0, true}};
  o.sweep_modes = {"greedy"};
  o.sweep_capacity_factors = {0.75, 1.5};
  auto bytes = [](const DivergeReport& r) {
    std::string json = to_json(r), out;
    std::istringstream lines(json);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("\"seconds\"") == std::string::npos) out += line + "\n";
    }
    return out;
  };
  o.threads = 1;
  const DivergeReport a = run_diverge(o);
  o.threads = 3;
  const DivergeReport b = run_diverge(o);
  ASSERT_EQ(a.grid.size(), 2u);
  ASSERT_EQ(a.sweep.size(), 2u);
  EXPECT_EQ(a.grid[0].completions, b.grid[0].completions);
  EXPECT_EQ(a.grid[0].alone, b.grid[0].alone);
  EXPECT_EQ(bytes(a), bytes(b));
}

}  // namespace
}  // namespace moe::sim::diverge

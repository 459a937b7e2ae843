// sim/diverge: stable dispatch with causal capacity and invariant kernels gives the probe exactly one
// completion - the one it gets alone - over 30+ trials with varied traffic and prefill chunk sizes.
#include <gtest/gtest.h>

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
  o.scheduler.token_budget = 32;
  o.scheduler.chunk_size = 8;
  o.vary_chunks = {1, 3, 8, 16, 32};
  o.traffic.arrival_rate = 0.7;
  o.traffic.prompt_max = 40;
  o.traffic.decode_max = 24;
  o.traffic.probe_arrival_step = 5;
  o.traffic.horizon_steps = 100;
  o.sweep_capacity_factors.clear();
  o.seed = 77;
  o.threads = 2;
  return o;
}

TEST(DivergeInvariance, StableCausalInvariantGivesOneCompletion) {
  for (double cf : {0.5, 1.0}) {
    DivergeOptions o = options();
    o.grid = {{"causal", kernels::KernelKind::kInvariant, cf, true}};
    const DivergeReport rep = run_diverge(o);
    const ConfigResult& r = rep.grid[0];
    EXPECT_EQ(r.distinct, 1) << "cf " << cf;
    EXPECT_EQ(r.diverged, 0) << "cf " << cf;
    // The traffic really varied the probe's batches, and the probe did lose pairs (to its own budget).
    EXPECT_GT(r.rows, 32 * 44);
    if (cf == 0.5) {
      EXPECT_GT(r.probe_pairs_dropped, 0);
    }
  }
}

TEST(DivergeInvariance, DroplessInvariantGivesOneCompletion) {
  DivergeOptions o = options();
  o.grid = {{"dropless", kernels::KernelKind::kInvariant, 1.0, true}};
  const DivergeReport rep = run_diverge(o);
  EXPECT_EQ(rep.grid[0].distinct, 1);
  EXPECT_EQ(rep.grid[0].diverged, 0);
}

TEST(DivergeInvariance, ThreadCountDoesNotChangeResults) {
  DivergeOptions o = options();
  o.trials = 6;
  o.grid = {{"greedy", kernels::KernelKind::kFast, 1.0, false}};
  o.threads = 1;
  const DivergeReport a = run_diverge(o);
  o.threads = 3;
  const DivergeReport b = run_diverge(o);
  EXPECT_EQ(a.grid[0].completions, b.grid[0].completions);
  EXPECT_EQ(a.grid[0].alone, b.grid[0].alone);
}

}  // namespace
}  // namespace moe::sim::diverge

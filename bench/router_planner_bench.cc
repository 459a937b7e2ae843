// Planning throughput: greedy, stable (prefix scope), sequence and causal dispatch over batch size, expert
// count and top-k. Counter pairs_per_second is the headline (issue target: >= 30 M pairs/s on one core;
// stable within 1.3x of greedy at T >= 4096). Batches are request-contiguous as a serving engine forms them;
// the *_shuffled variants put rows in random order, which makes stable planning sort.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "router/dispatch_planner.h"
#include "router/topk_router.h"

namespace moe {
namespace {

struct Workload {
  TokenRoutes routes;
  std::vector<TokenMeta> meta;
};

// T tokens in requests of 256 tokens (or fewer), logits with a Zipf-like expert popularity.
Workload MakeWorkload(int T, int E, int k, bool shuffled) {
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> logits(static_cast<size_t>(T) * E);
  for (int t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) logits[static_cast<size_t>(t) * E + e] = noise(rng) - 0.5f * std::log1p(e);
  }
  RouterConfig config = RouterConfig::preset("mixtral");
  config.num_experts = E;
  config.top_k = k;
  TopKRouter router(config);
  Workload w;
  router.route(logits.data(), T, w.routes);
  for (int t = 0; t < T; ++t)
    w.meta.push_back({static_cast<uint64_t>(t / 256), static_cast<uint32_t>(t % 256)});
  if (shuffled) std::shuffle(w.meta.begin(), w.meta.end(), rng);
  return w;
}

// The workload of a shape, generated once and shared by every mode planned on it: generating and routing
// T x E logits costs far more than planning them, which matters under callgrind
// (bench/planner_instructions.sh).
const Workload& CachedWorkload(int T, int E, int k, bool shuffled) {
  static std::map<std::tuple<int, int, int, bool>, std::unique_ptr<Workload>> cache;
  std::unique_ptr<Workload>& w = cache[{T, E, k, shuffled}];
  if (!w) w = std::make_unique<Workload>(MakeWorkload(T, E, k, shuffled));
  return *w;
}

DispatchPolicy PolicyFor(const std::string& mode) {
  if (mode == "causal" || mode == "sequence") {  // the stable mode's claiming under another scope
    DispatchPolicy p = DispatchPolicy::mode("stable");
    p.scope = mode == "causal" ? CapacityScope::kCausal : CapacityScope::kSequence;
    return p;
  }
  return DispatchPolicy::mode(mode);
}

void BM_Plan(benchmark::State& state, std::string mode, bool shuffled) {
  const int T = static_cast<int>(state.range(0));
  const int E = static_cast<int>(state.range(1));
  const int k = static_cast<int>(state.range(2));
  const Workload& w = CachedWorkload(T, E, k, shuffled);
  DispatchPlanner planner(E, k, PolicyFor(mode));
  planner.reserve(T);
  DispatchPlan plan;
  plan.reserve(T, k, E);
  for (auto _ : state) {
    planner.plan(w.routes, w.meta, nullptr, plan);
    benchmark::DoNotOptimize(plan.pair_expert.data());
  }
  const double pairs = static_cast<double>(T) * k;
  state.counters["pairs_per_second"] =
      benchmark::Counter(pairs, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["drop_rate"] = static_cast<double>(plan.num_dropped) / pairs;
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int T : {1, 64, 4096, 65536}) {
    for (int E : {8, 64, 256}) {
      for (int k : {1, 2, 8}) b->Args({T, E, k});
    }
  }
  b->ArgNames({"T", "E", "k"});
}

BENCHMARK_CAPTURE(BM_Plan, greedy, std::string("greedy"), false)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_Plan, stable, std::string("stable"), false)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_Plan, causal, std::string("causal"), false)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_Plan, sequence, std::string("sequence"), false)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_Plan, stable_shuffled, std::string("stable"), true)
    ->Args({4096, 64, 2})
    ->Args({65536, 64, 2});
BENCHMARK_CAPTURE(BM_Plan, greedy_shuffled, std::string("greedy"), true)
    ->Args({4096, 64, 2})
    ->Args({65536, 64, 2});

}  // namespace
}  // namespace moe

BENCHMARK_MAIN();

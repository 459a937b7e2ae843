// MoE layer forward: presets greedy (greedy dispatch + Eigen kernels) and deterministic (stable dispatch +
// invariant kernels) at a Mixtral-like shape (d=1024, ff=2816, E=8, k=2) and a DeepSeek-like one (d=1024,
// ff=512, E=64, k=6, 2 shared experts), T in {1, 16, 256, 2048}, 1 and 2 threads; fp32 weights and compute,
// and (names *_bf16_*) bf16 weights with bf16 compute (MoELayerConfig::compute: the invariant vdpbf16ps
// kernel under deterministic, oneDNN's bf16 matmul under greedy); and Qwen3-30B-A3B's layer at full size
// (d=2048, ff=768, E=128, k=8) in bf16 only.
//
// Counters: GFLOPs = useful FLOP/s of the pairs actually computed (gate + 3 GEMMs per kept pair + shared);
// weight_GBps = bytes of the weights the step touches (active experts, shared expert, gate) per second.
// scripts/layer-report.py turns them into ratios against greedy, the FMA peak (170 GFLOP/s per thread) and
// memory bandwidth (13 GB/s per thread) measured on this machine class (docs/results.md). Batches are
// requests of up to 128 tokens, rows in request order. Iterations cycle through kInputs different batches, so
// that a small batch does not find its experts' weights in cache from the previous iteration (the same token
// again would route to the same experts and time the cache, not memory); the counters average over the
// batches.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "bench/layer_shapes.h"
#include "moe/layer/moe_layer.h"

namespace moe {
namespace {

using Shape = bench::LayerBenchShape;
using bench::DeepSeekLike;
using bench::MixtralLike;

std::shared_ptr<const io::LayerWeights> WeightsFor(const Shape& shape, kernels::DType storage) {
  // Cached: random init of ~300 MB is slower than the benchmarks themselves.
  static std::shared_ptr<const io::LayerWeights> slots[3][2];
  const int which = shape.layer.num_experts == 8 ? 0 : (shape.layer.num_experts == 64 ? 1 : 2);
  auto& slot = slots[which][storage == kernels::DType::kBF16 ? 1 : 0];
  if (!slot) slot = std::make_shared<const io::LayerWeights>(io::random_layer(shape.layer, storage, 7));
  return slot;
}

// compute kBF16: bf16 weights (as checkpoints ship them) and bf16 compute; kF32: fp32 weights and compute.
void BM_Layer(benchmark::State& state, Shape shape, std::string preset, kernels::ComputePrecision compute) {
  const int T = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const bool bf16 = compute == kernels::ComputePrecision::kBF16;
  auto weights = WeightsFor(shape, bf16 ? kernels::DType::kBF16 : kernels::DType::kF32);
  MoELayerConfig config = MoELayerConfig::preset(preset, io::Architecture::kMixtral);
  config.router.num_experts = shape.layer.num_experts;
  config.router.top_k = shape.top_k;
  config.compute = compute;
  config.num_threads = threads;
  config.max_tokens = T;
  MoELayer layer(config, weights);

  const int64_t d = shape.layer.hidden;
  constexpr int kInputs = 8;
  std::vector<std::vector<float>> xs(kInputs, std::vector<float>(static_cast<size_t>(T) * d));
  std::vector<float> y(static_cast<size_t>(T) * d);
  uint64_t h = 12345;
  for (auto& x : xs) {
    for (float& v : x) {
      h = h * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<float>(static_cast<int64_t>(h >> 40) - (1ll << 23)) / static_cast<float>(1 << 23);
    }
  }
  std::vector<TokenMeta> meta;
  for (int t = 0; t < T; ++t)
    meta.push_back({static_cast<uint64_t>(t / 128), static_cast<uint32_t>(t % 128)});

  // Warm-up, and the work of each batch for the counters.
  double flops = 0, bytes = 0, drop_rate = 0;
  const double sff = static_cast<double>(shape.layer.shared_ff);
  for (const auto& x : xs) {
    layer.forward(x.data(), T, meta, y.data());
    const DispatchPlan& plan = layer.last_plan();
    const double pairs = static_cast<double>(plan.num_kept + plan.num_rerouted);
    flops += 2.0 * T * d * shape.layer.num_experts + pairs * 6.0 * d * shape.layer.expert_ff +
             (shape.layer.num_shared_experts ? 6.0 * T * d * sff : 0.0);
    int active = 0;
    for (int32_t load : plan.expert_load) active += load > 0;
    // The fp32 gate, and the experts' weights in their storage type (2 bytes for bf16).
    bytes += 4.0 * d * shape.layer.num_experts +
             (bf16 ? 2.0 : 4.0) * (active * 3.0 * d * shape.layer.expert_ff +
                                   (shape.layer.num_shared_experts ? 3.0 * d * sff : 0.0));
    drop_rate += plan.num_dropped / static_cast<double>(plan.num_pairs());
  }
  size_t next = 0;
  for (auto _ : state) {
    layer.forward(xs[next].data(), T, meta, y.data());
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % kInputs;
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(flops / kInputs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_GBps"] =
      benchmark::Counter(bytes / kInputs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["drop_rate"] = drop_rate / kInputs;
  state.SetLabel(std::string(shape.name) + (bf16 ? " bf16" : "") + " " + preset);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int T : {1, 16, 256, 2048}) {
    for (int threads : {1, 2}) b->Args({T, threads});
  }
  b->ArgNames({"T", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

constexpr auto kF32 = kernels::ComputePrecision::kF32;
constexpr auto kBF16 = kernels::ComputePrecision::kBF16;
BENCHMARK_CAPTURE(BM_Layer, mixtral_like_greedy, MixtralLike(), std::string("greedy"), kF32)->Apply(Args);
BENCHMARK_CAPTURE(BM_Layer, mixtral_like_deterministic, MixtralLike(), std::string("deterministic"), kF32)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_Layer, deepseek_like_greedy, DeepSeekLike(), std::string("greedy"), kF32)->Apply(Args);
BENCHMARK_CAPTURE(BM_Layer, deepseek_like_deterministic, DeepSeekLike(), std::string("deterministic"), kF32)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_Layer, mixtral_like_bf16_greedy, MixtralLike(), std::string("greedy"), kBF16)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_Layer, mixtral_like_bf16_deterministic, MixtralLike(), std::string("deterministic"),
                  kBF16)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_Layer, deepseek_like_bf16_greedy, DeepSeekLike(), std::string("greedy"), kBF16)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_Layer, deepseek_like_bf16_deterministic, DeepSeekLike(), std::string("deterministic"),
                  kBF16)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_Layer, qwen3_30b_a3b_bf16_greedy, bench::Qwen3_30bA3b(), std::string("greedy"), kBF16)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_Layer, qwen3_30b_a3b_bf16_deterministic, bench::Qwen3_30bA3b(),
                  std::string("deterministic"), kBF16)
    ->Apply(Args);

}  // namespace
}  // namespace moe

BENCHMARK_MAIN();

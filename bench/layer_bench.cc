// MoE layer forward: presets greedy (greedy dispatch + Eigen kernels) and deterministic (stable dispatch +
// invariant kernels) at a Mixtral-like shape (d=1024, ff=2816, E=8, k=2) and a DeepSeek-like one (d=1024,
// ff=512, E=64, k=6, 2 shared experts), T in {1, 16, 256, 2048}, 1 and 2 threads; fp32 weights and compute,
// and (names *_bf16_*) bf16 weights with bf16 compute (MoELayerConfig::compute: the invariant vdpbf16ps
// kernel under deterministic, oneDNN's bf16 matmul under greedy); and Qwen3-30B-A3B's layer at full size
// (d=2048, ff=768, E=128, k=8) in bf16, and in fp32 under deterministic (2.4 GB of weights: the f32 row of
// bench/ggml_peer.sh's comparison with ggml at that shape). Quantized storage (names *_<type>_deterministic,
// type q8_0, q4_k, q6_k, mxfp4, fp8): the weights held as stored (io::random_layer quantizes the same seeded
// values; FP8 in 128 x 128 blocks) and run by the quantized kernels (kernels/cpu/linear_quant.h) under the
// deterministic preset, for all three shapes.
// Dropless rows (names *_dropless: f32, bf16 and every quantized type, all three shapes): the deterministic
// preset's invariant kernels with capacity scope none, so that every pair is computed - what llama.cpp's
// graph computes; bench/ggml_peer.sh compares ggml with these.
//
// Counters: GFLOPs = useful FLOP/s of the pairs actually computed (gate + 3 GEMMs per kept pair + shared);
// weight_GBps = bytes of the weights the step touches (active experts, shared expert, gate) per second, in
// their storage type (a quantized expert's stored bytes: blocks and scales).
// scripts/layer-report.py turns them into ratios against greedy, the FMA peak (170 GFLOP/s per thread) and
// memory bandwidth (13 GB/s per thread) measured on this machine class (docs/results.md). Batches are
// requests of up to 128 tokens, rows in request order. Iterations cycle through kInputs different batches, so
// that a small batch does not find its experts' weights in cache from the previous iteration (the same token
// again would route to the same experts and time the cache, not memory); the counters average over the
// batches.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "bench/layer_shapes.h"
#include "bench/stream_read.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/weight_buffer.h"
#include "moe/layer/moe_layer.h"

namespace moe {
namespace {

using Shape = bench::LayerBenchShape;
using bench::DeepSeekLike;
using bench::MixtralLike;

std::shared_ptr<const io::LayerWeights> WeightsFor(const Shape& shape, kernels::DType storage) {
  // Cached: random init of ~300 MB is slower than the benchmarks themselves.
  static std::map<std::pair<int64_t, kernels::DType>, std::shared_ptr<const io::LayerWeights>> cache;
  auto& slot = cache[{shape.layer.num_experts, storage}];
  if (!slot) slot = std::make_shared<const io::LayerWeights>(io::random_layer(shape.layer, storage, 7));
  return slot;
}

// The streaming read of kStreamBytes (bench/stream_read.h: peak_bench's stream), in seconds; 0 on a CPU
// without AVX-512. The buffer is a WeightBuffer, the memory the layer's weights live in (2 MB pages where the
// system has them), so that stream_ratio compares like with like.
constexpr size_t kStreamBytes = size_t{256} << 20;

double StreamSeconds() {
  if (!kernels::cpu_has_avx512f()) return 0;
  static const kernels::WeightBuffer buffer = [] {
    kernels::WeightBuffer b(kStreamBytes);
    auto* p = reinterpret_cast<float*>(b.data());
    std::fill(p, p + kStreamBytes / sizeof(float), 1.0f);
    return b;
  }();
  const auto t0 = std::chrono::steady_clock::now();
  benchmark::DoNotOptimize(
      bench::stream_sum(reinterpret_cast<const float*>(buffer.data()), kStreamBytes / sizeof(float)));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// compute kBF16: bf16 weights (as checkpoints ship them) and bf16 compute; kF32: fp32 weights and compute;
// `quantized`: weights of that type held as stored (the compute setting does not apply to them).
// `dropless`: the preset's kernels with capacity scope none (every pair kept).
void BM_Layer(benchmark::State& state, Shape shape, std::string preset, kernels::ComputePrecision compute,
              std::optional<kernels::DType> quantized = std::nullopt, bool dropless = false) {
  const int T = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const bool bf16 = compute == kernels::ComputePrecision::kBF16;
  const kernels::DType storage = quantized ? *quantized : bf16 ? kernels::DType::kBF16 : kernels::DType::kF32;
  auto weights = WeightsFor(shape, storage);
  // Bytes of one routed expert's three matrices and of the shared expert, in the storage type.
  const double expert_bytes = static_cast<double>(weights->expert_matrix_bytes()) / shape.layer.num_experts;
  const double elem =
      quantized ? expert_bytes / (3.0 * shape.layer.hidden * shape.layer.expert_ff) : (bf16 ? 2.0 : 4.0);
  MoELayerConfig config = MoELayerConfig::preset(preset, io::Architecture::kMixtral);
  config.router.num_experts = shape.layer.num_experts;
  config.router.top_k = shape.top_k;
  config.compute = compute;
  config.num_threads = threads;
  config.max_tokens = T;
  if (dropless) config.policy.scope = CapacityScope::kNone;
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
    bytes +=
        4.0 * d * shape.layer.num_experts + elem * (active * 3.0 * d * shape.layer.expert_ff +
                                                    (shape.layer.num_shared_experts ? 3.0 * d * sff : 0.0));
    drop_rate += plan.num_dropped / static_cast<double>(plan.num_pairs());
  }
  size_t next = 0;
  // At T <= 16 (memory-bound), the streaming read bandwidth is measured in the same run, between
  // iterations (untimed), so that the ratio stream_ratio = weight_GBps / stream_GBps compares the two at the
  // same moment: this VM's bandwidth drifts with its neighbours' load by tens of percent over a minute. The
  // read evicts the caches (the experts' lines and page-table entries) that the next calls then refill, as
  // a decode step's other layers would; LAYER_BENCH_STREAM=0 leaves it out, so that a peer's harness that
  // reads no stream between its calls (bench/ggml_peer.sh) is compared with calls timed the same way.
  static const bool stream_enabled = [] {
    const char* v = std::getenv("LAYER_BENCH_STREAM");
    return v == nullptr || std::string(v) != "0";
  }();
  const bool measure_stream = T <= 16 && stream_enabled;
  double stream_seconds = 0, stream_bytes = 0, forward_seconds = 0;
  int64_t iteration = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    layer.forward(xs[next].data(), T, meta, y.data());
    forward_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % kInputs;
    if (measure_stream && ++iteration % 8 == 0) {
      state.PauseTiming();
      stream_seconds += StreamSeconds();
      stream_bytes += static_cast<double>(kStreamBytes);
      state.ResumeTiming();
    }
  }
  if (stream_seconds > 0 && forward_seconds > 0) {
    const double stream_gbps = stream_bytes / stream_seconds / 1e9;
    const double layer_gbps =
        bytes / kInputs * static_cast<double>(state.iterations()) / forward_seconds / 1e9;
    state.counters["stream_GBps"] = stream_gbps;
    state.counters["stream_ratio"] = layer_gbps / stream_gbps;
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(flops / kInputs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_GBps"] =
      benchmark::Counter(bytes / kInputs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["drop_rate"] = drop_rate / kInputs;
  state.counters["weight_MB"] = bytes / kInputs / 1e6;  // per call
  state.SetLabel(
      std::string(shape.name) + " " +
      (quantized ? std::string(kernels::to_string(*quantized)) : std::string(bf16 ? "bf16" : "f32")) + " " +
      preset);
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
BENCHMARK_CAPTURE(BM_Layer, qwen3_30b_a3b_deterministic, bench::Qwen3_30bA3b(), std::string("deterministic"),
                  kF32)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_Layer, qwen3_30b_a3b_bf16_greedy, bench::Qwen3_30bA3b(), std::string("greedy"), kBF16)
    ->Apply(Args);
BENCHMARK_CAPTURE(BM_Layer, qwen3_30b_a3b_bf16_deterministic, bench::Qwen3_30bA3b(),
                  std::string("deterministic"), kBF16)
    ->Apply(Args);

// Quantized storage: every format on every shape, deterministic preset (capacity binds); and the dropless
// rows of every storage type.
int RegisterQuantized() {
  const std::optional<kernels::DType> kQuantized[] = {kernels::DType::kQ8_0, kernels::DType::kQ4_K,
                                                      kernels::DType::kQ6_K, kernels::DType::kMXFP4,
                                                      kernels::DType::kFP8};
  for (const Shape& shape : {MixtralLike(), DeepSeekLike(), bench::Qwen3_30bA3b()}) {
    for (const std::optional<kernels::DType>& t : kQuantized) {
      const std::string name = "BM_Layer/" + std::string(shape.name) + "_" +
                               std::string(kernels::to_string(*t)) + "_deterministic";
      benchmark::RegisterBenchmark(name.c_str(), BM_Layer, shape, std::string("deterministic"), kF32, t,
                                   false)
          ->Apply(Args);
    }
  }
  for (const Shape& shape : {MixtralLike(), DeepSeekLike(), bench::Qwen3_30bA3b()}) {
    // f32, bf16 (bf16 compute), then the quantized types.
    const std::string base = "BM_Layer/" + std::string(shape.name);
    benchmark::RegisterBenchmark((base + "_dropless").c_str(), BM_Layer, shape, std::string("deterministic"),
                                 kF32, std::nullopt, true)
        ->Apply(Args);
    benchmark::RegisterBenchmark((base + "_bf16_dropless").c_str(), BM_Layer, shape,
                                 std::string("deterministic"), kBF16, std::nullopt, true)
        ->Apply(Args);
    for (const std::optional<kernels::DType>& t : kQuantized) {
      benchmark::RegisterBenchmark((base + "_" + std::string(kernels::to_string(*t)) + "_dropless").c_str(),
                                   BM_Layer, shape, std::string("deterministic"), kF32, t, true)
          ->Apply(Args);
    }
  }
  return 0;
}
const int kQuantizedRegistered = RegisterQuantized();

}  // namespace
}  // namespace moe

BENCHMARK_MAIN();

// GPU benchmarks: the expert FFN (invariant kernel against cuBLAS) at real model shapes, dispatch
// planning (stable against greedy) at T = 16384, E = 256, k = 8, and the whole CudaMoELayer forward
// (deterministic against greedy preset) at the CPU layer benchmark's shapes. Times are CUDA-event times of
// the device work (manual time); counters give TFLOP/s and GB/s of the expert FFN.
//
//   Mixtral-8x7B:  hidden 4096, ffn 14336, E 8,   k 2
//   DeepSeek-V3:   hidden 7168, ffn 2048,  E 256, k 8  (routed experts only)
// Weights are bf16 (uniform random, generated on the device); activations fp32.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/cuda/check.h"
#include "base/cuda/device.h"
#include "base/cuda/device_buffer.h"
#include "bench/layer_shapes.h"
#include "kernels/cuda/expert_ffn.h"
#include "moe/cuda/cuda_moe_layer.h"
#include "router/cuda/plan_dispatch.h"
#include "router/dispatch_planner.h"

namespace moe::cuda {
namespace {

struct ModelShape {
  const char* name;
  int hidden, ffn, E, k;
};
constexpr ModelShape kMixtral{"mixtral", 4096, 14336, 8, 2};
constexpr ModelShape kDeepSeek{"deepseek_v3", 7168, 2048, 256, 8};

cudaStream_t Stream() {
  static cudaStream_t stream = [] {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }();
  return stream;
}

// Weights of one model, kept across benchmarks of that model (generated on the device once).
struct ModelWeights {
  DeviceBuffer<std::byte> w1, w3, w2;
  ExpertWeightsView view;
};
ModelWeights& Weights(const ModelShape& m) {
  static std::map<std::string, std::unique_ptr<ModelWeights>> cache;
  auto& slot = cache[m.name];
  if (!slot) {
    cache.clear();  // one model at a time keeps device memory low
    auto w = std::make_unique<ModelWeights>();
    const size_t n = static_cast<size_t>(m.E) * m.ffn * m.hidden;
    w->w1 = DeviceBuffer<std::byte>(n * 2);
    w->w3 = DeviceBuffer<std::byte>(n * 2);
    w->w2 = DeviceBuffer<std::byte>(n * 2);
    fill_uniform(kernels::DType::kBF16, w->w1.data(), n, 1, 0.02f, Stream());
    fill_uniform(kernels::DType::kBF16, w->w3.data(), n, 2, 0.02f, Stream());
    fill_uniform(kernels::DType::kBF16, w->w2.data(), n, 3, 0.02f, Stream());
    CUDA_CHECK(cudaStreamSynchronize(Stream()));
    w->view = ExpertWeightsView{kernels::DType::kBF16, m.E,          m.hidden,    m.ffn,
                                w->w1.data(),          w->w3.data(), w->w2.data()};
    cache[m.name] = std::move(w);
    return *cache[m.name];
  }
  return *slot;
}

// Expert row offsets of a dropless plan for T tokens with uniform random routes (every pair placed).
std::vector<int32_t> Offsets(const ModelShape& m, int T) {
  std::mt19937_64 rng(T);
  std::vector<int32_t> load(m.E, 0);
  std::vector<int> ids(m.E);
  for (int t = 0; t < T; ++t) {
    for (int e = 0; e < m.E; ++e) ids[e] = e;
    for (int j = 0; j < m.k; ++j) {
      std::swap(ids[j], ids[j + rng() % (m.E - j)]);
      ++load[ids[j]];
    }
  }
  std::vector<int32_t> offsets(m.E + 1, 0);
  for (int e = 0; e < m.E; ++e) offsets[e + 1] = offsets[e] + load[e];
  return offsets;
}

enum class FfnKind { kInvariant, kCublas };

void BM_ExpertFfn(benchmark::State& state, ModelShape m, FfnKind kind) {
  const int T = static_cast<int>(state.range(0));
  ModelWeights& w = Weights(m);
  const std::vector<int32_t> offsets = Offsets(m, T);
  const int rows = T * m.k;
  DeviceBuffer<int32_t> d_offsets(m.E + 1);
  d_offsets.upload(offsets);
  DeviceBuffer<float> x(static_cast<size_t>(rows) * m.hidden), y(static_cast<size_t>(rows) * m.hidden);
  fill_uniform(kernels::DType::kF32, x.data(), x.size(), 7, 1.0f, Stream());
  DeviceBuffer<std::byte> ws(
      kind == FfnKind::kInvariant ? expert_ffn_invariant_workspace_bytes(m.E, rows, m.ffn) : 0);
  std::unique_ptr<CublasExpertFfn> fast;
  if (kind == FfnKind::kCublas) fast = std::make_unique<CublasExpertFfn>(w.view, rows);
  auto run = [&] {
    if (kind == FfnKind::kInvariant) {
      expert_ffn_invariant(w.view, x.data(), d_offsets.data(), rows, y.data(), ws.data(), ws.size(),
                           Stream());
    } else {
      fast->forward(x.data(), d_offsets.data(), y.data(), Stream());
    }
  };
  run();  // warm-up (cuBLAS heuristics, caches)
  CUDA_CHECK(cudaStreamSynchronize(Stream()));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  double total_s = 0;
  for (auto _ : state) {
    CUDA_CHECK(cudaEventRecord(start, Stream()));
    run();
    CUDA_CHECK(cudaEventRecord(stop, Stream()));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms * 1e-3);
    total_s += ms * 1e-3;
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  int active = 0;
  for (int e = 0; e < m.E; ++e) active += offsets[e + 1] > offsets[e];
  const double per_iter = total_s / static_cast<double>(state.iterations());
  const double flops = 2.0 * rows * m.hidden * m.ffn * 3.0;
  const double bytes =
      static_cast<double>(active) * 3.0 * m.hidden * m.ffn * 2.0 +  // weights of used experts
      2.0 * rows * m.hidden * 4.0;                                  // x in, y out
  state.counters["TFLOP/s"] = flops / per_iter * 1e-12;
  state.counters["GB/s"] = bytes / per_iter * 1e-9;
  state.counters["rows"] = rows;
  state.counters["experts_used"] = active;
}

// Planning time on the device for T = 16384, E = 256, k = 8 (target: <= 50 us).
void BM_Plan(benchmark::State& state, const char* mode) {
  const int T = static_cast<int>(state.range(0)), E = 256, k = 8;
  const DispatchPolicy policy = DispatchPolicy::mode(mode);
  PlanShape shape{T, E, k, k, policy};
  std::mt19937_64 rng(5);
  std::vector<int32_t> experts(static_cast<size_t>(T) * k);
  std::vector<float> weights(experts.size(), 0.125f), top1(T, 0.5f);
  std::vector<int> ids(E);
  for (int t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) ids[e] = e;
    for (int j = 0; j < k; ++j) {
      // Skewed: low ids are popular, so capacities bind.
      const int pick = j + static_cast<int>((rng() % (E - j)) * (rng() % 4 == 0 ? 1 : 0.25));
      std::swap(ids[j], ids[pick]);
      experts[static_cast<size_t>(t) * k + j] = ids[j];
    }
  }
  std::vector<TokenMeta> meta(T);
  for (int t = 0; t < T; ++t)
    meta[t] = TokenMeta{static_cast<uint64_t>(t % 64), static_cast<uint32_t>(t / 64)};
  DeviceBuffer<int32_t> d_experts(experts.size()), pair_expert(experts.size()), pair_slot(experts.size()),
      load(E), offsets(E + 1), slot_pairs(experts.size());
  DeviceBuffer<float> d_weights(weights.size()), d_top1(T), pair_weight(experts.size());
  DeviceBuffer<TokenMeta> d_meta(T);
  DeviceBuffer<PairStatus> status(experts.size());
  DeviceBuffer<int64_t> capacity(E), counts(4);
  DeviceBuffer<PlanError> error(1);
  d_experts.upload(experts);
  d_weights.upload(weights);
  d_top1.upload(top1);
  d_meta.upload(meta);
  PlanInputs in;
  in.num_tokens = T;
  in.route_experts = d_experts.data();
  in.route_weights = d_weights.data();
  in.top1_score = d_top1.data();
  in.meta = d_meta.data();
  PlanOutputs out{pair_expert.data(), pair_slot.data(), pair_weight.data(), status.data(), load.data(),
                  capacity.data(),    offsets.data(),   slot_pairs.data(),  counts.data(), error.data()};
  DeviceBuffer<std::byte> ws(plan_workspace_bytes(shape));
  plan_dispatch(shape, in, out, ws.data(), ws.size(), Stream());
  CUDA_CHECK(cudaStreamSynchronize(Stream()));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (auto _ : state) {
    CUDA_CHECK(cudaEventRecord(start, Stream()));
    plan_dispatch(shape, in, out, ws.data(), ws.size(), Stream());
    CUDA_CHECK(cudaEventRecord(stop, Stream()));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms * 1e-3);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  int64_t host_counts[4];
  counts.download(host_counts, 4);
  state.counters["kept"] = static_cast<double>(host_counts[0]);
  state.counters["dropped"] = static_cast<double>(host_counts[2]);
}

// The layer shapes of the CPU benchmark (bench/layer_shapes.h), bf16 weights.
using LayerCase = bench::LayerBenchShape;

// CudaMoELayer::forward_device on device arrays (gate, route, plan, gather, experts, shared, combine);
// requests of up to 128 tokens in request order, cf 1.25.
void BM_Layer(benchmark::State& state, LayerCase c, const char* preset) {
  const int T = static_cast<int>(state.range(0));
  static std::map<std::string, std::shared_ptr<const io::LayerWeights>> cache;
  auto& weights = cache[c.name];
  if (!weights) {
    weights = std::make_shared<const io::LayerWeights>(io::random_layer(c.layer, kernels::DType::kBF16, 11));
  }
  MoELayerConfig config = MoELayerConfig::preset(preset, io::Architecture::kMixtral);
  config.router.num_experts = c.layer.num_experts;
  config.router.top_k = c.top_k;
  config.policy.capacity_factor = 1.25;
  config.max_tokens = T;
  CudaMoELayer layer(config, weights);
  std::vector<TokenMeta> meta(T);
  for (int t = 0; t < T; ++t)
    meta[t] = TokenMeta{static_cast<uint64_t>(t / 128), static_cast<uint32_t>(t % 128)};
  DeviceBuffer<float> x(static_cast<size_t>(T) * c.layer.hidden), y(x.size());
  DeviceBuffer<TokenMeta> d_meta(T);
  d_meta.upload(meta);
  fill_uniform(kernels::DType::kF32, x.data(), x.size(), 9, 1.0f, Stream());
  layer.forward_device(x.data(), T, d_meta.data(), y.data(), Stream());  // warm-up
  layer.check_device_errors(Stream());
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (auto _ : state) {
    CUDA_CHECK(cudaEventRecord(start, Stream()));
    layer.forward_device(x.data(), T, d_meta.data(), y.data(), Stream());
    CUDA_CHECK(cudaEventRecord(stop, Stream()));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms * 1e-3);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  layer.check_device_errors(Stream());
}

void Register() {
  for (const ModelShape& m : {kMixtral, kDeepSeek}) {
    for (FfnKind kind : {FfnKind::kInvariant, FfnKind::kCublas}) {
      const std::string name =
          std::string("ExpertFfn/") + m.name + (kind == FfnKind::kInvariant ? "/invariant" : "/cublas");
      for (int T : {1, 64, 1024, 16384}) {
        auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_ExpertFfn, m, kind);
        b->Arg(T)->UseManualTime()->Unit(benchmark::kMillisecond);
        if (T >= 16384) b->Iterations(3);  // about a second each for the invariant kernel
      }
    }
  }
  for (const char* mode : {"greedy", "stable"}) {
    benchmark::RegisterBenchmark((std::string("Plan/") + mode).c_str(), BM_Plan, mode)
        ->Arg(16384)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  for (const LayerCase& c : {bench::MixtralLike(), bench::DeepSeekLike()}) {
    for (const char* preset : {"greedy", "deterministic"}) {
      for (int T : {1, 16, 256, 2048}) {
        const std::string name = std::string("Layer/") + c.name + "/" + preset + "/" + std::to_string(T);
        benchmark::RegisterBenchmark(name.c_str(), BM_Layer, c, preset)
            ->UseManualTime()
            ->MinTime(0.2)
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

}  // namespace
}  // namespace moe::cuda

int main(int argc, char** argv) {
  std::string why;
  if (!moe::cuda::device_available(&why)) {
    std::fprintf(stderr, "cuda_moe_bench: no usable CUDA device (%s); nothing to measure\n", why.c_str());
    return 0;
  }
  moe::cuda::Register();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

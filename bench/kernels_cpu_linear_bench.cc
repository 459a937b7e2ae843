// Linear and expert-FFN throughput on the CPU, fast (Eigen) vs invariant (own AVX-512 kernel).
//
// Shapes: a Mixtral-like expert scaled to d = 1024, ff = 2816; the linear is the gate projection
// [ff, d]. Rows 1 (decode, memory-bound), 16, 256, 2048 (prefill, compute-bound); fp32 and bf16
// weights; 1 and 2 threads. Counters: GFLOP/s (2 * rows * in * out per linear) and GB/s of weight bytes
// streamed (each weight read once per call; weights rotate over 4 experts so that they come from DRAM). Names
// read linear/<kind>/<dtype>/rows:R/threads:T.
//
// bf16 compute (activations rounded to bf16, bf16 weights, fp32 accumulation):
// linear_bf16c/<impl>/<in>x<out>/... (the gate projection 1024x2816 and the down projection 2816x1024) and
// ffn_bf16c/<impl>/... with impl = invariant (own vdpbf16ps kernel on packed weights, linear_bf16.h), onednn
// (oneDNN's bf16 matmul, linear_onednn.h; when built) and, for the linear on one thread, eigen (Eigen's own
// bfloat16 GEMM, which also accumulates in bf16: timed for comparison, not a candidate). Each call includes
// rounding x to bf16. Weight bytes are the packed bf16 weights (2 bytes each).
//
// Quantized weights (kernels/cpu/linear_quant.h, expert_ffn_quant.h): linear_quant/<type>/<in>x<out>/... and
// ffn_quant/<type>/... for q8_0, q4_k, q6_k, mxfp4 and fp8 (128 x 128 blocks), the same values quantized
// (kernels::quantize_row, quantize_fp8); each call includes quantizing x by the type's activation rule.
// Weight bytes are what the kernel streams (QuantLinear::weight_bytes).
//
// Run: build/bin/kernels_cpu_linear_bench --benchmark_filter=linear/invariant
// On a loaded machine: --benchmark_repetitions=5 --benchmark_report_aggregates_only=true and read the
// _max rows of cpuGFLOP/s (per busy core) rather than the wall-clock rates.
// clang-format off
#include "kernels/cpu/simd.h"  // before Eigen: see the note in simd.h
// clang-format on
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/bf16_linear_op.h"
#include "kernels/cpu/expert_ffn.h"
#include "kernels/cpu/expert_ffn_bf16.h"
#include "kernels/cpu/expert_ffn_quant.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/linear_quant.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/quant_formats.h"
#if defined(MOE_HAVE_ONEDNN)
#include "kernels/cpu/linear_onednn.h"
#endif

namespace moe::kernels {
namespace {

constexpr int64_t kD = 1024;
constexpr int64_t kFf = 2816;

struct Matrix {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  int64_t rows, cols;
  Matrix(int64_t r, int64_t c, uint32_t seed)
      : f32(static_cast<size_t>(r * c)), bf16(f32.size()), rows(r), cols(c) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-0.03f, 0.03f);
    for (size_t i = 0; i < f32.size(); ++i) {
      f32[i] = dist(rng);
      bf16[i] = f32_to_bf16(f32[i]);
    }
  }
  MatrixView view(DType t) const {
    return {t == DType::kF32 ? static_cast<const void*>(f32.data()) : static_cast<const void*>(bf16.data()),
            t, rows, cols, cols};
  }
};

// Several experts' worth of weights, used in turn, so that weights stream from DRAM as in a real MoE
// layer (one expert's fp32 FFN is 35 MB; the L3 cache is 32 MB) rather than from a warm L3.
constexpr int kNumExperts = 4;

struct Expert {
  Matrix w1, w3, w2;
  explicit Expert(uint32_t seed) : w1(kFf, kD, seed), w3(kFf, kD, seed + 1), w2(kD, kFf, seed + 2) {}
};

const Expert& expert(int e) {
  static std::unique_ptr<Expert> experts[kNumExperts];
  if (!experts[e]) experts[e] = std::make_unique<Expert>(static_cast<uint32_t>(3 * e + 1));
  return *experts[e];
}

ThreadPool& pool(int threads) {
  static std::unique_ptr<ThreadPool> pools[3];
  if (!pools[threads]) pools[threads] = std::make_unique<ThreadPool>(threads);
  return *pools[threads];
}

std::vector<float> random_x(int64_t rows, int64_t cols) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : x) v = dist(rng);
  return x;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// GFLOP/s and GB/s over wall time; cpuGFLOP/s over the CPU time of all the process's threads, i.e. per
// busy core (workers' spin-waits count as busy). On a shared machine the per-core figure is the stable one.
void set_counters(benchmark::State& state, double flops, double weight_bytes, double cpu_seconds) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] =
      benchmark::Counter(weight_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["cpuGFLOP/s"] = flops * 1e-9 * static_cast<double>(state.iterations()) / cpu_seconds;
}

void bm_linear(benchmark::State& state, KernelKind kind, DType dtype, int64_t rows, int threads) {
  MatrixView w[kNumExperts];
  for (int e = 0; e < kNumExperts; ++e) w[e] = expert(e).w1.view(dtype);
  const auto x = random_x(rows, kD);
  std::vector<float> y(static_cast<size_t>(rows * kFf));
  ThreadPool& p = pool(threads);
  linear(kind, x.data(), rows, kD, w[0], y.data(), kFf, p);  // warm-up (scratch, pages)
  int e = 0;
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    linear(kind, x.data(), rows, kD, w[e], y.data(), kFf, p);
    e = (e + 1) % kNumExperts;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 2.0 * rows * kD * kFf, static_cast<double>(kD * kFf * dtype_size(dtype)),
               process_cpu_seconds() - cpu0);
}

void bm_ffn(benchmark::State& state, KernelKind kind, DType dtype, int64_t rows, int threads) {
  FfnWeights w[kNumExperts];
  for (int e = 0; e < kNumExperts; ++e) {
    w[e] = {expert(e).w1.view(dtype), expert(e).w3.view(dtype), expert(e).w2.view(dtype)};
  }
  const auto x = random_x(rows, kD);
  std::vector<float> y(static_cast<size_t>(rows * kD));
  std::vector<float> scratch(ffn_scratch_floats(rows, kFf));
  ThreadPool& p = pool(threads);
  ffn_forward(kind, Activation::kSwiGLU, x.data(), rows, kD, w[0], y.data(), kD, scratch.data(), p);
  int e = 0;
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    ffn_forward(kind, Activation::kSwiGLU, x.data(), rows, kD, w[e], y.data(), kD, scratch.data(), p);
    e = (e + 1) % kNumExperts;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 3 * 2.0 * rows * kD * kFf, static_cast<double>(3 * kD * kFf * dtype_size(dtype)),
               process_cpu_seconds() - cpu0);
}

// ---- bf16 compute -----------------------------------------------------------------------------------

enum class Bf16Impl { kInvariant, kOnednn, kEigen };

const char* impl_name(Bf16Impl i) {
  return i == Bf16Impl::kInvariant ? "invariant" : i == Bf16Impl::kOnednn ? "onednn" : "eigen";
}

Bf16LinearMaker maker(Bf16Impl impl, int threads) {
#if defined(MOE_HAVE_ONEDNN)
  if (impl == Bf16Impl::kOnednn) return onednn_bf16_linear_maker(threads);
#else
  (void)threads;
#endif
  (void)impl;
  return make_invariant_bf16_linear;
}

// The gate projection (d -> ff, `up`) or the down projection (ff -> d).
void bm_linear_bf16c(benchmark::State& state, Bf16Impl impl, bool up, int64_t rows, int threads) {
  const int64_t in = up ? kD : kFf, out = up ? kFf : kD;
  const auto x = random_x(rows, in);
  std::vector<float> y(static_cast<size_t>(rows * out));
  ThreadPool& p = pool(threads);
  std::vector<std::unique_ptr<Bf16LinearOp>> ops;
  for (int e = 0; e < kNumExperts; ++e) {
    const Matrix& w = up ? expert(e).w1 : expert(e).w2;
    ops.push_back(maker(impl, threads)(w.view(DType::kBF16)));
  }
  std::vector<uint16_t> xb(linear_bf16_workspace_elems(rows, in));
  const auto call = [&](int e) {
    round_rows_to_bf16(x.data(), rows, in, in, xb.data(), p);
    ops[static_cast<size_t>(e)]->forward_rounded(xb.data(), rows, y.data(), out, p);
  };
  call(0);  // warm-up (workspaces, oneDNN primitive)
  int e = 0;
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    call(e);
    e = (e + 1) % kNumExperts;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 2.0 * rows * kD * kFf, static_cast<double>(kD * kFf * 2), process_cpu_seconds() - cpu0);
}

// Eigen's bfloat16 GEMM (scalar bf16 arithmetic, bf16 accumulation), single-threaded.
void bm_linear_eigen_bf16(benchmark::State& state, int64_t rows) {
  using Bf16Matrix = Eigen::Matrix<Eigen::bfloat16, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  std::vector<Bf16Matrix> w(kNumExperts);
  for (int e = 0; e < kNumExperts; ++e) {
    w[static_cast<size_t>(e)].resize(kFf, kD);
    const auto& src = expert(e).w1.bf16;
    for (int64_t i = 0; i < kFf * kD; ++i) {
      w[static_cast<size_t>(e)].data()[i] =
          Eigen::numext::bit_cast<Eigen::bfloat16>(src[static_cast<size_t>(i)]);
    }
  }
  const auto xf = random_x(rows, kD);
  Bf16Matrix x(rows, kD), y(rows, kFf);
  for (int64_t i = 0; i < rows * kD; ++i) x.data()[i] = Eigen::bfloat16(xf[static_cast<size_t>(i)]);
  int e = 0;
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    y.noalias() = x * w[static_cast<size_t>(e)].transpose();
    e = (e + 1) % kNumExperts;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 2.0 * rows * kD * kFf, static_cast<double>(kD * kFf * 2), process_cpu_seconds() - cpu0);
}

void bm_ffn_bf16c(benchmark::State& state, Bf16Impl impl, int64_t rows, int threads) {
  std::vector<PackedFfnBf16> w;
  for (int e = 0; e < kNumExperts; ++e) {
    w.emplace_back(Activation::kSwiGLU,
                   FfnWeights{expert(e).w1.view(DType::kBF16), expert(e).w3.view(DType::kBF16),
                              expert(e).w2.view(DType::kBF16)},
                   maker(impl, threads));
  }
  const auto x = random_x(rows, kD);
  std::vector<float> y(static_cast<size_t>(rows * kD));
  std::vector<float> scratch(ffn_bf16_scratch_floats(rows, kD, kFf));
  ThreadPool& p = pool(threads);
  ffn_bf16_forward(x.data(), rows, kD, w[0], y.data(), kD, scratch.data(), p);
  int e = 0;
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    ffn_bf16_forward(x.data(), rows, kD, w[static_cast<size_t>(e)], y.data(), kD, scratch.data(), p);
    e = (e + 1) % kNumExperts;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 3 * 2.0 * rows * kD * kFf, static_cast<double>(3 * kD * kFf * 2),
               process_cpu_seconds() - cpu0);
}

// ---- quantized weights -------------------------------------------------------------------------------

// A matrix's values quantized to `t` (FP8: 128 x 128 blocks), kept with its view.
struct QuantMatrix {
  std::vector<std::byte> data;
  std::vector<float> scales;
  MatrixView view;
  QuantMatrix(const Matrix& m, DType t) {
    view = MatrixView{nullptr, t, m.rows, m.cols, m.cols};
    if (t == DType::kFP8) {
      data.resize(static_cast<size_t>(m.rows * m.cols));
      scales.resize(static_cast<size_t>(((m.rows + 127) / 128) * ((m.cols + 127) / 128)));
      quantize_fp8(m.f32.data(), m.rows, m.cols, 128, 128, reinterpret_cast<uint8_t*>(data.data()),
                   scales.data());
      view.scales = scales.data();
      view.scale_stride = (m.cols + 127) / 128;
      view.scale_block_rows = view.scale_block_cols = 128;
    } else {
      const size_t rb = row_bytes(t, m.cols);
      data.resize(rb * static_cast<size_t>(m.rows));
      for (int64_t r = 0; r < m.rows; ++r)
        quantize_row(t, m.f32.data() + r * m.cols, m.cols, data.data() + r * rb);
    }
    view.data = data.data();
  }
};

struct QuantExpert {
  QuantMatrix w1, w3, w2;
  QuantExpert(const Expert& e, DType t) : w1(e.w1, t), w3(e.w3, t), w2(e.w2, t) {}
};

const QuantExpert& quant_expert(int e, DType t) {
  static std::unique_ptr<QuantExpert> experts[8][kNumExperts];
  auto& slot = experts[static_cast<int>(t) % 8][e];
  if (!slot) slot = std::make_unique<QuantExpert>(expert(e), t);
  return *slot;
}

void bm_linear_quant(benchmark::State& state, DType t, bool up, int64_t rows, int threads) {
  const int64_t in = up ? kD : kFf, out = up ? kFf : kD;
  std::vector<std::unique_ptr<QuantLinear>> w;
  for (int e = 0; e < kNumExperts; ++e) {
    const QuantExpert& q = quant_expert(e, t);
    w.push_back(std::make_unique<QuantLinear>((up ? q.w1 : q.w2).view, "w"));
  }
  const auto x = random_x(rows, in);
  std::vector<float> y(static_cast<size_t>(rows * out));
  ThreadPool& p = pool(threads);
  w[0]->forward(x.data(), rows, in, y.data(), out, nullptr, p);  // warm-up (workspace)
  int e = 0;
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    w[static_cast<size_t>(e)]->forward(x.data(), rows, in, y.data(), out, nullptr, p);
    e = (e + 1) % kNumExperts;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 2.0 * rows * kD * kFf, static_cast<double>(w[0]->weight_bytes()),
               process_cpu_seconds() - cpu0);
  state.SetLabel(to_string(quant_kernel()));
}

void bm_ffn_quant(benchmark::State& state, DType t, int64_t rows, int threads) {
  std::vector<std::unique_ptr<PackedFfnQuant>> w;
  for (int e = 0; e < kNumExperts; ++e) {
    const QuantExpert& q = quant_expert(e, t);
    w.push_back(std::make_unique<PackedFfnQuant>(
        Activation::kSwiGLU, FfnWeights{q.w1.view, q.w3.view, q.w2.view}, KernelKind::kInvariant, "expert"));
  }
  const auto x = random_x(rows, kD);
  std::vector<float> y(static_cast<size_t>(rows * kD));
  std::vector<float> scratch(ffn_quant_scratch_floats(*w[0], rows));
  ThreadPool& p = pool(threads);
  ffn_quant_forward(x.data(), rows, kD, *w[0], y.data(), kD, scratch.data(), p);
  int e = 0;
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    ffn_quant_forward(x.data(), rows, kD, *w[static_cast<size_t>(e)], y.data(), kD, scratch.data(), p);
    e = (e + 1) % kNumExperts;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 3 * 2.0 * rows * kD * kFf, static_cast<double>(w[0]->weight_bytes()),
               process_cpu_seconds() - cpu0);
  state.SetLabel(to_string(quant_kernel()));
}

void add_statistics(benchmark::internal::Benchmark* b) {
  b->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.3);
  b->ComputeStatistics("max",
                       [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); });
}

void register_bf16_compute() {
  std::vector<Bf16Impl> impls = {Bf16Impl::kInvariant};
#if defined(MOE_HAVE_ONEDNN)
  impls.push_back(Bf16Impl::kOnednn);
#endif
  // linear_bf16c/<impl>/<in>x<out>/rows:R/threads:T (the gate and the down projection), then
  // ffn_bf16c/<impl>/rows:R/threads:T.
  for (Bf16Impl impl : impls) {
    for (bool up : {true, false}) {
      for (int64_t rows : {1, 16, 256, 2048}) {
        for (int threads : {1, 2}) {
          const std::string name = std::string("linear_bf16c/") + impl_name(impl) +
                                   (up ? "/1024x2816" : "/2816x1024") + "/rows:" + std::to_string(rows) +
                                   "/threads:" + std::to_string(threads);
          add_statistics(
              benchmark::RegisterBenchmark(name.c_str(), bm_linear_bf16c, impl, up, rows, threads));
        }
      }
    }
  }
  for (Bf16Impl impl : impls) {
    for (int64_t rows : {1, 16, 256, 2048}) {
      for (int threads : {1, 2}) {
        const std::string name = std::string("ffn_bf16c/") + impl_name(impl) +
                                 "/rows:" + std::to_string(rows) + "/threads:" + std::to_string(threads);
        add_statistics(benchmark::RegisterBenchmark(name.c_str(), bm_ffn_bf16c, impl, rows, threads));
      }
    }
  }
  // Eigen's bf16 GEMM runs at a few GFLOP/s: 2048 rows would take seconds per call.
  for (int64_t rows : {1, 16, 256}) {
    const std::string name = "linear_bf16c/eigen/1024x2816/rows:" + std::to_string(rows) + "/threads:1";
    add_statistics(benchmark::RegisterBenchmark(name.c_str(), bm_linear_eigen_bf16, rows));
  }
}

void register_quant() {
  for (DType t : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kMXFP4, DType::kFP8}) {
    const std::string type(to_string(t));
    for (bool up : {true, false}) {
      for (int64_t rows : {1, 16, 256, 2048}) {
        for (int threads : {1, 2}) {
          const std::string name = "linear_quant/" + type + (up ? "/1024x2816" : "/2816x1024") +
                                   "/rows:" + std::to_string(rows) + "/threads:" + std::to_string(threads);
          add_statistics(benchmark::RegisterBenchmark(name.c_str(), bm_linear_quant, t, up, rows, threads));
        }
      }
    }
    for (int64_t rows : {1, 16, 256, 2048}) {
      for (int threads : {1, 2}) {
        const std::string name =
            "ffn_quant/" + type + "/rows:" + std::to_string(rows) + "/threads:" + std::to_string(threads);
        add_statistics(benchmark::RegisterBenchmark(name.c_str(), bm_ffn_quant, t, rows, threads));
      }
    }
  }
}

int register_all() {
  for (const char* op : {"linear", "ffn"}) {
    for (KernelKind kind : {KernelKind::kFast, KernelKind::kInvariant}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        for (int64_t rows : {1, 16, 256, 2048}) {
          for (int threads : {1, 2}) {
            const std::string name = std::string(op) + "/" + std::string(to_string(kind)) + "/" +
                                     std::string(to_string(dtype)) + "/rows:" + std::to_string(rows) +
                                     "/threads:" + std::to_string(threads);
            auto* b = std::string(op) == "linear"
                          ? benchmark::RegisterBenchmark(name.c_str(), bm_linear, kind, dtype, rows, threads)
                          : benchmark::RegisterBenchmark(name.c_str(), bm_ffn, kind, dtype, rows, threads);
            b->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.3);
            // With --benchmark_repetitions=N, "_max" rows give the best of N runs (for the rate
            // counters), which is the stable figure on a shared machine.
            b->ComputeStatistics(
                "max", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); });
          }
        }
      }
    }
  }
  register_bf16_compute();
  register_quant();
  return 0;
}

const int registered = register_all();

}  // namespace
}  // namespace moe::kernels

BENCHMARK_MAIN();

// Linear and expert-FFN throughput on the CPU, fast (Eigen) vs invariant (own AVX-512 kernel).
//
// Shapes: a Mixtral-like expert scaled to d = 1024, ff = 2816; the linear is the gate projection
// [ff, d]. Rows 1 (decode, memory-bound), 16, 256, 2048 (prefill, compute-bound); fp32 and bf16
// weights; 1 and 2 threads. Counters: GFLOP/s (2 * rows * in * out per linear) and GB/s of weight bytes
// streamed (each weight read once per call). Names read linear/<kind>/<dtype>/rows:R/threads:T.
//
// Run: build/bin/kernels_cpu_linear_bench --benchmark_filter=linear/invariant
#include <benchmark/benchmark.h>

#include <cstdint>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/expert_ffn.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/thread_pool.h"

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

const Matrix& w1() {
  static const Matrix m(kFf, kD, 1);
  return m;
}
const Matrix& w3() {
  static const Matrix m(kFf, kD, 2);
  return m;
}
const Matrix& w2() {
  static const Matrix m(kD, kFf, 3);
  return m;
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
  const MatrixView w = w1().view(dtype);
  const auto x = random_x(rows, kD);
  std::vector<float> y(static_cast<size_t>(rows * kFf));
  ThreadPool& p = pool(threads);
  linear(kind, x.data(), rows, kD, w, y.data(), kFf, p);  // warm-up (scratch, pages)
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    linear(kind, x.data(), rows, kD, w, y.data(), kFf, p);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 2.0 * rows * kD * kFf, static_cast<double>(kD * kFf * dtype_size(dtype)),
               process_cpu_seconds() - cpu0);
}

void bm_ffn(benchmark::State& state, KernelKind kind, DType dtype, int64_t rows, int threads) {
  const FfnWeights w{w1().view(dtype), w3().view(dtype), w2().view(dtype)};
  const auto x = random_x(rows, kD);
  std::vector<float> y(static_cast<size_t>(rows * kD));
  std::vector<float> scratch(ffn_scratch_floats(rows, kFf));
  ThreadPool& p = pool(threads);
  ffn_forward(kind, Activation::kSwiGLU, x.data(), rows, kD, w, y.data(), kD, scratch.data(), p);
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    ffn_forward(kind, Activation::kSwiGLU, x.data(), rows, kD, w, y.data(), kD, scratch.data(), p);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 3 * 2.0 * rows * kD * kFf, static_cast<double>(3 * kD * kFf * dtype_size(dtype)),
               process_cpu_seconds() - cpu0);
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
          }
        }
      }
    }
  }
  return 0;
}

const int registered = register_all();

}  // namespace
}  // namespace moe::kernels

BENCHMARK_MAIN();

// peak_bench: the machine's limits that the kernel and layer tables are measured against.
//
//   fp32_fma   register-only vfmadd231ps zmm (24 independent accumulators: covers a 4-cycle latency on two
//              FMA ports), GFLOP/s = 32 per instruction (16 lanes x multiply + add)
//   bf16_dp    register-only vdpbf16ps zmm (24 independent accumulators), GFLOP/s = 64 per instruction
//              (16 lanes x 2 products x multiply + add); only on CPUs with AVX512_BF16 (a run-time check)
//   int8_dp    register-only vpdpbusd zmm (AVX512_VNNI; 24 independent accumulators), GOP/s = 128 per
//              instruction (16 lanes x 4 byte products x multiply + add); only on CPUs with AVX512_VNNI
//   amx_bf16   register-only AMX tdpbf16ps on 16 x 16 fp32 tiles (4 accumulator tiles, A and B tiles loaded
//              once), GFLOP/s = 16384 per instruction (16 x 16 outputs x 32 products x multiply + add); only
//              on CPUs with AMX-BF16 (a run-time check)
//   stream     streaming read bandwidth: sum of a 1 GiB buffer (far larger than the last-level cache)
//              with 512-bit loads and 8 accumulators; 2 threads read one half each. The buffer is a
//              kernels::WeightBuffer, as the layers' weights are (2 MB pages where the system has them:
//              with 4 KB pages the stream read 13-27 % less on the development VM; MOE_HUGE_PAGES=0
//              measures that)
// Each is run on 1 and 2 threads (one instance per thread), `--reps` times (default 7); the JSON reports
// the best and the median over repetitions, as wall-clock rates and as rates per busy core (per-thread
// CPU time), which is the stable figure on a shared machine. Output: JSON on stdout (or --out FILE), a
// human summary on stderr. Usage: build/bin/peak_bench [--reps N] [--out FILE] [--stream-mib M]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/stream_read.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/simd.h"
#include "kernels/weight_buffer.h"

namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr int kAcc = 24;

// The AVX-512 loops are compiled for AVX512F alone (the build may target less, MOE_NATIVE=OFF) and run only
// after main() checked cpu_has_avx512f().
#if defined(__GNUC__)
#define PEAK_TARGET_AVX512F __attribute__((target("avx512f")))
#else
#define PEAK_TARGET_AVX512F
#endif

// Returns a value that depends on every accumulator so that no work can be dropped.
PEAK_TARGET_AVX512F float fma_loop(int64_t iterations) {
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

#if MOE_HAVE_AVX512_BF16_TARGET
MOE_TARGET_AVX512_BF16 float dp_loop(int64_t iterations) {
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  // bf16 0x3a83 ~ 1e-3: the accumulators grow by ~2e-6 per step (no overflow, no subnormals).
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3a83), b = (__m512bh)_mm512_set1_epi16(0x3a83);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}
#endif

#if MOE_HAVE_AVX512_BF16_TARGET
__attribute__((target("avx512f,avx512vnni"))) float vnni_loop(int64_t iterations) {
  __m512i acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  __m512i s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_epi32(s, acc[i]);
  return static_cast<float>(_mm512_reduce_add_epi32(s));
}
#endif

#if MOE_HAVE_AMX_TARGET
struct alignas(64) AmxConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// `iterations` x 4 tdpbf16ps on tiles 0-3 (C) from tiles 4-7 (A0, A1, B0, B1), the 2 x 2 blocking of the
// AMX kernel without its loads. bf16 0x3a83 ~ 1e-3 again: no overflow.
__attribute__((target("amx-tile,amx-bf16"))) float amx_loop(int64_t iterations) {
  AmxConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  alignas(64) uint16_t ab[512];
  std::fill(std::begin(ab), std::end(ab), uint16_t{0x3a83});
  alignas(64) float c[256] = {};
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ab, 64);
  _tile_loadd(5, ab, 64);
  _tile_loadd(6, ab, 64);
  _tile_loadd(7, ab, 64);
  for (int64_t it = 0; it < iterations; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0];
}
#endif

struct Rate {
  double wall = 0, cpu = 0;  // units (GFLOP or GB) per second: wall clock over all threads, and per busy core
};

// Runs work(thread) on `threads` threads at once (released together) and returns the aggregate rate.
Rate run_parallel(int threads, double units_per_thread, const std::function<float(int)>& work) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> cpu(static_cast<size_t>(threads));
  std::vector<float> sink(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  double t0 = 0, t1 = 0;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      const double c0 = thread_cpu_seconds();
      sink[static_cast<size_t>(t)] = work(t);
      cpu[static_cast<size_t>(t)] = thread_cpu_seconds() - c0;
    });
  }
  while (ready.load() < threads) {
  }
  t0 = wall_seconds();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  t1 = wall_seconds();
  volatile float keep = 0;
  for (float s : sink) keep = keep + s;
  (void)keep;
  Rate r;
  r.wall = units_per_thread * threads / (t1 - t0);
  double cpu_sum = 0;
  for (double c : cpu) cpu_sum += c;
  r.cpu = units_per_thread * threads / cpu_sum;  // per busy core
  return r;
}

struct Stats {
  double best_wall, median_wall, best_cpu, median_cpu;
};

Stats repeat(int reps, const std::function<Rate()>& fn) {
  std::vector<double> w, c;
  for (int i = 0; i < reps; ++i) {
    const Rate r = fn();
    w.push_back(r.wall);
    c.push_back(r.cpu);
  }
  std::sort(w.begin(), w.end());
  std::sort(c.begin(), c.end());
  return {w.back(), w[w.size() / 2], c.back(), c[c.size() / 2]};
}

std::string json_stats(const Stats& s, const char* unit) {
  std::ostringstream o;
  o.precision(4);
  o << std::fixed << "{\"best_" << unit << "\": " << s.best_wall << ", \"median_" << unit
    << "\": " << s.median_wall << ", \"best_" << unit << "_per_busy_core\": " << s.best_cpu << ", \"median_"
    << unit << "_per_busy_core\": " << s.median_cpu << "}";
  return o.str();
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7;
  size_t stream_mib = 1024;
  std::string out_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else if (a == "--stream-mib" && i + 1 < argc) {
      stream_mib = static_cast<size_t>(std::max(64, std::atoi(argv[++i])));
    } else {
      std::fprintf(stderr, "usage: %s [--reps N] [--out FILE] [--stream-mib M]\n", argv[0]);
      return 2;
    }
  }
  if (!moe::kernels::cpu_has_avx512f()) {
    std::fprintf(stderr,
                 "peak_bench: this CPU does not run AVX512F code; the peaks it measures are AVX-512's\n");
    return 1;
  }
  // ~0.2-0.3 s per compute run on one core.
  const int64_t iters = 40'000'000;
  const double fma_gflop = 1e-9 * static_cast<double>(iters) * kAcc * 32;
  const size_t n = stream_mib * (size_t{1} << 20) / sizeof(float) / 256 * 256;
  // The memory the layers' weights live in (kernels/weight_buffer.h: 2 MB pages where the system has them),
  // so that the kernels' "% of the stream" compares like with like.
  moe::kernels::WeightBuffer stream_buffer(n * sizeof(float));
  auto* buf = reinterpret_cast<float*>(stream_buffer.data());
  // Each thread first-touches the half it reads.
  {
    std::thread t1([&] { std::fill(buf, buf + n / 2, 1.0f); });
    std::fill(buf + n / 2, buf + n, 1.0f);
    t1.join();
  }
  const double gb = 1e-9 * static_cast<double>(n * sizeof(float));

  std::ostringstream json;
  json << "{\n  \"cpu\": \"" << cpu_model() << "\",\n  \"reps\": " << reps << ",\n";
  const auto section = [&](const char* name, const char* unit, const std::function<Rate(int)>& fn,
                           bool last) {
    json << "  \"" << name << "\": {";
    for (int threads : {1, 2}) {
      const Stats s = repeat(reps, [&] { return fn(threads); });
      json << "\"threads_" << threads << "\": " << json_stats(s, unit) << (threads == 1 ? ", " : "");
      std::fprintf(stderr, "%-10s %d thread%s: best %7.1f %s (median %7.1f); per busy core best %7.1f\n",
                   name, threads, threads == 1 ? " " : "s", s.best_wall, unit, s.median_wall, s.best_cpu);
    }
    json << "}" << (last ? "\n" : ",\n");
  };
  section(
      "fp32_fma", "gflops",
      [&](int threads) { return run_parallel(threads, fma_gflop, [&](int) { return fma_loop(iters); }); },
      false);
#if MOE_HAVE_AVX512_BF16_TARGET
  if (moe::kernels::cpu_has_avx512_bf16()) {
    section(
        "bf16_dp", "gflops",
        [&](int threads) {
          return run_parallel(threads, 2 * fma_gflop, [&](int) { return dp_loop(iters); });
        },
        false);
  } else {
    json << "  \"bf16_dp\": null,\n";
  }
#else
  json << "  \"bf16_dp\": null,\n";
#endif
#if MOE_HAVE_AVX512_BF16_TARGET
  if (moe::kernels::cpu_has_avx512_vnni()) {
    section(
        "int8_dp", "gops",
        [&](int threads) {
          return run_parallel(threads, 4 * fma_gflop, [&](int) { return vnni_loop(iters); });
        },
        false);
  } else {
    json << "  \"int8_dp\": null,\n";
  }
#else
  json << "  \"int8_dp\": null,\n";
#endif
#if MOE_HAVE_AMX_TARGET
  if (moe::kernels::cpu_has_amx_bf16()) {
    const int64_t amx_iters = 1'000'000;  // ~0.1-0.2 s on one core at ~2 TFLOP/s
    const double amx_gflop = 1e-9 * static_cast<double>(amx_iters) * 4 * 16384;
    section(
        "amx_bf16", "gflops",
        [&](int threads) {
          return run_parallel(threads, amx_gflop, [&](int) { return amx_loop(amx_iters); });
        },
        false);
  } else {
    json << "  \"amx_bf16\": null,\n";
  }
#else
  json << "  \"amx_bf16\": null,\n";
#endif
  section(
      "stream", "gbps",
      [&](int threads) {
        return run_parallel(threads, gb / threads, [&](int t) {
          const size_t part = n / static_cast<size_t>(threads);
          return moe::bench::stream_sum(buf + part * static_cast<size_t>(t), part);
        });
      },
      true);
  json << "}\n";
  if (out_path.empty()) {
    std::fputs(json.str().c_str(), stdout);
  } else {
    std::ofstream(out_path) << json.str();
  }
  return 0;
}

// What keeping FP8 checkpoints in memory would buy and cost (docs/results.md "FP8 in memory or on load"):
//   BM_Fp8DequantOnLoad   moe::io::dequantize_fp8 (what from_pretrained does) of one DeepSeek-V3 expert
//   matrix
//                         (2048 x 7168 e4m3, 128 x 128 block scales) to bf16: the load-time cost per byte.
//   BM_Fp8WidenFromMemory e4m3 codes streamed from a 1 GiB buffer and widened to bf16 bits (exact: every e4m3
//                         value is a bf16 value) into an L1-resident 16 KB panel, with AVX-512 (two
//                         vpermi2w over a 128-entry table): the inner step of a kernel that keeps FP8 in
//                         memory.
//   BM_Bf16FromMemory     the same number of elements of bf16 streamed from a 2 GiB buffer into the same
//   panel:
//                         what the bf16 kernels read at T = 1 today.
// Counter elems_per_s: weight elements per second. The widened panel's bits are checked against
// io::fp8_e4m3_value for every code before timing. Block scales are not applied in the widening: a kernel
// that keeps FP8 would scale each 128-column block's partial sums (a different summation from the
// dequantized weights, hence different bits from the bf16-storage path).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "moe/io/quantized.h"

namespace moe {
namespace {

constexpr size_t kPanel = 8192;         // elements of the L1-resident panel (16 KB of bf16)
constexpr size_t kStream = 1ull << 30;  // elements streamed from memory

std::vector<uint8_t> random_codes(size_t n) {
  std::vector<uint8_t> q(n);
  uint64_t h = 99;
  for (uint8_t& c : q) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<uint8_t>(h >> 56);
    if ((c & 0x7f) == 0x7f) c ^= 1;  // no NaN codes
  }
  return q;
}

// bf16 bits of the e4m3 magnitudes 0..127 (0x7f is NaN).
std::vector<uint16_t> magnitude_table() {
  std::vector<uint16_t> t(128);
  for (int b = 0; b < 128; ++b) {
    t[static_cast<size_t>(b)] =
        kernels::f32_to_bf16(static_cast<float>(io::fp8_e4m3_value(static_cast<uint8_t>(b))));
  }
  return t;
}

__attribute__((target("avx512f,avx512bw"))) void widen_fp8(const uint8_t* q, uint16_t* out, size_t n,
                                                           const uint16_t* table) {
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 32);
  const __m512i t2 = _mm512_loadu_si512(table + 64), t3 = _mm512_loadu_si512(table + 96);
  const __m512i bit6 = _mm512_set1_epi16(0x40), sign = _mm512_set1_epi16(0x80);
  for (size_t i = 0; i < n; i += 32) {
    const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i)));
    const __m512i lo = _mm512_permutex2var_epi16(t0, v, t1);  // index bits 0-5
    const __m512i hi = _mm512_permutex2var_epi16(t2, v, t3);
    const __m512i r = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(v, bit6), lo, hi);
    _mm512_storeu_si512(out + i, _mm512_or_si512(r, _mm512_slli_epi16(_mm512_and_si512(v, sign), 8)));
  }
}

bool has_avx512bw() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

bool widening_exact(const std::vector<uint16_t>& table) {
  std::vector<uint8_t> codes(256);
  for (int b = 0; b < 256; ++b) codes[static_cast<size_t>(b)] = static_cast<uint8_t>(b);
  std::vector<uint16_t> out(256);
  widen_fp8(codes.data(), out.data(), 256, table.data());
  for (int b = 0; b < 256; ++b) {
    const double want = io::fp8_e4m3_value(static_cast<uint8_t>(b));
    const double got = kernels::bf16_to_f32(out[static_cast<size_t>(b)]);
    if (std::isnan(want) ? !std::isnan(got) : (got != want || std::signbit(got) != std::signbit(want)))
      return false;
  }
  return true;
}

void BM_Fp8DequantOnLoad(benchmark::State& state) {
  const int64_t rows = 2048, cols = 7168;
  const std::vector<uint8_t> q = random_codes(static_cast<size_t>(rows * cols));
  std::vector<float> scale(static_cast<size_t>((rows / 128) * (cols / 128)), 0.0123f);
  std::vector<uint16_t> out(q.size());
  for (auto _ : state) {
    io::dequantize_fp8(q.data(), rows, cols, reinterpret_cast<const std::byte*>(scale.data()),
                       kernels::DType::kF32, {}, kernels::DType::kBF16,
                       reinterpret_cast<std::byte*>(out.data()), "bench");
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["elems_per_s"] =
      benchmark::Counter(static_cast<double>(q.size()), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Fp8WidenFromMemory(benchmark::State& state) {
  if (!has_avx512bw()) {
    state.SkipWithError("needs AVX-512 BW");
    return;
  }
  const std::vector<uint16_t> table = magnitude_table();
  if (!widening_exact(table)) {
    state.SkipWithError("the widening disagrees with io::fp8_e4m3_value");
    return;
  }
  const std::vector<uint8_t> q = random_codes(kStream);
  std::vector<uint16_t> panel(kPanel);
  for (auto _ : state) {
    for (size_t i = 0; i < kStream; i += kPanel) {
      widen_fp8(q.data() + i, panel.data(), kPanel, table.data());
      benchmark::ClobberMemory();
    }
  }
  state.counters["elems_per_s"] =
      benchmark::Counter(static_cast<double>(kStream), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Bf16FromMemory(benchmark::State& state) {
  const std::vector<uint16_t> w(kStream, 0x3f80);
  std::vector<uint16_t> panel(kPanel);
  for (auto _ : state) {
    for (size_t i = 0; i < kStream; i += kPanel) {
      std::memcpy(panel.data(), w.data() + i, kPanel * sizeof(uint16_t));
      benchmark::ClobberMemory();
    }
  }
  state.counters["elems_per_s"] =
      benchmark::Counter(static_cast<double>(kStream), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_Fp8DequantOnLoad)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Fp8WidenFromMemory)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Bf16FromMemory)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace moe

BENCHMARK_MAIN();

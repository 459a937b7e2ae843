// The streaming read that the benchmarks' memory-bound rows are measured against (peak_bench's `stream`,
// layer_bench's stream_GBps): the sum of a buffer far larger than the last-level cache with 512-bit loads
// into 8 independent accumulators. Compiled for AVX512F alone; call it only where cpu_has_avx512f().
#pragma once

#include <cstddef>

#include "kernels/cpu/simd.h"

namespace moe::bench {

// Sum of n floats (n a multiple of 128) at 64-byte-aligned p.
#if defined(__GNUC__)
__attribute__((target("avx512f")))
#endif
inline float
stream_sum(const float* p, size_t n) {
  __m512 acc[8];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 128) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_add_ps(acc[j], _mm512_load_ps(p + i + 16 * j));
  }
  for (int j = 1; j < 8; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  return _mm512_reduce_add_ps(acc[0]);
}

}  // namespace moe::bench

// Pieces of the AVX-512 register tiles that the bf16 kernels share (linear_bf16_avx512.cc: vdpbf16ps;
// linear_bf16_fma512.cc: fp32 FMAs in either contract's order): a tile holds MR rows x one 64-output weight
// panel in MR x 4 zmm accumulators, lane l of register n holding output 16 n + l of the panel.
//
// Include it INSIDE a file's AVX-512 target region (after its `#pragma GCC target` / `clang attribute push`):
// its functions then take that file's target, and they have internal linkage, so each file compiles its own
// copy (no inline function is shared between files built for different targets).
#pragma once

#include <cstdint>

#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/simd.h"

namespace moe::kernels::detail {
namespace {

// zmm registers per weight panel.
constexpr int kPanelRegs = static_cast<int>(kBf16PanelOutputs / 16);
// Software prefetch distance along the packed weights, in dwords (4 KB): the first row group over a panel
// streams it from memory, and the hardware prefetcher alone left a one-row product at ~8-10 GB/s where
// this gives ~12-14 (the streaming read peak of the development machine is ~14).
constexpr int64_t kPanelPrefetchDwords = 1024;

// Prefetches the panel row kPanelPrefetchDwords ahead of pair row wp.
[[gnu::always_inline]] inline void prefetch_panel_row(const uint32_t* wp) {
#pragma GCC unroll 4
  for (int n = 0; n < kPanelRegs; ++n) {
    _mm_prefetch(reinterpret_cast<const char*>(wp + kPanelPrefetchDwords + 16 * n), _MM_HINT_T0);
  }
}

template <int MR>
[[gnu::always_inline]] inline void zero_panel_tile(__m512 (&acc)[MR][kPanelRegs]) {
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
    for (int n = 0; n < kPanelRegs; ++n) acc[m][n] = _mm512_setzero_ps();
  }
}

// Stores the tile's MR rows to y (row m at y + m * ys), the first `valid` outputs of the panel.
template <int MR>
[[gnu::always_inline]] inline void store_panel_tile(const __m512 (&acc)[MR][kPanelRegs], float* y, int64_t ys,
                                                    int valid) {
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
    for (int n = 0; n < kPanelRegs; ++n) {
      float* dst = y + m * ys + 16 * n;
      const int left = valid - 16 * n;
      if (left >= 16) {
        _mm512_storeu_ps(dst, acc[m][n]);
      } else if (left > 0) {
        _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << left) - 1u), acc[m][n]);
      }
    }
  }
}

}  // namespace
}  // namespace moe::kernels::detail

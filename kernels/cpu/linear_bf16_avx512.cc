// The AVX-512 vdpbf16ps kernel of the bf16-compute linear.
//
// NOTES: a register tile is MR rows (1..6) x one weight panel (64 outputs = 4 registers of 16 lanes); per
// pair p it broadcasts each row's (even, odd) x pair to all lanes and runs acc[m][n] = vdpbf16ps(acc[m][n],
// x pair of row m, panel register n). Lane l of register n accumulates output 16 n + l of the panel in one
// sequential chain over p = 0..P-1: the chain of the contract, whatever MR or the loop order around the
// tile. 24 accumulators + 6 broadcasts + 1 weight register fit the 32 vector registers and cover the
// latency of vdpbf16ps (6-8 cycles) at one or two per cycle.
// Loop order: row blocks of kRowBlock (the block's x stays in L2/L3) x the thread's panels (a panel of a
// 2816-long reduction is 360 KB: it stays in L2 while every row group of the block passes over it) x row
// groups of 6. A one-row product streams the packed weights once, front to back (one contiguous stream).
#include <algorithm>
#include <array>
#include <utility>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/linear_bf16_kernel.h"
#include "kernels/cpu/simd.h"

#if MOE_HAVE_AVX512_BF16_TARGET
// Everything below, and nothing in any other file, is compiled for AVX512F + AVX512_BF16 (after the includes:
// the inline functions of the headers keep the build's flags). linear_bf16.cc calls it only when
// cpu_has_avx512_bf16().
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bf16"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16")
#endif
// After the target region opens: its functions take this file's target (see the header).
#include "kernels/cpu/linear_bf16_panel512.h"  // NOLINT(build/include_order)
#endif

namespace moe::kernels::detail {

#if MOE_HAVE_AVX512_BF16_TARGET
namespace {

constexpr int kMR = 6;
constexpr int kNV = kPanelRegs;
constexpr int64_t kRowBlock = 96;

template <int MR, bool Prefetch>
void tile(const uint16_t* xb, int64_t xs, const uint32_t* panel, int64_t pairs, float* y, int64_t ys,
          int valid) {
  __m512 acc[MR][kNV];
  zero_panel_tile(acc);
  for (int64_t p = 0; p < pairs; ++p) {
    __m512i xv[MR];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      xv[m] = _mm512_broadcastd_epi32(_mm_loadu_si32(xb + m * xs + 2 * p));
      asm("" : "+v"(xv[m]));  // one broadcast per row, not one per instruction
    }
    const uint32_t* wp = panel + p * kBf16PanelOutputs;
    if constexpr (Prefetch) prefetch_panel_row(wp);
#pragma GCC unroll 4
    for (int n = 0; n < kNV; ++n) {
      __m512i wv = _mm512_load_si512(wp + 16 * n);
      asm("" : "+v"(wv));  // keep the weights in a register: otherwise GCC folds the load MR times
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], (__m512bh)xv[m], (__m512bh)wv);
    }
  }
  store_panel_tile(acc, y, ys, valid);
}

using TileFn = void (*)(const uint16_t*, int64_t, const uint32_t*, int64_t, float*, int64_t, int);

template <bool Prefetch, int... Ms>
constexpr std::array<TileFn, sizeof...(Ms)> tile_table(std::integer_sequence<int, Ms...>) {
  return {&tile<Ms + 1, Prefetch>...};
}
// [prefetch][mr - 1]: the first row group of a block prefetches the panel (it reads it from memory),
// the later ones find it in L2.
constexpr std::array<std::array<TileFn, kMR>, 2> kTiles = {
    tile_table<false>(std::make_integer_sequence<int, kMR>{}),
    tile_table<true>(std::make_integer_sequence<int, kMR>{})};

}  // namespace

void bf16_panels_avx512(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j_begin,
                        int64_t j_end, float* y, int64_t y_stride) {
  const int64_t pairs = w.pairs(), xs = 2 * pairs;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int64_t r1 = std::min(rows, r0 + kRowBlock);
    for (int64_t j = j_begin; j < j_end; ++j) {
      const int64_t o = j * kBf16PanelOutputs;
      const int valid = static_cast<int>(std::min<int64_t>(kBf16PanelOutputs, w.out() - o));
      for (int64_t r = r0; r < r1; r += kMR) {
        const int mr = static_cast<int>(std::min<int64_t>(kMR, r1 - r));
        kTiles[r == r0 ? 1 : 0][mr - 1](xb + r * xs, xs, w.panel(j), pairs, y + r * y_stride + o, y_stride,
                                        valid);
      }
    }
  }
}

#else

void bf16_panels_avx512(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j_begin,
                        int64_t j_end, float* y, int64_t y_stride) {
  bf16_panels_emulated(Bf16Contract::kPair, xb, rows, w, j_begin, j_end, y, y_stride);
}

#endif

}  // namespace moe::kernels::detail

#if MOE_HAVE_AVX512_BF16_TARGET
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

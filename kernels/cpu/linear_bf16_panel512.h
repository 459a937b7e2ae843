// The AVX-512 register tile of the bf16 kernels (linear_bf16_avx512.cc: vdpbf16ps; linear_bf16_fma512.cc:
// fp32 FMAs in either contract's order) and its tile policy for drive_panels (linear_bf16_driver.h): a tile
// holds MR rows x one 64-output weight panel in MR x 4 zmm accumulators, lane l of register n holding output
// 16 n + l of the panel. A kernel supplies only its step (below): what one pair of the reduction does to the
// accumulators.
//
// Include it INSIDE a file's AVX-512 target region (MOE_TARGET_REGION_BEGIN of cpu_features.h), after the
// file included every header this one includes before the region (so that their inline functions keep the
// build's flags): its own functions then take that file's target, and they have internal linkage, so each
// file compiles its own copy (no inline function is shared between files built for different targets).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/linear_bf16_driver.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/tile_bf16.h"

namespace moe::kernels::detail {
namespace {

// zmm registers per weight panel.
constexpr int kPanelRegs = static_cast<int>(kBf16PanelOutputs / 16);
// Software prefetch distance along the packed weights, in dwords (4 KB): the first row group over a panel
// streams it from memory, and the hardware prefetcher alone left a one-row product at ~8-10 GB/s where
// this gives ~12-14 (the streaming read peak of the development machine is ~14).
constexpr int64_t kPanelPrefetchDwords = 1024;
// Rows of a block: the block's activations stay in L2/L3 while every row group of it passes over a panel (a
// panel of a 2816-long reduction is 360 KB: it stays in L2).
constexpr int64_t kPanelRowBlock = 96;

template <int MR>
using PanelAcc = __m512[MR][kPanelRegs];

// Prefetches the panel row kPanelPrefetchDwords ahead of pair row wp.
[[gnu::always_inline]] inline void prefetch_panel_row(const uint32_t* wp) {
#pragma GCC unroll 4
  for (int n = 0; n < kPanelRegs; ++n) {
    _mm_prefetch(reinterpret_cast<const char*>(wp + kPanelPrefetchDwords + 16 * n), _MM_HINT_T0);
  }
}

template <int MR>
[[gnu::always_inline]] inline void zero_panel_tile(PanelAcc<MR>& acc) {
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
    for (int n = 0; n < kPanelRegs; ++n) acc[m][n] = _mm512_setzero_ps();
  }
}

// Stores the tile's MR rows to y (row m at y + m * ys), the first `valid` outputs of the panel.
template <int MR>
[[gnu::always_inline]] inline void store_panel_tile(const PanelAcc<MR>& acc, float* y, int64_t ys,
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

// A step S has:
//   S::Element    the activation element its tiles read (bf16 bits, or their exact fp32 widening)
//   S::kTwoChains whether it can run the even and the odd products in two chains (the tile contract)
//   template <int MR> static void step(PanelAcc<MR>& even, PanelAcc<MR>& odd, const Element* x, int64_t xs,
//                                      int64_t p, const uint32_t* wp)
//                 pair p of rows x + m * xs (m < MR) times the panel's pair row wp: even[m][n] takes the even
//                 products and odd[m][n] the odd ones, each rounded once (fused), the odd one first; for the
//                 pair contract `even` and `odd` are the same accumulators (one chain: odd, then even)
//   static const Element* load_block(const uint16_t* xb, int64_t rows, int64_t xs)
//                 the block's rows (row r at xb + r * xs) as the tiles read them, at the same stride
//
// The tile of contract C over `pairs` pairs: pair contract, one chain per output from +0; tile contract
// (tile_bf16.h), per 16-pair block an even and an odd chain from +0, a short last block adding the padding
// pairs' +0 to each chain (what fma(+0, +0, e) gives), then t = e + o and acc = acc + t (acc from +0), the
// adds rounded as the contract's under MXCSR's DAZ/FTZ. The tile contract holds three register sets, so
// its MR is at most kMaxTileRows.
template <class S, Bf16Contract C, int MR, bool Prefetch>
void panel_tile(const typename S::Element* x, int64_t xs, const uint32_t* panel, int64_t pairs, float* y,
                int64_t ys, int valid) {
  PanelAcc<MR> acc;
  zero_panel_tile(acc);
  if constexpr (C == Bf16Contract::kPair) {
    for (int64_t p = 0; p < pairs; ++p) {
      const uint32_t* wp = panel + p * kBf16PanelOutputs;
      if constexpr (Prefetch) prefetch_panel_row(wp);
      S::template step<MR>(acc, acc, x, xs, p, wp);
    }
  } else {
    for (int64_t p0 = 0; p0 < pairs; p0 += kBf16TilePairs) {
      const int64_t p1 = std::min(pairs, p0 + kBf16TilePairs);
      PanelAcc<MR> e, o;
      zero_panel_tile(e);
      zero_panel_tile(o);
      for (int64_t p = p0; p < p1; ++p) {
        const uint32_t* wp = panel + p * kBf16PanelOutputs;
        if constexpr (Prefetch) prefetch_panel_row(wp);
        S::template step<MR>(e, o, x, xs, p, wp);
      }
      const bool padded = p1 - p0 < kBf16TilePairs;
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
        for (int n = 0; n < kPanelRegs; ++n) {
          if (padded) {
            e[m][n] = _mm512_add_ps(e[m][n], _mm512_setzero_ps());
            o[m][n] = _mm512_add_ps(o[m][n], _mm512_setzero_ps());
          }
          const __m512 t = _mm512_add_ps(e[m][n], o[m][n]);
          acc[m][n] = _mm512_add_ps(acc[m][n], t);
        }
      }
    }
  }
  store_panel_tile(acc, y, ys, valid);
}

constexpr int kMaxPairRows = 6;  // 24 accumulators + broadcasts + a weight register: the 32 zmm registers
constexpr int kMaxTileRows = 2;  // three register sets (acc, e, o)

// The tile policy of drive_panels for step S in contract C: blocks of kPanelRowBlock rows prepared by
// S::load_block, whole panels, groups of up to kMaxPairRows (pair) or kMaxTileRows (tile) rows; the block's
// first group prefetches the panel (it reads it from memory), the later ones find it in L2.
template <class S, Bf16Contract C>
struct PanelTiles {
  static_assert(C == Bf16Contract::kPair || S::kTwoChains,
                "the tile contract needs a step that keeps the even and odd chains apart");
  using Block = const typename S::Element*;
  static constexpr int kGroupRows = C == Bf16Contract::kPair ? kMaxPairRows : kMaxTileRows;
  using TileFn = void (*)(const typename S::Element*, int64_t, const uint32_t*, int64_t, float*, int64_t,
                          int);

  template <bool Prefetch, int... Ms>
  static constexpr std::array<TileFn, sizeof...(Ms)> table(std::integer_sequence<int, Ms...>) {
    return {&panel_tile<S, C, Ms + 1, Prefetch>...};
  }
  // [first][rows - 1]
  static constexpr std::array<std::array<TileFn, kGroupRows>, 2> kTiles = {
      table<false>(std::make_integer_sequence<int, kGroupRows>{}),
      table<true>(std::make_integer_sequence<int, kGroupRows>{})};

  int64_t pairs;

  int64_t block_rows() const { return kPanelRowBlock; }
  Block load_block(const uint16_t* xb, int64_t rows) const { return S::load_block(xb, rows, 2 * pairs); }
  int64_t slice_outputs(int64_t) const { return kBf16PanelOutputs; }
  void tile(Block block, int64_t g, int64_t nr, const uint32_t* slice, float* y, int64_t y_stride, int64_t nc,
            bool first) const {
    kTiles[first ? 1 : 0][nr - 1](block + g * 2 * pairs, 2 * pairs, slice, pairs, y, y_stride,
                                  static_cast<int>(nc));
  }
};

}  // namespace
}  // namespace moe::kernels::detail

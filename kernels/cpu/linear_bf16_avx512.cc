// The AVX-512 vdpbf16ps kernel of the bf16-compute linear: its step on the register tile of
// linear_bf16_panel512.h, driven by drive_panels (linear_bf16_driver.h).
//
// NOTES: a register tile is MR rows (1..6) x one weight panel (64 outputs = 4 registers of 16 lanes); per
// pair p it broadcasts each row's (even, odd) x pair to all lanes and runs acc[m][n] = vdpbf16ps(acc[m][n],
// x pair of row m, panel register n). Lane l of register n accumulates output 16 n + l of the panel in one
// sequential chain over p = 0..P-1: the chain of the contract, whatever MR or the loop order around the
// tile. 24 accumulators + 6 broadcasts + 1 weight register fit the 32 vector registers and cover the
// latency of vdpbf16ps (6-8 cycles) at one or two per cycle. The tiles read the activations in place; a
// one-row product streams the packed weights once, front to back (one contiguous stream).
#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/linear_bf16_driver.h"
#include "kernels/cpu/linear_bf16_kernel.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/tile_bf16.h"

#if MOE_HAVE_AVX512_BF16_TARGET
// Everything below, and nothing in any other file, is compiled for AVX512F + AVX512_BF16. linear_bf16.cc
// calls it only when cpu_has_avx512_bf16().
MOE_TARGET_REGION_BEGIN("avx512f,avx512bf16")
// After the target region opens: its functions take this file's target (see the header).
#include "kernels/cpu/linear_bf16_panel512.h"  // NOLINT(build/include_order)

namespace moe::kernels::detail {
namespace {

// vdpbf16ps fuses both products of a pair (odd first): the pair contract's one chain.
struct Dpbf16Step {
  using Element = uint16_t;
  static constexpr bool kTwoChains = false;

  template <int MR>
  [[gnu::always_inline]] static void step(PanelAcc<MR>& acc, PanelAcc<MR>& /*the same: one chain*/,
                                          const uint16_t* x, int64_t xs, int64_t p, const uint32_t* wp) {
    __m512i xv[MR];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      xv[m] = _mm512_broadcastd_epi32(_mm_loadu_si32(x + m * xs + 2 * p));
      asm("" : "+v"(xv[m]));  // one broadcast per row, not one per instruction
    }
#pragma GCC unroll 4
    for (int n = 0; n < kPanelRegs; ++n) {
      __m512i wv = _mm512_load_si512(wp + 16 * n);
      asm("" : "+v"(wv));  // keep the weights in a register: otherwise GCC folds the load MR times
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], (__m512bh)xv[m], (__m512bh)wv);
    }
  }

  // The tiles read the rounded activations in place.
  static const uint16_t* load_block(const uint16_t* xb, int64_t /*rows*/, int64_t /*xs*/) {
    return xb;
  }
};

}  // namespace

void bf16_panels_avx512(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j_begin,
                        int64_t j_end, float* y, int64_t y_stride) {
  drive_panels(PanelTiles<Dpbf16Step, Bf16Contract::kPair>{w.pairs()}, xb, rows, w, j_begin, j_end, y,
               y_stride);
}

}  // namespace moe::kernels::detail

MOE_TARGET_REGION_END()
#endif

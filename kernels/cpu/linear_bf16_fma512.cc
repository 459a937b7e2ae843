// The bf16-compute linear on AVX-512F fp32 FMAs, with the bits of vdpbf16ps (the pair contract of
// dpbf16.h), and, in bf16_panels_fma512_tile, with the bits of AMX's tdpbf16ps (the tile contract of
// tile_bf16.h: the same fused steps in two chains per 16-pair block, then two adds, which MXCSR's DAZ/FTZ
// round as the contract does; the AMX kernel hands it products of few rows, which stream the weights faster
// this way).
//
// Why it gives the same bits: a lane of vdpbf16ps is two fused multiply-adds, odd pair first, each rounded
// once, with DAZ on every input and FTZ after rounding. The product of two bf16 numbers is exact in fp32, so
// an fp32 FMA of the widened operands, c = fma(x_odd, w_odd, c); c = fma(x_even, w_even, c), rounds the same
// exact value once; MXCSR's DAZ and FTZ (x86 detects tininess after rounding) give the contract's flushes,
// and x86's invalid result is the same default NaN. The kernel sets MXCSR to round-to-nearest + DAZ + FTZ
// while it runs and restores the caller's MXCSR after. One difference remains: when NaNs meet, an FMA returns
// the first NaN in its own operand order, not in the contract's (x, w, accumulator); so every output that
// comes out NaN is recomputed with the scalar emulation (NaN is sticky along a chain: an output that is not
// NaN never met one). tests/kernels_cpu_bf16_invariance_test checks this kernel against the emulation on the
// wide-range values (subnormals, tiny products, infinities, NaN payloads) bit for bit.
//
// Why it exists: on some CPUs with AVX512_BF16 (the Intel Xeon this was measured on: family 6 model 207)
// vdpbf16ps zmm runs at half the fp32 FMA rate in FLOP/s, so this kernel is the faster way to compute the
// same bits; it also serves AVX-512 CPUs without AVX512_BF16. linear_bf16.cc picks the faster one.
//
// NOTES: the register tile is the vdpbf16ps kernel's (linear_bf16_panel512.h: MR rows x one 64-output panel,
// 24 accumulators; drive_panels' loops); per pair the panel's 4 registers of packed (even, odd) words are
// split into w_even = dword << 16 and w_odd = dword & 0xffff0000 (exact widening), and each row's x values
// come as broadcast memory operands from a per-thread copy of the row block's x widened to fp32 (2 floats per
// pair: [2p] even, [2p + 1] odd).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/linear_bf16_driver.h"
#include "kernels/cpu/linear_bf16_kernel.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/tile_bf16.h"

#if MOE_HAVE_AVX512_BF16_TARGET
// Everything below is compiled for AVX512F. linear_bf16.cc calls it only when cpu_has_avx512f().
MOE_TARGET_REGION_BEGIN("avx512f")
// After the target region opens: its functions take this file's target (see the header).
#include "kernels/cpu/linear_bf16_panel512.h"  // NOLINT(build/include_order)

namespace moe::kernels::detail {
namespace {

// Round to nearest, every exception masked, DAZ (bit 6) and FTZ (bit 15).
constexpr unsigned kMxcsr = 0x1f80u | 0x0040u | 0x8000u;

// Two fp32 FMAs per pair on the exactly widened operands, odd first; the even and odd chains may be apart.
struct FmaStep {
  using Element = float;
  static constexpr bool kTwoChains = true;

  template <int MR>
  [[gnu::always_inline]] static void step(PanelAcc<MR>& even, PanelAcc<MR>& odd, const float* x, int64_t xs,
                                          int64_t p, const uint32_t* wp) {
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
#pragma GCC unroll 4
    for (int n = 0; n < kPanelRegs; ++n) {
      const __m512i wv = _mm512_load_si512(wp + 16 * n);
      const __m512 w_odd = _mm512_castsi512_ps(_mm512_and_si512(wv, high));
      const __m512 w_even = _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        const float* xr = x + m * xs + 2 * p;
        odd[m][n] = _mm512_fmadd_ps(_mm512_set1_ps(xr[1]), w_odd, odd[m][n]);
        even[m][n] = _mm512_fmadd_ps(_mm512_set1_ps(xr[0]), w_even, even[m][n]);
      }
    }
  }

  // The block's x widened to fp32 (exact), per thread; grows to the largest block, then is reused.
  static const float* load_block(const uint16_t* xb, int64_t rows, int64_t xs) {
    thread_local std::vector<float> buffer;
    const size_t n = static_cast<size_t>(rows * xs);
    if (buffer.size() < n) buffer.resize(n);
    for (size_t i = 0; i < n; ++i) buffer[i] = std::bit_cast<float>(static_cast<uint32_t>(xb[i]) << 16);
    return buffer.data();
  }
};

// NaN outputs: the contract's NaN (see the file comment), by the emulation. Not inlined, so that none of its
// arithmetic is scheduled before the caller's MXCSR is restored.
template <Bf16Contract C>
[[gnu::noinline]] void fix_nans(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j_begin,
                                int64_t j_end, float* y, int64_t y_stride) {
  const int64_t xs = 2 * w.pairs();
  const int64_t o_begin = j_begin * kBf16PanelOutputs, o_end = std::min(w.out(), j_end * kBf16PanelOutputs);
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * y_stride;
    for (int64_t o = o_begin; o < o_end; ++o) {
      if (std::isnan(yr[o])) yr[o] = emulated_output(C, xb + r * xs, w, o);
    }
  }
}

template <Bf16Contract C>
void panels(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j_begin, int64_t j_end,
            float* y, int64_t y_stride) {
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(kMxcsr);
  drive_panels(PanelTiles<FmaStep, C>{w.pairs()}, xb, rows, w, j_begin, j_end, y, y_stride);
  _mm_setcsr(saved);
  fix_nans<C>(xb, rows, w, j_begin, j_end, y, y_stride);
}

}  // namespace

void bf16_panels_fma512(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j_begin,
                        int64_t j_end, float* y, int64_t y_stride) {
  panels<Bf16Contract::kPair>(xb, rows, w, j_begin, j_end, y, y_stride);
}

void bf16_panels_fma512_tile(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j_begin,
                             int64_t j_end, float* y, int64_t y_stride) {
  panels<Bf16Contract::kTile>(xb, rows, w, j_begin, j_end, y, y_stride);
}

}  // namespace moe::kernels::detail

MOE_TARGET_REGION_END()
#endif

// The quantized linear's AVX-512 kernels (linear_quant.h's kAvx512): vpdpbusd / vpdpwssd (AVX512_VNNI) for
// the integer types on the packed panels of linear_quant_pack.h, 16 outputs a zmm; FP8 with vpermi2b
// (AVX512_VBMI: the e4m3 -> bf16 table) and vdpbf16ps (AVX512_BF16); and the int8 activation rule.
// Everything here runs the header's contract, so its bits are the portable emulation's (tested).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/bf16.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/linear_quant_pack.h"
#include "kernels/cpu/simd.h"  // first: <immintrin.h> (see simd.h)
#include "kernels/quant_formats.h"

#if MOE_HAVE_AVX512_BF16_TARGET
MOE_TARGET_REGION_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")

namespace moe::kernels::detail {
namespace {

struct Ops512 {
  using VI = __m512i;
  using VF = __m512;
  static VI load(const void* p) { return _mm512_load_si512(p); }
  static VI set1(int32_t v) { return _mm512_set1_epi32(v); }
  static VI zero() { return _mm512_setzero_si512(); }
  static VI dpbusd(VI acc, VI u8, int32_t s8x4) {
    return _mm512_dpbusd_epi32(acc, u8, _mm512_set1_epi32(s8x4));
  }
  static VI dpwssd(VI acc, VI w, int32_t x) { return _mm512_dpwssd_epi32(acc, w, _mm512_set1_epi32(x)); }
  static VI add(VI a, VI b) { return _mm512_add_epi32(a, b); }
  static VI sub(VI a, VI b) { return _mm512_sub_epi32(a, b); }
  static VI mullo(VI a, VI b) { return _mm512_mullo_epi32(a, b); }
  static VI and_(VI a, VI b) { return _mm512_and_si512(a, b); }
  static VI or_(VI a, VI b) { return _mm512_or_si512(a, b); }
  static VI srli16(VI a, int n) { return _mm512_srli_epi16(a, static_cast<unsigned>(n)); }
  static VI slli16(VI a, int n) { return _mm512_slli_epi16(a, static_cast<unsigned>(n)); }
  static VI srai(VI a, int n) { return _mm512_srai_epi32(a, static_cast<unsigned>(n)); }
  static VI shuffle(VI table, VI idx) { return _mm512_shuffle_epi8(table, idx); }
  static VI u8_to_i32(const void* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  }
  static VI s8_to_i32(const void* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  }
  static VI u8x2_to_i16x2(const void* p) {
    return _mm512_cvtepu8_epi16(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  }
  // 2^(e - 128): (e - 1) << 23 for e >= 2, the subnormals 2^-127 and 2^-128 (0x00200000 << e) below.
  static VI e8m0_scale(const void* p) {
    const VI e = u8_to_i32(p);
    const VI normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __mmask16 tiny = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    return _mm512_mask_sllv_epi32(normal, tiny, _mm512_set1_epi32(0x00200000), e);
  }
  static VF f16_to_f32(const void* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  }

  static VF cvt(VI a) { return _mm512_cvtepi32_ps(a); }
  static VF mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
  static VF fma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
  static VF set1f(float v) { return _mm512_set1_ps(v); }
  static VF zerof() { return _mm512_setzero_ps(); }
  static VF as_float(VI a) { return _mm512_castsi512_ps(a); }
  static void store(float* y, VF v, int n) {
    if (n == 16) {
      _mm512_storeu_ps(y, v);
    } else {
      _mm512_mask_storeu_ps(y, static_cast<__mmask16>((1u << n) - 1), v);
    }
  }
};

}  // namespace
}  // namespace moe::kernels::detail

#include "kernels/cpu/linear_quant_simd.h"

namespace moe::kernels::detail {
namespace {

// --- the int8 activation rule (linear_quant.h), 16 elements a vector ------------------------------------

void quantize_row_int8_avx512(int64_t block, const float* x, int64_t in, const QuantRowLayout& l,
                              std::byte* out) {
  auto* q = reinterpret_cast<int8_t*>(out + l.q);
  auto* dx = reinterpret_cast<float*>(out + l.dx);
  auto* bsum = reinterpret_cast<int16_t*>(out + l.bsum);
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 inf = _mm512_set1_ps(INFINITY);
  for (int64_t b = 0; b < in / block; ++b) {
    const float* xb = x + b * block;
    __m512 amax = _mm512_setzero_ps();
    __mmask16 nonfinite = 0;
    for (int64_t i = 0; i < block; i += 16) {
      const __m512 a = _mm512_and_ps(_mm512_loadu_ps(xb + i), abs_mask);
      // |x| >= inf or unordered (NaN): not finite.
      nonfinite |= _mm512_cmp_ps_mask(a, inf, _CMP_NLT_UQ);
      amax = _mm512_max_ps(amax, a);
    }
    const float m = _mm512_reduce_max_ps(amax);
    int8_t* qb = q + b * block;
    if (nonfinite != 0 || m == 0.0f) {
      dx[b] = nonfinite != 0 ? std::nanf("") : 0.0f;
      std::memset(qb, 0, static_cast<size_t>(block));
    } else {
      dx[b] = m / 127.0f;
      const __m512 inv = _mm512_set1_ps(127.0f / m);
      for (int64_t i = 0; i < block; i += 16) {
        // The product rounded to nearest even, then to the nearest integer, ties to even (MXCSR default).
        const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + i), inv));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + i), _mm512_cvtepi32_epi8(v));
      }
    }
  }
  // B_g: the sums of 16 codes.
  for (int64_t g = 0; g < in / 16; ++g) {
    const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * g)));
    bsum[g] = static_cast<int16_t>(_mm512_reduce_add_epi32(v));
  }
}

}  // namespace

void quant_panels_avx512_int8(const QuantPanels& w, const std::byte* xq, int64_t rows, int64_t j_begin,
                              int64_t j_end, float* y, int64_t y_stride) {
  quant_simd::run_int8<Ops512>(w, xq, rows, j_begin, j_end, y, y_stride);
}

void quantize_rows_avx512(QuantRule rule, const float* x, int64_t rows, int64_t x_stride, int64_t in,
                          std::byte* out) {
  const QuantRowLayout l = quant_row_layout(rule, in);
  const int64_t block = rule == QuantRule::kInt8Block256 ? 256 : 32;
  for (int64_t r = 0; r < rows; ++r)
    quantize_row_int8_avx512(block, x + r * x_stride, in, l, out + static_cast<size_t>(r) * l.stride);
}

}  // namespace moe::kernels::detail

MOE_TARGET_REGION_END()

// --- FP8: vpermi2b and vdpbf16ps (AVX512_VBMI + AVX512_BF16) ----------------------------------------------

MOE_TARGET_REGION_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16,fma")

namespace moe::kernels::detail {
namespace {

// The bf16 bits of the e4m3 magnitudes 0..127 (e4m3_to_f32, exact in bf16), split into low and high bytes
// for two 128-entry vpermi2b lookups.
struct Fp8Tables {
  alignas(64) uint8_t lo[128];
  alignas(64) uint8_t hi[128];
  Fp8Tables() {
    for (int m = 0; m < 128; ++m) {
      const uint16_t b = m == 0x7f ? 0 : f32_to_bf16(e4m3_to_f32(static_cast<uint8_t>(m)));  // 0x7f: refused
      lo[m] = static_cast<uint8_t>(b & 0xff);
      hi[m] = static_cast<uint8_t>(b >> 8);
    }
  }
};

// R rows x NP panels of one strip (panel k at panels + 64 k, its first n[k] outputs stored; `strip` the
// strip's start): one dependent vdpbf16ps chain per row, panel and scale block (the contract's P), so that
// R x NP chains are in flight.
template <int R, int NP>
void fp8_panels(const QuantPanels& p, const std::byte* strip, const std::byte* panels, const int* n,
                const std::byte* xb, size_t stride, float* y, int64_t y_stride) {
  static const Fp8Tables tables;
  const __m512i lo0 = _mm512_load_si512(tables.lo), lo1 = _mm512_load_si512(tables.lo + 64);
  const __m512i hi0 = _mm512_load_si512(tables.hi), hi1 = _mm512_load_si512(tables.hi + 64);
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  const auto pair = [&](int r, int64_t k) {  // row r's bf16 pair k, in every lane
    int32_t v;
    std::memcpy(&v, xb + static_cast<size_t>(r) * stride + 4 * static_cast<size_t>(k), 4);
    return (__m512bh)_mm512_set1_epi32(v);
  };
  // The bf16 pairs of a step's two pairs: 16 outputs each, pair-interleaved.
  const auto widen = [&](const std::byte* ws, __m512bh* w0, __m512bh* w1) {
    const __m512i codes = _mm512_load_si512(ws);
    const __m512i lo = _mm512_permutex2var_epi8(lo0, codes, lo1);
    // The high byte with the code's sign bit: hi | (codes & 0x80).
    const __m512i hi =
        _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, codes, hi1), codes, sign, 0xf8);
    *w0 = (__m512bh)_mm512_unpacklo_epi8(lo, hi);
    *w1 = (__m512bh)_mm512_unpackhi_epi8(lo, hi);
  };
  __m512 acc[NP][R];
#pragma GCC unroll 16
  for (int k = 0; k < NP; ++k) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[k][r] = _mm512_setzero_ps();
  }
  const size_t step_stride = p.fp8_step_stride();
  StreamPrefetch prefetch(strip);
  for (int64_t c = 0; c < p.scale_blocks; ++c) {
    const int64_t p0 = c * p.block_pairs, np = std::min(p.pairs, p0 + p.block_pairs) - p0;
    const size_t group = static_cast<size_t>(c) * p.group_bytes;
    __m512 dot[NP][R];
#pragma GCC unroll 16
    for (int k = 0; k < NP; ++k) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) dot[k][r] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < np; i += 2) {
      const size_t step = group + static_cast<size_t>(i / 2) * step_stride;
      prefetch.through(strip + step + step_stride);
#pragma GCC unroll 16
      for (int k = 0; k < NP; ++k) {
        __m512bh w0, w1;
        widen(panels + 64 * k + step, &w0, &w1);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) dot[k][r] = _mm512_dpbf16_ps(dot[k][r], pair(r, p0 + i), w0);
        if (i + 1 < np) {
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) dot[k][r] = _mm512_dpbf16_ps(dot[k][r], pair(r, p0 + i + 1), w1);
        }
      }
    }
#pragma GCC unroll 16
    for (int k = 0; k < NP; ++k) {
      const __m512 scale =
          _mm512_load_ps(reinterpret_cast<const float*>(panels + 64 * k + group + p.fp8_scales_offset()));
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[k][r] = _mm512_fmadd_ps(dot[k][r], scale, acc[k][r]);
    }
  }
#pragma GCC unroll 16
  for (int k = 0; k < NP; ++k) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      float* yr = y + r * y_stride + k * kQuantPanelOutputs;
      if (n[k] == 16) {
        _mm512_storeu_ps(yr, acc[k][r]);
      } else {
        _mm512_mask_storeu_ps(yr, static_cast<__mmask16>((1u << n[k]) - 1), acc[k][r]);
      }
    }
  }
}

// Rows [0, rows) (at xb) of panels [j0, j1): NP panels of a strip at a time where the range allows (NP
// divides the strip's panels, so they share it), then fewer.
template <int R, int NP>
void fp8_rows(const QuantPanels& p, int64_t j0, int64_t j1, const std::byte* xb, size_t stride, float* y,
              int64_t y_stride) {
  static_assert(kFp8StripPanels % NP == 0);
  int n[NP];
  const auto count = [&](int64_t jj) {
    return static_cast<int>(std::min<int64_t>(kQuantPanelOutputs, p.out - jj * kQuantPanelOutputs));
  };
  for (int64_t j = j0; j < j1;) {
    if constexpr (NP > 1) {
      if (j % NP == 0 && j + NP <= j1) {
        for (int k = 0; k < NP; ++k) n[k] = count(j + k);
        fp8_panels<R, NP>(p, p.strip_of(j), p.panel(j), n, xb, stride, y + j * kQuantPanelOutputs, y_stride);
        j += NP;
        continue;
      }
    }
    n[0] = count(j);
    fp8_panels<R, 1>(p, p.strip_of(j), p.panel(j), n, xb, stride, y + j * kQuantPanelOutputs, y_stride);
    ++j;
  }
}

}  // namespace

void quant_panels_avx512_fp8(const QuantPanels& w, const std::byte* xq, int64_t rows, int64_t j_begin,
                             int64_t j_end, float* y, int64_t y_stride) {
  // Row groups of 4 over pairs of panels (8 chains); a remaining row over 4 panels at a time.
  const size_t stride = quant_row_layout(QuantRule::kBf16, w.in).stride;
  for (int64_t r0 = 0; r0 < rows; r0 += quant_simd::kChunkRows) {
    const int64_t nr = std::min(quant_simd::kChunkRows, rows - r0);
    int64_t r = r0;
    for (; r + 4 <= r0 + nr; r += 4)
      fp8_rows<4, 2>(w, j_begin, j_end, xq + static_cast<size_t>(r) * stride, stride, y + r * y_stride,
                     y_stride);
    for (; r < r0 + nr; ++r)
      fp8_rows<1, 4>(w, j_begin, j_end, xq + static_cast<size_t>(r) * stride, stride, y + r * y_stride,
                     y_stride);
  }
}

}  // namespace moe::kernels::detail

MOE_TARGET_REGION_END()

namespace moe::kernels::detail {

bool quant_avx512_built() {
  return true;
}

void quant_panels_avx512(const QuantPanels& w, const std::byte* xq, int64_t rows, int64_t j_begin,
                         int64_t j_end, float* y, int64_t y_stride) {
  if (w.type == DType::kFP8) {
    quant_panels_avx512_fp8(w, xq, rows, j_begin, j_end, y, y_stride);
  } else {
    quant_panels_avx512_int8(w, xq, rows, j_begin, j_end, y, y_stride);
  }
}

}  // namespace moe::kernels::detail

#else  // no AVX-512 target in this compiler

namespace moe::kernels::detail {
bool quant_avx512_built() {
  return false;
}
void quant_panels_avx512(const QuantPanels&, const std::byte*, int64_t, int64_t, int64_t, float*, int64_t) {}
void quantize_rows_avx512(QuantRule, const float*, int64_t, int64_t, int64_t, std::byte*) {}
}  // namespace moe::kernels::detail

#endif

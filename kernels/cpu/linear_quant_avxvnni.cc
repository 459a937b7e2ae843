// The quantized linear's AVX-VNNI kernels (linear_quant.h's kAvxVnni: CPUs with the VEX-encoded vpdpbusd
// and no AVX-512, e.g. Alder Lake and later client cores): the kernels of linear_quant_simd.h with the 16
// outputs of a panel in two ymm registers, on the same packed panels as the AVX-512 kernels. FP8 has no
// 256-bit bf16 dot product: it runs the portable emulation (pack_quant packs nothing for it).

#include <algorithm>  // linear_quant_simd.h's, included here before the target region (clang: a std function
#include <cstddef>    // declared again inside it would take the region's attribute after its definition)
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/linear_quant_pack.h"
#include "kernels/cpu/simd.h"  // first: <immintrin.h> (see simd.h)

#if MOE_HAVE_AVX512_BF16_TARGET
MOE_TARGET_REGION_BEGIN("avx2,fma,f16c,avxvnni")

namespace moe::kernels::detail {
namespace {

struct Ops256x2 {
  struct VI {
    __m256i a, b;  // lanes 0-7, 8-15
  };
  struct VF {
    __m256 a, b;
  };
  static __m256i lo256(const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p)); }
  static __m256i hi256(const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p) + 1); }
  static VI load(const void* p) { return {lo256(p), hi256(p)}; }
  static VI set1(int32_t v) { return {_mm256_set1_epi32(v), _mm256_set1_epi32(v)}; }
  static VI zero() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
  static VI dpbusd(VI acc, VI u8, int32_t s8x4) {
    const __m256i x = _mm256_set1_epi32(s8x4);
    return {_mm256_dpbusd_avx_epi32(acc.a, u8.a, x), _mm256_dpbusd_avx_epi32(acc.b, u8.b, x)};
  }
  static VI dpwssd(VI acc, VI w, int32_t v) {
    const __m256i x = _mm256_set1_epi32(v);
    return {_mm256_dpwssd_avx_epi32(acc.a, w.a, x), _mm256_dpwssd_avx_epi32(acc.b, w.b, x)};
  }
  static VI add(VI x, VI y) { return {_mm256_add_epi32(x.a, y.a), _mm256_add_epi32(x.b, y.b)}; }
  static VI sub(VI x, VI y) { return {_mm256_sub_epi32(x.a, y.a), _mm256_sub_epi32(x.b, y.b)}; }
  static VI mullo(VI x, VI y) { return {_mm256_mullo_epi32(x.a, y.a), _mm256_mullo_epi32(x.b, y.b)}; }
  static VI and_(VI x, VI y) { return {_mm256_and_si256(x.a, y.a), _mm256_and_si256(x.b, y.b)}; }
  static VI or_(VI x, VI y) { return {_mm256_or_si256(x.a, y.a), _mm256_or_si256(x.b, y.b)}; }
  static VI srli16(VI x, int n) { return {_mm256_srli_epi16(x.a, n), _mm256_srli_epi16(x.b, n)}; }
  static VI slli16(VI x, int n) { return {_mm256_slli_epi16(x.a, n), _mm256_slli_epi16(x.b, n)}; }
  static VI srai(VI x, int n) { return {_mm256_srai_epi32(x.a, n), _mm256_srai_epi32(x.b, n)}; }
  static VI shuffle(VI t, VI i) { return {_mm256_shuffle_epi8(t.a, i.a), _mm256_shuffle_epi8(t.b, i.b)}; }
  static __m128i bytes8(const void* p, int half) {
    int64_t v;
    std::memcpy(&v, static_cast<const char*>(p) + 8 * half, 8);
    return _mm_cvtsi64_si128(v);
  }
  static VI u8_to_i32(const void* p) {
    return {_mm256_cvtepu8_epi32(bytes8(p, 0)), _mm256_cvtepu8_epi32(bytes8(p, 1))};
  }
  static VI s8_to_i32(const void* p) {
    return {_mm256_cvtepi8_epi32(bytes8(p, 0)), _mm256_cvtepi8_epi32(bytes8(p, 1))};
  }
  static VI u8x2_to_i16x2(const void* p) {
    const auto* q = static_cast<const __m128i*>(p);
    return {_mm256_cvtepu8_epi16(_mm_loadu_si128(q)), _mm256_cvtepu8_epi16(_mm_loadu_si128(q + 1))};
  }
  // 2^(e - 128) (e8m0_half_to_f32): (e - 1) << 23 for e >= 2, 0x00200000 << e below.
  static __m256i e8m0_half(__m256i e) {
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i is_tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_blendv_epi8(normal, tiny, is_tiny);
  }
  static VI e8m0_scale(const void* p) {
    const VI e = u8_to_i32(p);
    return {e8m0_half(e.a), e8m0_half(e.b)};
  }
  static VF f16_to_f32(const void* p) {
    const auto* q = static_cast<const __m128i*>(p);
    return {_mm256_cvtph_ps(_mm_loadu_si128(q)), _mm256_cvtph_ps(_mm_loadu_si128(q + 1))};
  }
  static VF cvt(VI x) { return {_mm256_cvtepi32_ps(x.a), _mm256_cvtepi32_ps(x.b)}; }
  static VF mul(VF x, VF y) { return {_mm256_mul_ps(x.a, y.a), _mm256_mul_ps(x.b, y.b)}; }
  static VF fma(VF x, VF y, VF z) { return {_mm256_fmadd_ps(x.a, y.a, z.a), _mm256_fmadd_ps(x.b, y.b, z.b)}; }
  static VF set1f(float v) { return {_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
  static VF zerof() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static VF as_float(VI x) { return {_mm256_castsi256_ps(x.a), _mm256_castsi256_ps(x.b)}; }
  static void store(float* y, VF v, int n) {
    if (n == 16) {
      _mm256_storeu_ps(y, v.a);
      _mm256_storeu_ps(y + 8, v.b);
      return;
    }
    alignas(32) float t[16];
    _mm256_store_ps(t, v.a);
    _mm256_store_ps(t + 8, v.b);
    std::memcpy(y, t, static_cast<size_t>(n) * sizeof(float));
  }
};

}  // namespace
}  // namespace moe::kernels::detail

#include "kernels/cpu/linear_quant_simd.h"

namespace moe::kernels::detail {

void quant_panels_avxvnni(const QuantPanels& w, const std::byte* xq, int64_t rows, int64_t j_begin,
                          int64_t j_end, float* y, int64_t y_stride) {
  quant_simd::run_int8<Ops256x2>(w, xq, rows, j_begin, j_end, y, y_stride);
}

}  // namespace moe::kernels::detail

MOE_TARGET_REGION_END()

namespace moe::kernels::detail {
bool quant_avxvnni_built() {
  return true;
}
}  // namespace moe::kernels::detail

#else

namespace moe::kernels::detail {
bool quant_avxvnni_built() {
  return false;
}
void quant_panels_avxvnni(const QuantPanels&, const std::byte*, int64_t, int64_t, int64_t, float*, int64_t) {}
}  // namespace moe::kernels::detail

#endif

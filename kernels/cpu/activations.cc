#include "kernels/cpu/activations.h"

#include <bit>
#include <climits>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

#include "kernels/activation_rules.h"
#include "kernels/cpu/simd.h"

namespace moe::kernels {
namespace {

// NOTES: the vector and scalar forms below must perform the same IEEE operations in the same order:
// any edit goes into both, and kernels_cpu_activations_test checks their bits agree.
//
// exp(x) = 2^n * p(r), n = round(x / ln 2), r = x - n ln2 (two-step Cody-Waite), p the Cephes
// polynomial. The scale 2^n is applied as two normal powers 2^(n>>1) and 2^(n - (n>>1)), so overflow
// gives inf and underflow rounds gradually, as IEEE does. Inputs are clamped to [-104, 89] first
// (exp is 0 below and inf above in fp32 anyway); NaN is passed through at the end.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: (v + magic) - magic rounds to nearest even
constexpr float kClampLo = -104.0f;
constexpr float kClampHi = 89.0f;
constexpr float kP0 = 1.9875691500e-4f;
constexpr float kP1 = 1.3981999507e-3f;
constexpr float kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f;
constexpr float kP4 = 1.6666665459e-1f;
constexpr float kP5 = 5.0000001201e-1f;
constexpr float kGeluC = 0.044715f;
constexpr float kGeluMinus2SqrtTwoOverPi = -1.5957691216057308f;  // -2 * sqrt(2 / pi)

inline float pow2i(int32_t e) {
  return std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
}

inline float exp_scalar(float x_in) {
  float x = x_in < kClampLo ? kClampLo : x_in;  // NaN compares false: stays NaN here, fixed below
  x = x > kClampHi ? kClampHi : x;
  const float n = (x * kLog2e + kRoundMagic) - kRoundMagic;
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = kP0;
  p = std::fma(p, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  const float r2 = r * r;
  float y = std::fma(p, r2, r);
  y = y + 1.0f;
  const int32_t ni = x_in != x_in ? 0 : static_cast<int32_t>(n);
  const int32_t e1 = ni >> 1;
  const int32_t e2 = ni - e1;
  y = (y * pow2i(e1)) * pow2i(e2);
  return x_in != x_in ? x_in + x_in : y;
}

inline float silu_scalar(float x) {
  return x / (1.0f + exp_scalar(-x));
}

inline float gelu_scalar(float x) {
  const float x3 = (x * x) * x;
  const float inner = x + kGeluC * x3;
  return x / (1.0f + exp_scalar(kGeluMinus2SqrtTwoOverPi * inner));
}

inline float clamped_swiglu_scalar(float gate, float up, float alpha, float limit) {
  return rules::clamped_swiglu(gate, up, alpha, limit, exp_scalar);
}

#if defined(__AVX512F__)
inline __m512 exp_vec(__m512 x_in) {
  const __mmask16 is_nan = _mm512_cmp_ps_mask(x_in, x_in, _CMP_UNORD_Q);
  // Same clamps as the scalar form for non-NaN lanes; NaN lanes are replaced by x + x at the end.
  __m512 x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x_in, _mm512_set1_ps(kClampLo), _CMP_LT_OQ), x_in,
                                  _mm512_set1_ps(kClampLo));
  x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kClampHi), _CMP_GT_OQ), x,
                           _mm512_set1_ps(kClampHi));
  const __m512 magic = _mm512_set1_ps(kRoundMagic);
  const __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), magic), magic);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Hi), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
  const __m512 r2 = _mm512_mul_ps(r, r);
  __m512 y = _mm512_fmadd_ps(p, r2, r);
  y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
  const __m512i ni = _mm512_maskz_cvttps_epi32(static_cast<__mmask16>(~is_nan), n);
  const __m512i e1 = _mm512_srai_epi32(ni, 1);
  const __m512i e2 = _mm512_sub_epi32(ni, e1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e2, bias), 23));
  y = _mm512_mul_ps(_mm512_mul_ps(y, s1), s2);
  return _mm512_mask_blend_ps(is_nan, y, _mm512_add_ps(x_in, x_in));
}

inline __m512 silu_vec(__m512 x) {
  const __m512 minus_x =
      _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
  const __m512 e = exp_vec(minus_x);
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// rules::clamped_swiglu lane by lane: min/max take the second operand when either is NaN, so a NaN gate or up
// passes through as in the rule's comparisons.
inline __m512 clamped_swiglu_vec(__m512 gate, __m512 up, __m512 alpha, __m512 limit) {
  const __m512 g = _mm512_min_ps(limit, gate);
  const __m512 minus_limit =
      _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(limit), _mm512_set1_epi32(INT32_MIN)));
  const __m512 u = _mm512_min_ps(limit, _mm512_max_ps(minus_limit, up));
  const __m512 ag = _mm512_mul_ps(alpha, g);
  const __m512 minus_ag =
      _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(ag), _mm512_set1_epi32(INT32_MIN)));
  const __m512 glu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_vec(minus_ag)));
  return _mm512_mul_ps(_mm512_add_ps(u, _mm512_set1_ps(1.0f)), glu);
}

inline __m512 gelu_vec(__m512 x) {
  const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 inner = _mm512_add_ps(x, _mm512_mul_ps(_mm512_set1_ps(kGeluC), x3));
  const __m512 e = exp_vec(_mm512_mul_ps(_mm512_set1_ps(kGeluMinus2SqrtTwoOverPi), inner));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}
#endif

void check(const void* p, int64_t n, const char* fn, const char* arg) {
  if (n < 0) throw std::invalid_argument(std::string(fn) + ": n (" + std::to_string(n) + ") is negative");
  if (p == nullptr && n > 0) {
    throw std::invalid_argument(std::string(fn) + ": " + arg + " is null with n = " + std::to_string(n));
  }
}

template <class VecFn, class ScalarFn>
void unary(const float* in, float* out, int64_t n, VecFn vec, ScalarFn scalar) {
#if defined(__AVX512F__)
  (void)scalar;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, vec(_mm512_loadu_ps(in + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(out + i, m, vec(_mm512_maskz_loadu_ps(m, in + i)));
  }
#else
  (void)vec;
  for (int64_t i = 0; i < n; ++i) out[i] = scalar(in[i]);
#endif
}

}  // namespace

float exp_portable(float x) {
  return exp_scalar(x);
}
float silu_portable(float x) {
  return silu_scalar(x);
}
float gelu_portable(float x) {
  return gelu_scalar(x);
}
float clamped_swiglu_portable(float gate, float up, float alpha, float limit) {
  return clamped_swiglu_scalar(gate, up, alpha, limit);
}

double clamped_swiglu_f64(double gate, double up, double alpha, double limit) {
  const double g = gate > limit ? limit : gate;
  const double u = up < -limit ? -limit : (up > limit ? limit : up);
  return (u + 1.0) * g / (1.0 + std::exp(-alpha * g));
}

double silu_f64(double x) {
  return x / (1.0 + std::exp(-x));
}
double gelu_f64(double x) {
  // 0.5 x (1 + tanh(u)) written as x sigmoid(2u): the same function, without the cancellation of
  // 1 + tanh(u) for x << 0 (where the tanh form returns 0 for a result that is still ~1e-30).
  const double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  return x / (1.0 + std::exp(-2.0 * u));
}

void silu(const float* in, float* out, int64_t n) {
  check(in, n, "silu", "in");
  check(out, n, "silu", "out");
#if defined(__AVX512F__)
  unary(
      in, out, n, [](__m512 v) { return silu_vec(v); }, silu_scalar);
#else
  unary(in, out, n, 0, silu_scalar);
#endif
}

void gelu(const float* in, float* out, int64_t n) {
  check(in, n, "gelu", "in");
  check(out, n, "gelu", "out");
#if defined(__AVX512F__)
  unary(
      in, out, n, [](__m512 v) { return gelu_vec(v); }, gelu_scalar);
#else
  unary(in, out, n, 0, gelu_scalar);
#endif
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  check(gate, n, "swiglu", "gate");
  check(up, n, "swiglu", "up");
  check(out, n, "swiglu", "out");
#if defined(__AVX512F__)
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, _mm512_mul_ps(silu_vec(_mm512_loadu_ps(gate + i)), _mm512_loadu_ps(up + i)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(m, up + i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(silu_vec(g), u));
  }
#else
  for (int64_t i = 0; i < n; ++i) out[i] = silu_scalar(gate[i]) * up[i];
#endif
}

void clamped_swiglu(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit) {
  check(gate, n, "clamped_swiglu", "gate");
  check(up, n, "clamped_swiglu", "up");
  check(out, n, "clamped_swiglu", "out");
#if defined(__AVX512F__)
  const __m512 va = _mm512_set1_ps(alpha), vl = _mm512_set1_ps(limit);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, clamped_swiglu_vec(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i), va, vl));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(m, up + i);
    _mm512_mask_storeu_ps(out + i, m, clamped_swiglu_vec(g, u, va, vl));
  }
#else
  for (int64_t i = 0; i < n; ++i) out[i] = clamped_swiglu_scalar(gate[i], up[i], alpha, limit);
#endif
}

}  // namespace moe::kernels

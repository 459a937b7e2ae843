#include "moe/model/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_features.h"

namespace moe::model {

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * inv) * weight[i];
}

void rms_norm_reference_f64(const float* x, const float* weight, int64_t n, double eps, double* y) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<double>(x[i]) * inv * weight[i];
}

void rope_angles(uint32_t position, int head_dim, float theta, float* cos, float* sin) {
  for (int i = 0; i < head_dim / 2; ++i) {
    const double angle =
        static_cast<double>(position) * std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
    cos[i] = static_cast<float>(std::cos(angle));
    sin[i] = static_cast<float>(std::sin(angle));
  }
}

void rotate_rope(float* row, int num_heads, int head_dim, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int h = 0; h < num_heads; ++h) {
    float* x = row + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const float a = x[i];
      const float b = x[i + half];
      x[i] = a * cos[i] - b * sin[i];
      x[i + half] = b * cos[i] + a * sin[i];
    }
  }
}

void apply_rope(float* row, int num_heads, int head_dim, uint32_t position, float theta) {
  std::vector<float> cos(static_cast<size_t>(head_dim / 2)), sin(static_cast<size_t>(head_dim / 2));
  rope_angles(position, head_dim, theta, cos.data(), sin.data());
  rotate_rope(row, num_heads, head_dim, cos.data(), sin.data());
}

void apply_rope_reference_f64(double* row, int num_heads, int head_dim, uint32_t position, double theta) {
  const int half = head_dim / 2;
  for (int h = 0; h < num_heads; ++h) {
    double* x = row + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const double angle = static_cast<double>(position) * std::pow(theta, -2.0 * i / head_dim);
      const double a = x[i];
      const double b = x[i + half];
      x[i] = a * std::cos(angle) - b * std::sin(angle);
      x[i + half] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
}

namespace {

// The contract's operations for one head, key by key and element by element in the written order: scores
// scratch[j] = (q_h . k_j,h) * scale (dot product from 0.0f, i ascending), then the softmax-weighted sum of
// the values. The vector path below performs the same operations on independent lanes (eight keys' dot
// products side by side; eight output elements side by side), so its bits are these.
void head_scores(const float* qh, const float* keys, int64_t width, int64_t first, int64_t end, int head_dim,
                 float scale, float* scratch) {
  for (int64_t j = first; j < end; ++j) {
    const float* kh = keys + j * width;
    float dot = 0.0f;
    for (int i = 0; i < head_dim; ++i) dot += qh[i] * kh[i];
    scratch[j] = dot * scale;
  }
}

void head_output(const float* values, int64_t width, int64_t num_keys, int head_dim, float max_score,
                 const float* scratch, float* oh) {
  for (int i = 0; i < head_dim; ++i) oh[i] = 0.0f;
  float sum = 0.0f;
  for (int64_t j = 0; j < num_keys; ++j) {
    const float p = std::exp(scratch[j] - max_score);
    sum += p;
    const float* vh = values + j * width;
    for (int i = 0; i < head_dim; ++i) oh[i] += p * vh[i];
  }
  const float inv = 1.0f / sum;
  for (int i = 0; i < head_dim; ++i) oh[i] *= inv;
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define MOE_MODEL_HAVE_AVX2_PATH 1

bool cpu_has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

MOE_TARGET_REGION_BEGIN("avx2")

// Element i0 + n of eight keys' head slices (rows k, k + width, ..., k + 7 width) in lane order: the 8 x 8
// block at column i0 transposed in registers, c[n] = (k_0[i0 + n], ..., k_7[i0 + n]).
inline void transpose8(const float* k, int64_t width, int i0, __m256 c[8]) {
  const __m256 r0 = _mm256_loadu_ps(k + 0 * width + i0), r1 = _mm256_loadu_ps(k + 1 * width + i0);
  const __m256 r2 = _mm256_loadu_ps(k + 2 * width + i0), r3 = _mm256_loadu_ps(k + 3 * width + i0);
  const __m256 r4 = _mm256_loadu_ps(k + 4 * width + i0), r5 = _mm256_loadu_ps(k + 5 * width + i0);
  const __m256 r6 = _mm256_loadu_ps(k + 6 * width + i0), r7 = _mm256_loadu_ps(k + 7 * width + i0);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  c[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  c[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  c[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  c[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  c[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  c[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  c[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  c[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// head_scores for keys [0, num_keys - num_keys % 8) with head_dim % 8 == 0: eight keys per vector (lane l
// accumulates key j + l's dot product over i ascending, one multiply and one add per element - no FMA:
// -ffp-contract=off - as the scalar loop does), `kBlocks` vectors of keys side by side so that their sums'
// latencies overlap; the rest of the keys go through the scalar loop.
template <int kBlocks>
void key_blocks_avx2(const float* qh, const float* k, int64_t width, int head_dim, __m256 scale, float* out) {
  __m256 acc[kBlocks];
  for (int b = 0; b < kBlocks; ++b) acc[b] = _mm256_setzero_ps();
  for (int i0 = 0; i0 < head_dim; i0 += 8) {
    for (int b = 0; b < kBlocks; ++b) {
      __m256 c[8];
      transpose8(k + 8 * b * width, width, i0, c);
      for (int n = 0; n < 8; ++n)
        acc[b] = _mm256_add_ps(acc[b], _mm256_mul_ps(_mm256_set1_ps(qh[i0 + n]), c[n]));
    }
  }
  for (int b = 0; b < kBlocks; ++b) _mm256_storeu_ps(out + 8 * b, _mm256_mul_ps(acc[b], scale));
}

void head_scores_avx2(const float* qh, const float* keys, int64_t width, int64_t num_keys, int head_dim,
                      float scale, float* scratch) {
  const __m256 scale8 = _mm256_set1_ps(scale);
  int64_t j = 0;
  for (; j + 32 <= num_keys; j += 32)
    key_blocks_avx2<4>(qh, keys + j * width, width, head_dim, scale8, scratch + j);
  for (; j + 8 <= num_keys; j += 8)
    key_blocks_avx2<1>(qh, keys + j * width, width, head_dim, scale8, scratch + j);
  head_scores(qh, keys, width, j, num_keys, head_dim, scale, scratch);
}

// head_output with head_dim % 8 == 0: first the weights p_j (and their sum, j ascending) into scratch, then
// the output in blocks of up to 64 elements held in eight registers over all j - element i accumulated over
// j ascending, as in the scalar loop.
void head_output_avx2(const float* values, int64_t width, int64_t num_keys, int head_dim, float max_score,
                      float* scratch, float* oh) {
  float sum = 0.0f;
  for (int64_t j = 0; j < num_keys; ++j) {
    scratch[j] = std::exp(scratch[j] - max_score);
    sum += scratch[j];
  }
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  for (int i0 = 0; i0 < head_dim; i0 += 64) {
    const int vectors = std::min(64, head_dim - i0) / 8;
    __m256 acc[8];
    for (int n = 0; n < 8; ++n) acc[n] = _mm256_setzero_ps();
    const float* v = values + i0;
    if (vectors == 8) {
      for (int64_t j = 0; j < num_keys; ++j, v += width) {
        const __m256 p = _mm256_set1_ps(scratch[j]);
        for (int n = 0; n < 8; ++n)
          acc[n] = _mm256_add_ps(acc[n], _mm256_mul_ps(p, _mm256_loadu_ps(v + 8 * n)));
      }
    } else {
      for (int64_t j = 0; j < num_keys; ++j, v += width) {
        const __m256 p = _mm256_set1_ps(scratch[j]);
        for (int n = 0; n < vectors; ++n) {
          acc[n] = _mm256_add_ps(acc[n], _mm256_mul_ps(p, _mm256_loadu_ps(v + 8 * n)));
        }
      }
    }
    for (int n = 0; n < vectors; ++n) _mm256_storeu_ps(oh + i0 + 8 * n, _mm256_mul_ps(acc[n], inv));
  }
}

MOE_TARGET_REGION_END()
#else
#define MOE_MODEL_HAVE_AVX2_PATH 0
#endif

}  // namespace

void attention_row(const float* q, const float* keys, const float* values, int64_t num_keys, int num_heads,
                   int head_dim, float* out, float* scratch) {
  const int64_t width = static_cast<int64_t>(num_heads) * head_dim;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
#if MOE_MODEL_HAVE_AVX2_PATH
  const bool vector = head_dim % 8 == 0 && cpu_has_avx2();
#else
  const bool vector = false;
#endif
  for (int h = 0; h < num_heads; ++h) {
    const int64_t offset = static_cast<int64_t>(h) * head_dim;
    const float* qh = q + offset;
    float* oh = out + offset;
#if MOE_MODEL_HAVE_AVX2_PATH
    if (vector) {
      head_scores_avx2(qh, keys + offset, width, num_keys, head_dim, scale, scratch);
    } else {
      head_scores(qh, keys + offset, width, 0, num_keys, head_dim, scale, scratch);
    }
#else
    head_scores(qh, keys + offset, width, 0, num_keys, head_dim, scale, scratch);
#endif
    float max_score = -INFINITY;
    for (int64_t j = 0; j < num_keys; ++j) {
      if (scratch[j] > max_score) max_score = scratch[j];
    }
#if MOE_MODEL_HAVE_AVX2_PATH
    if (vector) {
      head_output_avx2(values + offset, width, num_keys, head_dim, max_score, scratch, oh);
      continue;
    }
#endif
    head_output(values + offset, width, num_keys, head_dim, max_score, scratch, oh);
  }
}

void attention_row_reference_f64(const double* q, const double* keys, const double* values, int64_t num_keys,
                                 int num_heads, int head_dim, double* out) {
  const int64_t width = static_cast<int64_t>(num_heads) * head_dim;
  std::vector<double> s(static_cast<size_t>(num_keys));
  for (int h = 0; h < num_heads; ++h) {
    double max_score = -INFINITY;
    for (int64_t j = 0; j < num_keys; ++j) {
      double dot = 0.0;
      for (int i = 0; i < head_dim; ++i) dot += q[h * head_dim + i] * keys[j * width + h * head_dim + i];
      s[j] = dot / std::sqrt(static_cast<double>(head_dim));
      max_score = std::max(max_score, s[j]);
    }
    double sum = 0.0;
    for (int64_t j = 0; j < num_keys; ++j) sum += std::exp(s[j] - max_score);
    for (int i = 0; i < head_dim; ++i) {
      double acc = 0.0;
      for (int64_t j = 0; j < num_keys; ++j)
        acc += std::exp(s[j] - max_score) * values[j * width + h * head_dim + i];
      out[h * head_dim + i] = acc / sum;
    }
  }
}

}  // namespace moe::model

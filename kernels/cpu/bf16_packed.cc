#include "kernels/cpu/bf16_packed.h"

#include <algorithm>

#include "kernels/bf16.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/simd.h"

namespace moe::kernels {
namespace {

uint16_t weight_bits(const MatrixView& w, int64_t o, int64_t i) {
  if (w.dtype == DType::kBF16) return static_cast<const uint16_t*>(w.data)[o * w.row_stride + i];
  return f32_to_bf16(static_cast<const float*>(w.data)[o * w.row_stride + i]);
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
// f32_to_bf16 on 16 lanes: (u + 0x7fff + lsb) >> 16, NaN -> (u >> 16) | 0x40.
inline __m256i round16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}
#endif

}  // namespace

PackedBf16Weights::PackedBf16Weights(const MatrixView& w) {
  validate_weights(w, "PackedBf16Weights: w");
  out_ = w.rows;
  in_ = w.cols;
  const size_t words = static_cast<size_t>(panels() * panel_pairs() * kBf16PanelOutputs);
  data_ = WeightBuffer(words * 4);
  const int64_t np = pairs(), rows = panel_pairs();
  for (int64_t j = 0; j < panels(); ++j) {
    uint32_t* dst = reinterpret_cast<uint32_t*>(data_.data()) + j * rows * kBf16PanelOutputs;
    for (int64_t p = 0; p < rows; ++p) {
      for (int64_t c = 0; c < kBf16PanelOutputs; ++c) {
        const int64_t o = j * kBf16PanelOutputs + c;
        uint32_t v = 0;
        if (o < out_ && p < np) {
          const uint32_t lo = weight_bits(w, o, 2 * p);
          const uint32_t hi = 2 * p + 1 < in_ ? weight_bits(w, o, 2 * p + 1) : 0u;
          v = lo | (hi << 16);
        }
        dst[p * kBf16PanelOutputs + c] = v;
      }
    }
  }
}

uint16_t PackedBf16Weights::at(int64_t o, int64_t i) const {
  if (o < 0 || i < 0 || o >= panels() * kBf16PanelOutputs || i >= 2 * pairs()) return 0;
  const uint32_t v = panel(o / kBf16PanelOutputs)[(i / 2) * kBf16PanelOutputs + o % kBf16PanelOutputs];
  return static_cast<uint16_t>(i % 2 == 0 ? v & 0xffffu : v >> 16);
}

void round_to_bf16_span(const float* x, int64_t count, uint16_t* xb) {
  int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  for (; i + 16 <= count; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xb + i), round16(_mm512_loadu_ps(x + i)));
  }
  if (i < count) {
    const __mmask16 m = static_cast<__mmask16>((1u << (count - i)) - 1u);
    _mm256_mask_storeu_epi16(xb + i, m, round16(_mm512_maskz_loadu_ps(m, x + i)));
    i = count;
  }
#endif
  for (; i < count; ++i) xb[i] = f32_to_bf16(x[i]);
}

void round_rows_to_bf16(const float* x, int64_t rows, int64_t x_stride, int64_t in, uint16_t* xb,
                        ThreadPool& pool) {
  const int64_t row_len = 2 * bf16_pairs(in);
  const auto do_rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      round_to_bf16_span(x + r * x_stride, in, xb + r * row_len);
      if (row_len > in) xb[r * row_len + in] = 0;
    }
  };
  // Small batches: the conversion is a few microseconds at most, not worth waking the pool.
  if (rows * in < (int64_t{1} << 16) || pool.num_threads() == 1) {
    do_rows(0, rows);
    return;
  }
  const int tasks = static_cast<int>(std::min<int64_t>(pool.num_threads(), rows));
  pool.parallel_for(tasks, [&](int64_t task, int) {
    int64_t r0 = 0, r1 = 0;
    ThreadPool::task_range(rows, tasks, static_cast<int>(task), &r0, &r1);
    do_rows(r0, r1);
  });
}

}  // namespace moe::kernels

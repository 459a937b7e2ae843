// Operands of the kernels/cpu tests: random activations, weight matrices held in fp32 and as their bf16
// rounding, activations at a padded, misaligned stride, and the condition scale of the accuracy tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/tensor.h"

namespace moe::kernels::test_util {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = dist(rng);
  return v;
}

// A [rows, cols] weight matrix with a padded row stride, held as fp32 values and as their bf16
// rounding. `f32_of_bf16` is the exact fp32 value of each bf16 weight.
struct TestWeights {
  int64_t rows = 0, cols = 0, stride = 0;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<float> f32_of_bf16;

  TestWeights(int64_t r, int64_t c, int64_t pad, uint32_t seed) : rows(r), cols(c), stride(c + pad) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(c > 0 ? c : 1));
    f32 = random_floats(static_cast<size_t>(rows * stride), seed, -scale, scale);
    bf16.resize(f32.size());
    f32_of_bf16.resize(f32.size());
    for (size_t i = 0; i < f32.size(); ++i) {
      bf16[i] = f32_to_bf16(f32[i]);
      f32_of_bf16[i] = bf16_to_f32(bf16[i]);
    }
  }
  MatrixView view(DType t) const {
    return MatrixView{
        t == DType::kF32 ? static_cast<const void*>(f32.data()) : static_cast<const void*>(bf16.data()), t,
        rows, cols, stride};
  }
  // fp32 view of the exact bf16 values.
  MatrixView view_rounded() const { return MatrixView{f32_of_bf16.data(), DType::kF32, rows, cols, stride}; }
};

inline double weight_value(const MatrixView& w, int64_t r, int64_t c) {
  if (w.dtype == DType::kF32) return static_cast<const float*>(w.data)[r * w.row_stride + c];
  return bf16_to_f32(static_cast<const uint16_t*>(w.data)[r * w.row_stride + c]);
}

// Condition scale of y[r][o] = sum_i x[r][i] w[o][i]: sum_i |x[r][i] w[o][i]| (x contiguous [rows, in]).
// The relative error |y - ref| / scale is what fp32 summation bounds (about in * 2^-24 at worst).
inline std::vector<double> abs_dot_scale(const float* x, int64_t rows, const MatrixView& w) {
  const int64_t in = w.cols, out = w.rows;
  std::vector<double> wt(static_cast<size_t>(in * out));  // |W| transposed: the outputs innermost
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) wt[static_cast<size_t>(i * out + o)] = std::fabs(weight_value(w, o, i));
  }
  std::vector<double> s(static_cast<size_t>(rows * out), 0.0);
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {  // 16 rows share each transposed row while it is in cache
    for (int64_t i = 0; i < in; ++i) {
      const double* wr = wt.data() + i * out;
      for (int64_t r = r0; r < std::min(rows, r0 + 16); ++r) {
        const double xv = std::fabs(static_cast<double>(x[r * in + i]));
        double* sr = s.data() + r * out;
        for (int64_t o = 0; o < out; ++o) sr[o] += xv * wr[o];
      }
    }
  }
  return s;
}

// A copy of x (rows x in, contiguous) at row stride x_stride >= in, one float past the start of its storage
// (so not 64-byte aligned), the padding filled with -99: what the accuracy tests hand the kernels.
struct PaddedRows {
  std::vector<float> storage;
  const float* data;
  PaddedRows(const std::vector<float>& x, int64_t rows, int64_t in, int64_t x_stride)
      : storage(static_cast<size_t>(rows * x_stride + 1), -99.0f), data(storage.data() + 1) {
    for (int64_t r = 0; r < rows; ++r) std::copy_n(&x[r * in], in, &storage[1 + r * x_stride]);
  }
};

}  // namespace moe::kernels::test_util

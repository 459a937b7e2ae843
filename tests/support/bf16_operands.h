// Set-up shared by the bf16-compute kernel tests (linear_bf16.h, expert_ffn_bf16.h, linear_onednn.h): the
// activations rounded to bf16 as the kernels round them, the float64 reference of the rounded operands with
// its condition scale, the accuracy bound the tests hold the kernels to, and values over the whole fp32 range
// (subnormals, infinities, NaNs) for the bit-equality tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "base/float_bits.h"
#include "kernels/bf16.h"
#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/support/kernel_operands.h"

namespace moe::kernels::test_util {

// Each value rounded to the nearest bf16 (round_to_bf16), kept as fp32.
inline std::vector<float> rounded_to_bf16(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = round_to_bf16(x[i]);
  return out;
}

// rows x in fp32 values (contiguous) rounded by round_rows_to_bf16: the kernels' input layout (rows of
// 2 * pairs(in) bf16 elements, the element past an odd `in` zero).
inline std::vector<uint16_t> bf16_rows(const float* x, int64_t rows, int64_t in, ThreadPool& pool) {
  std::vector<uint16_t> xb(linear_bf16_workspace_elems(rows, in));
  round_rows_to_bf16(x, rows, in, in, xb.data(), pool);
  return xb;
}

// The bound of linear_bf16.h's accuracy contract for a reduction of length `in`, relative to
// sum_i |xb_i wb_i|: 4 sqrt(2P) 2^-24, P = pairs(in).
inline double bf16_linear_bound(int64_t in) {
  return 4.0 * std::sqrt(2.0 * static_cast<double>(bf16_pairs(in))) * 0x1p-24;
}

// float64 of y = bf16(x) @ bf16(W)^T, the oracle of the bf16 kernels, and its condition scale
// sum_i |xb_i wb_i| per output (x contiguous [rows, in]; W's bf16 values).
struct Bf16LinearReference {
  std::vector<double> y, scale;
  Bf16LinearReference(const std::vector<float>& x, int64_t rows, const TestWeights& w) {
    const std::vector<float> xr = rounded_to_bf16(x);
    y.resize(static_cast<size_t>(rows * w.rows));
    linear_reference_f64(xr.data(), rows, w.view(DType::kBF16), y.data());
    scale = abs_dot_scale(xr.data(), rows, w.view(DType::kBF16));
  }
};

// Values over the whole range, with subnormals (of fp32 and after rounding to bf16), zeros of both signs and,
// with `specials`, infinities and NaNs (with payloads) sprinkled in: the portable emulations must follow the
// hardware through all of them.
inline std::vector<float> wide_range_values(size_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (auto& e : v) {
    const uint32_t kind = rng() % 100;
    const uint32_t sign = (rng() & 1u) << 31;
    uint32_t bits = 0;
    if (kind < 70) {  // moderate
      bits = sign | ((110u + rng() % 30u) << 23) | (rng() & 0x7fffffu);
    } else if (kind < 85) {  // tiny: products fall below 2^-126
      bits = sign | ((rng() % 70u) << 23) | (rng() & 0x7fffffu);
    } else if (kind < 92) {  // large
      bits = sign | ((150u + rng() % 100u) << 23) | (rng() & 0x7fffffu);
    } else if (kind < 96) {
      bits = sign;  // +-0
    } else if (!specials) {
      bits = sign | (127u << 23);
    } else if (kind < 98) {
      bits = sign | 0x7f800000u;  // inf
    } else {
      bits = sign | 0x7f800000u | (1u + rng() % 0x7fffffu);  // NaN with a payload
    }
    e = float_from_bits(bits);
  }
  return v;
}

}  // namespace moe::kernels::test_util

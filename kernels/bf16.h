// bfloat16 <-> float32 conversion: the project's one definition, for host code and CUDA device code.
//
// bf16 is the upper 16 bits of an IEEE-754 binary32: 1 sign, 8 exponent, 7 mantissa bits. Widening
// bf16 -> f32 is exact (a shift). Narrowing f32 -> bf16 rounds to nearest, ties to even, as PyTorch and
// the Hugging Face checkpoints do; values beyond the largest bf16 round to +/-inf, subnormals are kept
// (no flush to zero), and NaN stays NaN (quiet, sign kept) - it is never rounded into an infinity.
//
// All functions are pure, thread-safe and allocation-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "base/float_bits.h"
#include "base/host_device.h"

namespace moe::kernels {

// Exact widening: the bf16 bits become the upper half of the float.
MOE_HD inline float bf16_to_f32(uint16_t bits) {
  return float_from_bits(static_cast<uint32_t>(bits) << 16);
}

// Round-to-nearest-even narrowing; NaN -> quiet NaN with the same sign and the top payload bits.
MOE_HD inline uint16_t f32_to_bf16(float value) {
  const uint32_t u = float_bits(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncate and force the quiet bit
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

// Converts n elements. `src` and `dst` must not overlap. Null pointers are allowed only when n == 0.
inline void bf16_to_f32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}
inline void f32_to_bf16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

// The float nearest to `value` that bf16 can represent (f32 -> bf16 -> f32).
MOE_HD inline float round_to_bf16(float value) {
  return bf16_to_f32(f32_to_bf16(value));
}

}  // namespace moe::kernels

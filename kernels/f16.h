// IEEE binary16 (numpy float16, safetensors F16, the scales of ggml's blocks): widening to binary32, exact
// for every input, and narrowing with round to nearest even. The one definition shared by weights I/O
// (moe/io), the quantized formats (kernels/quant_formats.h) and the simulator's .npy reader (sim/).
#pragma once

#include <bit>
#include <cstdint>

namespace moe::kernels {

// Subnormals are normalised, Inf kept, NaN payloads kept in the high mantissa bits.
inline float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13);  // Inf or NaN
  } else if (exponent != 0) {
    out = sign | ((exponent + 112u) << 23) | (mantissa << 13);  // normal: rebias 15 -> 127
  } else if (mantissa == 0) {
    out = sign;  // +-0
  } else {
    // Subnormal: value = mantissa * 2^-24; normalise.
    uint32_t e = 113;  // exponent field of 2^-14
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    out = sign | (e << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(out);
}

// Round to nearest even: beyond 65504 (from 65520 on) +-inf, subnormals kept, NaN -> quiet NaN (sign kept).
inline uint16_t f32_to_f16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520: rounds to infinity
  if (a < 0x38800000u) {                        // below 2^-14: a multiple of 2^-24 (1024 is the first normal)
    const float units = std::bit_cast<float>(a) * 0x1p24f;  // exact (a power-of-two scaling)
    const auto n = static_cast<uint32_t>(units);
    const float rest = units - static_cast<float>(n);
    const uint32_t r = rest > 0.5f || (rest == 0.5f && (n & 1u)) ? n + 1 : n;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t h = (((a >> 23) - 112u) << 10) | ((a & 0x7fffffu) >> 13);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | h);
}

}  // namespace moe::kernels

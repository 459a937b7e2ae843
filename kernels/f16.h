// IEEE binary16 (numpy float16, safetensors F16): widening to binary32, exact for every input. The one
// definition shared by weights I/O (moe/io) and the simulator's .npy reader (sim/).
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

}  // namespace moe::kernels

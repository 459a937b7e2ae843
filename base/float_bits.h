// The bits of an IEEE-754 binary32 and back: the project's one definition, for host code and CUDA device code
// (bf16 conversion, the planner's sort keys). Pure bit copies: no rounding, NaN payloads kept.
#pragma once

#include <cstdint>
#include <cstring>

#include "base/host_device.h"

namespace moe {

MOE_HD inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

MOE_HD inline float float_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace moe

// Private to moe/io: element conversions between the file dtypes and the storage dtypes.
// Not part of the project's public API (kernels/cpu/bf16.h is); kept here so that weights I/O depends on
// nothing but kernels/cpu/dtype.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/dtype.h"

namespace moe::io::internal {

// bf16 -> f32 is exact (the bf16 bits are the high half of the f32).
float bf16_to_f32(uint16_t bits);

// f32 -> bf16 rounded to nearest, ties to even. NaN stays NaN (sign kept, quiet bit set); +-Inf stays Inf;
// values beyond the bf16 range round to Inf as IEEE rounding does.
uint16_t f32_to_bf16(float value);

// IEEE binary16 -> f32, exact for every input (subnormals, Inf, NaN payloads kept in the high mantissa bits).
float f16_to_f32(uint16_t bits);

// Converts `count` elements from `src` (dtype `from`, little-endian, any alignment) to `dst` (dtype `to`,
// any alignment). `to` must be kF32 or kBF16. Equal dtypes copy bytes unchanged.
void convert(const std::byte* src, kernels::DType from, std::byte* dst, kernels::DType to, size_t count);

}  // namespace moe::io::internal

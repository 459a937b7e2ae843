// Private to moe/io: element conversions between the file dtypes and the storage dtypes.
// Not part of the project's public API (kernels/bf16.h is); kept here so that weights I/O depends on
// nothing but kernels/tensor.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/tensor.h"

namespace moe::io::internal {

// IEEE binary16 -> f32, exact for every input (subnormals, Inf, NaN payloads kept in the high mantissa bits).
float f16_to_f32(uint16_t bits);

// One element of dtype `from` (kF32, kBF16 or kF16, little-endian, any alignment) widened exactly to f32;
// std::invalid_argument for any other type.
float load_f32(const std::byte* p, kernels::DType from);

// Converts `count` elements from `src` (dtype `from`, little-endian, any alignment) to `dst` (dtype `to`,
// any alignment). `to` must be kF32 or kBF16. Equal dtypes copy bytes unchanged.
void convert(const std::byte* src, kernels::DType from, std::byte* dst, kernels::DType to, size_t count);

}  // namespace moe::io::internal

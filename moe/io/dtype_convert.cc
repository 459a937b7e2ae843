#include "moe/io/dtype_convert.h"

#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/bf16.h"
#include "kernels/f16.h"

namespace moe::io::internal {

float f16_to_f32(uint16_t bits) {
  return kernels::f16_to_f32(bits);
}

float load_f32(const std::byte* p, kernels::DType from) {
  switch (from) {
    case kernels::DType::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case kernels::DType::kBF16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return kernels::bf16_to_f32(b);
    }
    case kernels::DType::kF16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return f16_to_f32(b);
    }
    default:  // quantized types are not elements (kernels/quant_formats.h dequantizes them)
      break;
  }
  throw std::invalid_argument("moe::io: " + std::string(kernels::to_string(from)) +
                              " is not a plain element type");
}

void convert(const std::byte* src, kernels::DType from, std::byte* dst, kernels::DType to, size_t count) {
  if (from == to) {
    std::memcpy(dst, src, count * kernels::dtype_size(from));
    return;
  }
  const size_t in = kernels::dtype_size(from);
  switch (to) {
    case kernels::DType::kF32:
      for (size_t i = 0; i < count; ++i) {
        const float v = load_f32(src + i * in, from);
        std::memcpy(dst + i * 4, &v, 4);
      }
      return;
    case kernels::DType::kBF16:
      for (size_t i = 0; i < count; ++i) {
        const uint16_t v = kernels::f32_to_bf16(load_f32(src + i * in, from));
        std::memcpy(dst + i * 2, &v, 2);
      }
      return;
    default:
      break;
  }
  throw std::invalid_argument("moe::io: conversion to " + std::string(kernels::to_string(to)) +
                              " storage is not supported here (use f32 or bf16)");
}

}  // namespace moe::io::internal

#include "moe/io/quantized.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "kernels/bf16.h"
#include "kernels/quant_formats.h"

namespace moe::io {
namespace {

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw std::invalid_argument(name + ": " + what);
}

double scale_at(const std::byte* scale, kernels::DType dtype, int64_t index) {
  if (dtype == kernels::DType::kF32) {
    float v;
    std::memcpy(&v, scale + index * 4, 4);
    return v;
  }
  uint16_t b;
  std::memcpy(&b, scale + index * 2, 2);
  return kernels::bf16_to_f32(b);
}

}  // namespace

double fp8_e4m3_value(uint8_t bits) {
  return kernels::e4m3_to_f32(bits);
}

double fp4_e2m1_value(uint8_t nibble) {
  return kernels::kMxfp4Values[nibble & 15] / 2.0;
}

double e8m0_value(uint8_t bits) {
  return 2.0 * kernels::e8m0_half_to_f32(bits);
}

bool store_rounded(double value, kernels::DType to, std::byte* dst) {
  if (to == kernels::DType::kF32) {
    const float f = static_cast<float>(value);  // nearest even
    if (!std::isfinite(f)) return false;
    std::memcpy(dst, &f, 4);
    return true;
  }
  const uint16_t b = kernels::bf16_nearest(value);
  if (!std::isfinite(kernels::bf16_to_f32(b))) return false;
  std::memcpy(dst, &b, 2);
  return true;
}

void dequantize_fp8(const uint8_t* q, int64_t rows, int64_t cols, const std::byte* scale,
                    kernels::DType scale_dtype, Fp8BlockSize block, kernels::DType to, std::byte* dst,
                    const std::string& name) {
  if (block.rows <= 0 || block.cols <= 0) fail(name, "FP8 block size must be positive");
  const int64_t scale_cols = (cols + block.cols - 1) / block.cols;
  const size_t out_size = kernels::dtype_size(to);
  for (int64_t o = 0; o < rows; ++o) {
    const int64_t scale_row = o / block.rows;
    for (int64_t c0 = 0; c0 < cols; c0 += block.cols) {
      const double s = scale_at(scale, scale_dtype, scale_row * scale_cols + c0 / block.cols);
      if (!std::isfinite(s)) {
        fail(name, "weight_scale_inv[" + std::to_string(scale_row) + ", " + std::to_string(c0 / block.cols) +
                       "] is not finite");
      }
      const int64_t c1 = std::min(cols, c0 + block.cols);
      for (int64_t i = c0; i < c1; ++i) {
        const uint8_t code = q[o * cols + i];
        const double v = kernels::e4m3_to_f32(code);
        if (std::isnan(v)) {
          fail(name, "element [" + std::to_string(o) + ", " + std::to_string(i) + "] is the FP8 NaN code");
        }
        if (!store_rounded(v * s, to, dst + static_cast<size_t>(o * cols + i) * out_size)) {
          fail(name, "element [" + std::to_string(o) + ", " + std::to_string(i) +
                         "] dequantizes beyond the range of " + std::string(kernels::to_string(to)));
        }
      }
    }
  }
}

void dequantize_mxfp4_row(const uint8_t* blocks, const uint8_t* scales, int64_t groups, kernels::DType to,
                          std::byte* dst, const std::string& name, int64_t row) {
  const size_t out_size = kernels::dtype_size(to);
  for (int64_t g = 0; g < groups; ++g) {
    if (scales[g] == 0xff) {
      fail(name, "row " + std::to_string(row) + " group " + std::to_string(g) + " has the NaN scale 0xff");
    }
    const double s = e8m0_value(scales[g]);
    for (int b = 0; b < 16; ++b) {
      const uint8_t byte = blocks[g * 16 + b];
      const int64_t i = g * 32 + 2 * b;
      if (!store_rounded(fp4_e2m1_value(byte & 0xf) * s, to, dst + static_cast<size_t>(i) * out_size) ||
          !store_rounded(fp4_e2m1_value(byte >> 4) * s, to, dst + static_cast<size_t>(i + 1) * out_size)) {
        fail(name, "row " + std::to_string(row) + " group " + std::to_string(g) + " (scale 2^" +
                       std::to_string(static_cast<int>(scales[g]) - 127) +
                       ") dequantizes beyond the range of " + std::string(kernels::to_string(to)));
      }
    }
  }
}

void mxfp4_row_to_blocks(const uint8_t* blocks, const uint8_t* scales, int64_t groups, std::byte* dst,
                         const std::string& name, int64_t row) {
  for (int64_t g = 0; g < groups; ++g) {
    if (scales[g] == 0xff) {
      fail(name, "row " + std::to_string(row) + " group " + std::to_string(g) + " has the NaN scale 0xff");
    }
    kernels::BlockMxfp4 blk{};
    blk.e = scales[g];
    const uint8_t* src = blocks + g * 16;
    const auto code = [src](int i) {
      return static_cast<uint8_t>(i % 2 == 0 ? src[i / 2] & 15 : src[i / 2] >> 4);
    };
    for (int j = 0; j < 16; ++j) blk.qs[j] = static_cast<uint8_t>(code(j) | (code(j + 16) << 4));
    std::memcpy(dst + static_cast<size_t>(g) * sizeof(blk), &blk, sizeof(blk));
  }
}

}  // namespace moe::io

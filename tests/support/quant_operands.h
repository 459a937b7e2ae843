// Quantized weight matrices for the kernels' tests: quantized from random fp32 values (kernels::quantize_row,
// quantize_fp8), or random bytes of valid blocks (every code, extreme and subnormal fp16 scales), with a
// padded row stride.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/quant_formats.h"
#include "tests/support/kernel_operands.h"

namespace moe::kernels::test_util {

inline constexpr DType kQuantTypes[] = {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kMXFP4, DType::kFP8};

struct QuantWeights {
  std::vector<std::byte> data;
  std::vector<float> scales;
  MatrixView view;

  // [rows, cols] of `type`, row stride cols + pad blocks. random_bytes: every byte random (fp16 fields drawn
  // finite, 2^-24 .. 2^4, and no NaN code or scale), else quantized from uniform values in +-1/sqrt(cols).
  // FP8 uses blocks of fp8_block x fp8_block.
  QuantWeights(DType type, int64_t rows, int64_t cols, uint32_t seed, bool random_bytes = false,
               int64_t pad_blocks = 1, int32_t fp8_block = 128) {
    const int64_t be = block_elems(type);
    const int64_t stride = cols + pad_blocks * be;
    const size_t rb = row_bytes(type, stride);
    data.assign(rb * static_cast<size_t>(rows), std::byte{0x55});
    view = MatrixView{data.data(), type, rows, cols, stride};
    std::mt19937 rng(seed);
    if (type == DType::kFP8) {
      const int64_t sr = (rows + fp8_block - 1) / fp8_block, sc = (cols + fp8_block - 1) / fp8_block;
      scales.resize(static_cast<size_t>(sr * sc));
      std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
      if (random_bytes) {
        for (uint8_t& b : q) {
          do b = static_cast<uint8_t>(rng());
          while ((b & 0x7f) == 0x7f);
        }
        std::uniform_real_distribution<float> e(-20.0f, 4.0f);
        for (float& s : scales) s = std::exp2(e(rng));
      } else {
        const auto w =
            random_floats(q.size(), seed, -1.0f / std::sqrt(float(cols)), 1.0f / std::sqrt(float(cols)));
        quantize_fp8(w.data(), rows, cols, fp8_block, fp8_block, q.data(), scales.data());
      }
      for (int64_t r = 0; r < rows; ++r) std::memcpy(data.data() + r * rb, q.data() + r * cols, cols);
      view.scales = scales.data();
      view.scale_stride = sc;
      view.scale_block_rows = fp8_block;
      view.scale_block_cols = fp8_block;
      return;
    }
    if (!random_bytes) {
      const float bound = 1.0f / std::sqrt(static_cast<float>(cols));
      const auto w = random_floats(static_cast<size_t>(rows * cols), seed, -bound, bound);
      for (int64_t r = 0; r < rows; ++r) quantize_row(type, w.data() + r * cols, cols, data.data() + r * rb);
      return;
    }
    const size_t bb = block_bytes(type);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < cols / be; ++b) {
        std::byte* blk = data.data() + r * rb + b * bb;
        for (size_t i = 0; i < bb; ++i) blk[i] = static_cast<std::byte>(rng());
        const auto put_f16 = [&](size_t at) {
          std::uniform_int_distribution<int> e(-24, 4);
          const uint16_t h =
              f32_to_f16(std::ldexp(1.0f + (rng() % 1024) / 1024.0f, e(rng)) * (rng() % 2 ? 1 : -1));
          std::memcpy(blk + at, &h, 2);
        };
        if (type == DType::kQ8_0) put_f16(0);
        if (type == DType::kQ4_K) {
          put_f16(0);
          put_f16(2);
        }
        if (type == DType::kQ6_K) put_f16(208);
        if (type == DType::kMXFP4 && static_cast<uint8_t>(blk[0]) == 0xff) blk[0] = std::byte{0xfe};
      }
    }
  }
};

}  // namespace moe::kernels::test_util

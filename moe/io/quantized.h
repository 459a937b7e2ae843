// The quantized weight formats of published safetensors MoE checkpoints: held as stored
// (kernels/quant_formats.h: FP8 as kFP8 views of the file, gpt-oss's MXFP4 rearranged into kMXFP4 blocks) or
// dequantized exactly on load to a storage dtype (kF32 or kBF16): each element's exact value (a product of a
// few-bit code and a scale, exact in double) is rounded once, to nearest even. The codes' values are
// kernels/quant_formats.h's (one definition); tests/layer_families_test.cc checks every code against a
// reference dequantizer written independently.
//
//   FP8 e4m3 with block scales  "<name>" F8_E4M3 [rows, cols] and "<name>_scale_inv" F32 or BF16
//                               [ceil(rows / 128), ceil(cols / 128)]: W[o][i] = fp8(q[o][i]) *
//                               scale_inv[o / 128][i / 128] (config.json: quantization_config.quant_method
//                               "fp8", weight_block_size [128, 128]; DeepSeek-V3, Kimi K2, Qwen3-FP8,
//                               GLM-4.5-FP8). e4m3 is OCP's "e4m3fn": bias 7, no infinity, 0x7f/0xff NaN.
//   MXFP4                       "<base>_blocks" U8 [..., rows, cols / 32, 16] and "<base>_scales" U8
//                               [..., rows, cols / 32] (quant_method "mxfp4"; gpt-oss): per row, 32-element
//                               groups of FP4 e2m1 codes, two per byte, element 32 g + 2 b in the low nibble
//                               of byte b and 32 g + 2 b + 1 in its high nibble, times 2^(scale - 127)
//                               (e8m0; 0xff is NaN).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/tensor.h"

namespace moe::io {

// Exact values of the codes (kernels/quant_formats.h's e4m3_to_f32, kMxfp4Values / 2, e8m0_half_to_f32 * 2).
double fp8_e4m3_value(uint8_t bits);    // NaN for 0x7f and 0xff
double fp4_e2m1_value(uint8_t nibble);  // the low 4 bits: sign, 2 exponent bits (bias 1), 1 mantissa bit
double e8m0_value(uint8_t bits);        // 2^(bits - 127); NaN for 0xff

// `value` rounded once, to nearest even, to `to` (kF32 or kBF16; for bf16 through an fp32 rounded to odd,
// which has the 2 extra bits that make the second rounding exact), stored little-endian at dst (any
// alignment). Returns false, storing nothing, if the rounded value is not finite (beyond the dtype's range,
// or NaN).
bool store_rounded(double value, kernels::DType to, std::byte* dst);

// The block size of FP8 block scales (weight_block_size: [rows, cols]).
struct Fp8BlockSize {
  int64_t rows = 128;
  int64_t cols = 128;
};

// dst[o][i] (rows x cols of `to`, contiguous) = fp8(q[o][i]) * scale[o / block.rows][i / block.cols], exactly
// rounded. q: rows x cols bytes; scale: ceil(rows / block.rows) x ceil(cols / block.cols) values of
// scale_dtype (kF32 or kBF16 bits), row-major. Throws std::invalid_argument naming `name` and the element for
// an FP8 NaN code, a non-finite scale, or a product beyond `to`'s range.
void dequantize_fp8(const uint8_t* q, int64_t rows, int64_t cols, const std::byte* scale,
                    kernels::DType scale_dtype, Fp8BlockSize block, kernels::DType to, std::byte* dst,
                    const std::string& name);

// One MXFP4 row of `groups` 32-element groups (blocks: groups x 16 bytes; scales: groups bytes) into dst
// (32 * groups elements of `to`). Throws std::invalid_argument naming `name` and `row` for a NaN scale (0xff)
// or a value beyond `to`'s range.
void dequantize_mxfp4_row(const uint8_t* blocks, const uint8_t* scales, int64_t groups, kernels::DType to,
                          std::byte* dst, const std::string& name, int64_t row);

// The same row as stored: `groups` kernels::BlockMxfp4 at dst (17 bytes each, any alignment): e = the group's
// scale byte, and element i of the group (gpt-oss: byte i / 2, low nibble for even i) moves to ggml's place
// (qs[i] low nibble for i < 16, qs[i - 16] high nibble after). No value changes. Throws std::invalid_argument
// naming `name` and `row` for a NaN scale (0xff).
void mxfp4_row_to_blocks(const uint8_t* blocks, const uint8_t* scales, int64_t groups, std::byte* dst,
                         const std::string& name, int64_t row);

}  // namespace moe::io

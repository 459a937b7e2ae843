// The quantized weight formats, shared by the CPU kernels (kernels/cpu/linear_quant.h), CUDA (dequantized on
// upload), weights I/O (moe/io) and the GGUF reader: the block layouts exactly as their publishers define
// them, the plain reference dequantizer of each, and how a MatrixView (kernels/tensor.h) describes a matrix
// of such a type.
//
// Block formats (ggml-org/ggml, src/ggml-common.h and src/ggml-quants.c; GGUF stores these bytes as they
// are). Every row is a sequence of whole blocks along `cols`:
//   kQ8_0   32 elements, 34 bytes:  fp16 d; int8 qs[32]                 x[i] = d * qs[i]
//   kMXFP4  32 elements, 17 bytes:  e8m0 e; uint8 qs[16]                x[j] = v(qs[j] & 15) * 2^(e - 128),
//           x[j + 16] = v(qs[j] >> 4) * 2^(e - 128), j < 16; v = kMxfp4Values (twice the FP4 e2m1 value,
//           ggml's kvalues_mxfp4), so 2^(e - 128) * v = 2^(e - 127) * e2m1: OCP MX's value. e = 0xff is NaN
//           (OCP MX v1.0; ggml leaves it undefined).
//   kQ4_K   256 elements (8 sub-blocks of 32), 144 bytes: fp16 d, fp16 dmin; uint8 scales[12] (a 6-bit scale
//           sc_j and min m_j per sub-block, q4k_scale_min below); uint8 qs[128]. For chunk c < 4 (64
//           elements, bytes qs[32 c .. 32 c + 31]): x[64 c + l] = d sc_{2c} (qs[32 c + l] & 15) - dmin
//           m_{2c}, x[64 c + 32 + l] = d sc_{2c+1} (qs[32 c + l] >> 4) - dmin m_{2c+1}, l < 32.
//   kQ6_K   256 elements (16 sub-blocks of 16), 210 bytes: uint8 ql[128], qh[64]; int8 scales[16]; fp16 d.
//           For half h < 2 (128 elements; ql + 64 h, qh + 32 h, scales + 8 h) and l < 32, with
//           q(a, s) = ((ql[a] >> s) & 15) | (((qh[l] >> b) & 3) << 4) - 32:
//           x[128 h + l] = d sc[l / 16] q(l, 0) (b = 0),  x[128 h + 32 + l] = d sc[l / 16 + 2] q(l + 32, 0)
//           (b = 2), x[128 h + 64 + l] = d sc[l / 16 + 4] q(l, 4) (b = 4),  x[128 h + 96 + l] = d sc[l / 16 +
//           6] q(l + 32, 4) (b = 6).
// FP8 with 2-D block scales (DeepSeek-V3, Kimi K2, Qwen3-FP8, GLM-4.5-FP8 safetensors: "<name>" F8_E4M3
// [rows, cols] and "<name>_scale_inv" [ceil(rows / 128), ceil(cols / 128)], config.json's weight_block_size):
//   kFP8    one e4m3 byte per element (OCP "e4m3fn": bias 7, no infinity, 0x7f / 0xff NaN), x[o][i] =
//           e4m3(q[o][i]) * scales[(o / scale_block_rows) * scale_stride + i / scale_block_cols] (fp32
//           scales; a BF16 scale_inv is widened exactly when loaded). Published checkpoints use 128 x 128
//           blocks; any positive block size is described, the kernels need an even scale_block_cols.
// gpt-oss's safetensors MXFP4 ("<base>_blocks" [.., rows, cols / 32, 16] + "<base>_scales", element 2b in
// the low nibble of byte b) holds the same codes and scales in another order: moe/io rearranges it into
// kMXFP4 blocks on load (same bytes, no rounding).
//
// The value of every element is a product of small integers and a scale; reference_value below computes it
// exactly (in double) and dequantize_row rounds it once to fp32, round to nearest even: ggml's
// dequantize_row_q8_0 / _q4_K / _q6_K / _mxfp4 bit for bit (its fp32 expressions d1 * q - m1 and
// d * sc * q have exact operands and round once).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/float_bits.h"
#include "base/host_device.h"
#include "kernels/f16.h"
#include "kernels/tensor.h"

namespace moe::kernels {

inline constexpr int64_t kQk8_0 = 32;               // elements of a Q8_0 block
inline constexpr int64_t kQkMxfp4 = 32;             // elements of an MXFP4 block
inline constexpr int64_t kQkK = 256;                // elements of a Q4_K / Q6_K super-block
inline constexpr int64_t kFp8PublishedBlock = 128;  // weight_block_size of the published FP8 checkpoints

// The blocks, byte for byte as ggml-common.h lays them out (fp16 fields as their IEEE binary16 bits).
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockMxfp4 {
  uint8_t e;
  uint8_t qs[16];
};
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ8_0) == block_bytes(DType::kQ8_0), "Q8_0 block is 34 bytes (ggml block_q8_0)");
static_assert(sizeof(BlockMxfp4) == block_bytes(DType::kMXFP4), "MXFP4 block is 17 bytes (ggml block_mxfp4)");
static_assert(sizeof(BlockQ4_K) == block_bytes(DType::kQ4_K), "Q4_K block is 144 bytes (ggml block_q4_K)");
static_assert(sizeof(BlockQ6_K) == block_bytes(DType::kQ6_K), "Q6_K block is 210 bytes (ggml block_q6_K)");
static_assert(alignof(BlockQ8_0) <= 2 && alignof(BlockQ4_K) <= 2 && alignof(BlockQ6_K) <= 2,
              "blocks are read in place from files: at most 2-byte alignment");

// Twice the FP4 e2m1 value of each 4-bit code (bit 3 the sign): ggml's kvalues_mxfp4.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128) as fp32 (exact; subnormal for e < 2): the factor of kMxfp4Values. NaN for e = 0xff.
MOE_HD inline float e8m0_half_to_f32(uint8_t e) {
  if (e == 0xff) return float_from_bits(0x7fc00000u);
  return float_from_bits(e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23);
}

// The exact value of an OCP e4m3fn byte (bias 7, subnormals m / 8 * 2^-6, no infinity), NaN for 0x7f / 0xff.
// Every e4m3 value is exact in bf16 and fp32.
MOE_HD inline float e4m3_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80) << 24, exponent = (b >> 3) & 15, mantissa = b & 7;
  if (exponent == 15 && mantissa == 7) return float_from_bits(sign | 0x7fc00000u);
  if (exponent == 0) {  // m / 8 * 2^-6: exact as a float multiple of 2^-9
    const float v = static_cast<float>(mantissa) * 0x1p-9f;
    return sign ? -v : v;
  }
  return float_from_bits(sign | ((exponent + 120) << 23) | (mantissa << 20));  // rebias 7 -> 127
}

// Q4_K's 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes (ggml's get_scale_min_k4):
// j < 4: sc = q[j] & 63, m = q[j + 4] & 63; j >= 4: the low 4 bits from q[j + 4], the high 2 from the top
// bits of q[j - 4] (scale) and q[j] (min).
MOE_HD inline void q4k_scale_min(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Scale blocks of an FP8 view along its rows and columns.
inline int64_t fp8_scale_rows(const MatrixView& m) {
  return (m.rows + m.scale_block_rows - 1) / m.scale_block_rows;
}
inline int64_t fp8_scale_cols(const MatrixView& m) {
  return (m.cols + m.scale_block_cols - 1) / m.scale_block_cols;
}

// Bytes of row r's data (row_bytes of the row stride) and of the whole matrix's data (rows - 1 strides plus
// one row of cols), for any dtype.
inline size_t view_row_stride_bytes(const MatrixView& m) {
  return row_bytes(m.dtype, m.row_stride);
}
inline size_t view_data_bytes(const MatrixView& m) {
  if (m.rows == 0) return 0;
  return static_cast<size_t>(m.rows - 1) * view_row_stride_bytes(m) + row_bytes(m.dtype, m.cols);
}
inline const std::byte* view_row(const MatrixView& m, int64_t r) {
  return static_cast<const std::byte*>(m.data) + static_cast<size_t>(r) * view_row_stride_bytes(m);
}

// Checks that `m` describes a matrix of its dtype: sizes >= 0, data set for a nonzero size, row_stride >=
// cols, for block types cols and row_stride multiples of block_elems, for kFP8 positive block sizes, scales
// set and scale_stride >= fp8_scale_cols (for the other types the scale fields must be null / 0). Throws
// std::invalid_argument naming `what` and the field.
void validate_view(const MatrixView& m, const std::string& what);

// The exact value of every element of row r (out: cols values; any dtype, element types widened exactly;
// NaN for FP8's and e8m0's NaN codes). The reference every kernel and loader is checked against.
void reference_row(const MatrixView& m, int64_t r, double* out);

// Row r rounded once to fp32 (round to nearest even; beyond fp32's range: +-inf): for the block types the
// bits of ggml's dequantize_row_*.
void dequantize_row(const MatrixView& m, int64_t r, float* out);

// `value` rounded once, to nearest even, to bf16 (through an fp32 rounded to odd, whose extra bits make the
// second rounding exact; beyond bf16's range: +-inf; NaN stays NaN).
uint16_t bf16_nearest(double value);

// Row r rounded once to bf16 (bf16_nearest of each exact value): what a bf16 dequantization holds.
void dequantize_row_bf16(const MatrixView& m, int64_t r, uint16_t* out);

// --- Quantizers: fp32 values into the formats (for seeded random layers, tests and benchmarks) ------------
// Plain round-to-nearest schemes in the spirit of ggml's reference quantizers (quantize_row_*_ref; not its
// importance-weighted search), each deterministic on every machine. `cols` a multiple of block_elems.
// Q8_0: d = amax / 127 (fp16), q = nearest(x / d). MXFP4: e = floor(log2(amax)) - 2 + 127 (ggml's choice),
// each code the nearest value. Q4_K: per sub-block min and range, the 6-bit scales and mins nearest to
// d * sc and dmin * m with d, dmin = their largest / 63, then the nearest 4-bit code. Q6_K: per sub-block
// s = amax / 31 (sign of the largest), d = max |s| / 127, sc = nearest(s / d), codes nearest in [-32, 31].
void quantize_row(DType t, const float* x, int64_t cols, void* out);

// FP8: each block of scale_block_rows x scale_block_cols gets scale = amax / 448 (1 for an all-zero block;
// fp32) and every element the e4m3 nearest to x / scale (ties to even). w: rows x cols fp32, contiguous; q:
// rows x cols bytes; scales: ceil(rows / br) x ceil(cols / bc) fp32.
void quantize_fp8(const float* w, int64_t rows, int64_t cols, int32_t block_rows, int32_t block_cols,
                  uint8_t* q, float* scales);

// The e4m3 byte nearest to v (ties to even), saturating at +-448; v must not be NaN.
uint8_t f32_to_e4m3(float v);

}  // namespace moe::kernels

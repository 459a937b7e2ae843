#include "kernels/quant_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/bf16.h"

namespace moe::kernels {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw std::invalid_argument(what + ": " + msg);
}

template <class Block>
Block load_block(const std::byte* row, int64_t b) {
  Block out;
  std::memcpy(&out, row + static_cast<size_t>(b) * sizeof(Block), sizeof(Block));
  return out;
}

double f16(uint16_t bits) {
  return f16_to_f32(bits);
}

void reference_q8_0(const std::byte* row, int64_t cols, double* out) {
  for (int64_t b = 0; b < cols / kQk8_0; ++b) {
    const BlockQ8_0 blk = load_block<BlockQ8_0>(row, b);
    const double d = f16(blk.d);
    for (int i = 0; i < 32; ++i) out[b * 32 + i] = d * blk.qs[i];
  }
}

void reference_mxfp4(const std::byte* row, int64_t cols, double* out) {
  for (int64_t b = 0; b < cols / kQkMxfp4; ++b) {
    const BlockMxfp4 blk = load_block<BlockMxfp4>(row, b);
    const double d = e8m0_half_to_f32(blk.e);
    for (int j = 0; j < 16; ++j) {
      out[b * 32 + j] = d * kMxfp4Values[blk.qs[j] & 15];
      out[b * 32 + j + 16] = d * kMxfp4Values[blk.qs[j] >> 4];
    }
  }
}

void reference_q4_k(const std::byte* row, int64_t cols, double* out) {
  for (int64_t b = 0; b < cols / kQkK; ++b) {
    const BlockQ4_K blk = load_block<BlockQ4_K>(row, b);
    const double d = f16(blk.d), dmin = f16(blk.dmin);
    double* y = out + b * kQkK;
    for (int c = 0; c < 4; ++c) {
      int sc0 = 0, m0 = 0, sc1 = 0, m1 = 0;
      q4k_scale_min(2 * c, blk.scales, &sc0, &m0);
      q4k_scale_min(2 * c + 1, blk.scales, &sc1, &m1);
      for (int l = 0; l < 32; ++l) {
        const uint8_t q = blk.qs[32 * c + l];
        y[64 * c + l] = d * sc0 * (q & 15) - dmin * m0;  // exact: a difference of two exact products
        y[64 * c + 32 + l] = d * sc1 * (q >> 4) - dmin * m1;
      }
    }
  }
}

void reference_q6_k(const std::byte* row, int64_t cols, double* out) {
  for (int64_t b = 0; b < cols / kQkK; ++b) {
    const BlockQ6_K blk = load_block<BlockQ6_K>(row, b);
    const double d = f16(blk.d);
    double* y = out + b * kQkK;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = blk.ql + 64 * h;
      const uint8_t* qh = blk.qh + 32 * h;
      const int8_t* sc = blk.scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[128 * h + l] = d * sc[is] * q1;
        y[128 * h + 32 + l] = d * sc[is + 2] * q2;
        y[128 * h + 64 + l] = d * sc[is + 4] * q3;
        y[128 * h + 96 + l] = d * sc[is + 6] * q4;
      }
    }
  }
}

// --- quantizers ------------------------------------------------------------------------------------------

int clamp_round(double v, int lo, int hi) {
  return static_cast<int>(std::clamp(std::nearbyint(v), static_cast<double>(lo), static_cast<double>(hi)));
}

void quantize_q8_0(const float* x, int64_t cols, std::byte* out) {
  for (int64_t b = 0; b < cols / kQk8_0; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    BlockQ8_0 blk{};
    blk.d = f32_to_f16(amax / 127.0f);
    const double d = f16_to_f32(blk.d);
    for (int i = 0; i < 32; ++i)
      blk.qs[i] = static_cast<int8_t>(d == 0 ? 0 : clamp_round(xb[i] / d, -127, 127));
    std::memcpy(out + b * sizeof(BlockQ8_0), &blk, sizeof(blk));
  }
}

uint8_t nearest_mxfp4(double v, double d) {
  int best = 0;
  double best_err = std::fabs(v);
  for (int k = 1; k < 16; ++k) {
    const double err = std::fabs(v - d * kMxfp4Values[k]);
    if (err < best_err) {
      best = k;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

void quantize_mxfp4(const float* x, int64_t cols, std::byte* out) {
  for (int64_t b = 0; b < cols / kQkMxfp4; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    BlockMxfp4 blk{};
    const int e = amax > 0.0f ? static_cast<int>(std::floor(std::log2(amax))) - 2 + 127 : 0;
    blk.e = static_cast<uint8_t>(std::clamp(e, 0, 254));
    const double d = e8m0_half_to_f32(blk.e);
    for (int j = 0; j < 16; ++j) {
      blk.qs[j] = static_cast<uint8_t>(nearest_mxfp4(xb[j], d) | (nearest_mxfp4(xb[j + 16], d) << 4));
    }
    std::memcpy(out + b * sizeof(BlockMxfp4), &blk, sizeof(blk));
  }
}

void quantize_q4_k(const float* x, int64_t cols, std::byte* out) {
  for (int64_t b = 0; b < cols / kQkK; ++b) {
    const float* xb = x + b * kQkK;
    double scale[8], min[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      float lo = 0.0f, hi = 0.0f;  // the range always holds 0 (ggml's make_qkx2_quants does the same)
      for (int i = 0; i < 32; ++i) {
        lo = std::min(lo, xb[32 * j + i]);
        hi = std::max(hi, xb[32 * j + i]);
      }
      scale[j] = (static_cast<double>(hi) - lo) / 15.0;
      min[j] = -static_cast<double>(lo);
      max_scale = std::max(max_scale, scale[j]);
      max_min = std::max(max_min, min[j]);
    }
    BlockQ4_K blk{};
    blk.d = f32_to_f16(static_cast<float>(max_scale / 63.0));
    blk.dmin = f32_to_f16(static_cast<float>(max_min / 63.0));
    const double d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
    int sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = d > 0 ? clamp_round(scale[j] / d, 0, 63) : 0;
      m[j] = dmin > 0 ? clamp_round(min[j] / dmin, 0, 63) : 0;
      if (j < 4) {
        blk.scales[j] = static_cast<uint8_t>(sc[j]);
        blk.scales[j + 4] = static_cast<uint8_t>(m[j]);
      } else {
        blk.scales[j + 4] = static_cast<uint8_t>((sc[j] & 15) | ((m[j] & 15) << 4));
        blk.scales[j - 4] = static_cast<uint8_t>(blk.scales[j - 4] | ((sc[j] >> 4) << 6));
        blk.scales[j] = static_cast<uint8_t>(blk.scales[j] | ((m[j] >> 4) << 6));
      }
    }
    uint8_t q[256];
    for (int j = 0; j < 8; ++j) {
      const double step = d * sc[j], offset = dmin * m[j];
      for (int i = 0; i < 32; ++i) {
        q[32 * j + i] =
            static_cast<uint8_t>(step > 0 ? clamp_round((xb[32 * j + i] + offset) / step, 0, 15) : 0);
      }
    }
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l)
        blk.qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
    std::memcpy(out + b * sizeof(BlockQ4_K), &blk, sizeof(blk));
  }
}

void quantize_q6_k(const float* x, int64_t cols, std::byte* out) {
  for (int64_t b = 0; b < cols / kQkK; ++b) {
    const float* xb = x + b * kQkK;
    double s[16], max_s = 0;
    for (int j = 0; j < 16; ++j) {
      float amax = 0.0f;
      for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(xb[16 * j + i]));
      s[j] = amax / 31.0;
      max_s = std::max(max_s, s[j]);
    }
    BlockQ6_K blk{};
    blk.d = f32_to_f16(static_cast<float>(max_s / 127.0));
    const double d = f16_to_f32(blk.d);
    uint8_t u[256];
    for (int j = 0; j < 16; ++j) {
      const int sc = d > 0 ? clamp_round(s[j] / d, -128, 127) : 0;
      blk.scales[j] = static_cast<int8_t>(sc);
      const double step = d * sc;
      for (int i = 0; i < 16; ++i) {
        u[16 * j + i] =
            static_cast<uint8_t>((step != 0 ? clamp_round(xb[16 * j + i] / step, -32, 31) : 0) + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = u[128 * h + l], q2 = u[128 * h + 32 + l], q3 = u[128 * h + 64 + l],
                  q4 = u[128 * h + 96 + l];
        blk.ql[64 * h + l] = static_cast<uint8_t>((q1 & 15) | ((q3 & 15) << 4));
        blk.ql[64 * h + 32 + l] = static_cast<uint8_t>((q2 & 15) | ((q4 & 15) << 4));
        blk.qh[32 * h + l] =
            static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
    std::memcpy(out + b * sizeof(BlockQ6_K), &blk, sizeof(blk));
  }
}

}  // namespace

void validate_view(const MatrixView& m, const std::string& what) {
  if (m.rows < 0 || m.cols < 0) {
    fail(what, "negative shape [" + std::to_string(m.rows) + ", " + std::to_string(m.cols) + "]");
  }
  if (m.row_stride < m.cols) {
    fail(what, "row_stride " + std::to_string(m.row_stride) + " is below cols " + std::to_string(m.cols));
  }
  if (m.data == nullptr && m.rows > 0 && m.cols > 0) fail(what, "data is null");
  const std::string type(to_string(m.dtype));
  const int64_t be = block_elems(m.dtype);
  if (m.cols % be != 0 || m.row_stride % be != 0) {
    fail(what, type + " rows are whole blocks of " + std::to_string(be) + " elements: cols " +
                   std::to_string(m.cols) + ", row_stride " + std::to_string(m.row_stride));
  }
  if (m.dtype != DType::kFP8) {
    if (m.scales != nullptr || m.scale_stride != 0 || m.scale_block_rows != 0 || m.scale_block_cols != 0) {
      fail(what, type + " matrices have no block scales beside them (the scale fields are for fp8)");
    }
    return;
  }
  if (m.scale_block_rows <= 0 || m.scale_block_cols <= 0) {
    fail(what, "fp8 block size " + std::to_string(m.scale_block_rows) + " x " +
                   std::to_string(m.scale_block_cols) + " must be positive");
  }
  if (m.scales == nullptr && m.rows > 0 && m.cols > 0) fail(what, "fp8 block scales are null");
  if (m.scale_stride < fp8_scale_cols(m)) {
    fail(what, "fp8 scale_stride " + std::to_string(m.scale_stride) + " is below the " +
                   std::to_string(fp8_scale_cols(m)) + " scale blocks of a row");
  }
}

void reference_row(const MatrixView& m, int64_t r, double* out) {
  const std::byte* row = view_row(m, r);
  switch (m.dtype) {
    case DType::kF32:
      for (int64_t i = 0; i < m.cols; ++i) {
        float v;
        std::memcpy(&v, row + 4 * i, 4);
        out[i] = v;
      }
      return;
    case DType::kBF16:
    case DType::kF16:
      for (int64_t i = 0; i < m.cols; ++i) {
        uint16_t v;
        std::memcpy(&v, row + 2 * i, 2);
        out[i] = m.dtype == DType::kBF16 ? bf16_to_f32(v) : f16_to_f32(v);
      }
      return;
    case DType::kQ8_0:
      return reference_q8_0(row, m.cols, out);
    case DType::kMXFP4:
      return reference_mxfp4(row, m.cols, out);
    case DType::kQ4_K:
      return reference_q4_k(row, m.cols, out);
    case DType::kQ6_K:
      return reference_q6_k(row, m.cols, out);
    case DType::kFP8: {
      const float* scales = m.scales + (r / m.scale_block_rows) * m.scale_stride;
      const auto* q = reinterpret_cast<const uint8_t*>(row);
      for (int64_t i = 0; i < m.cols; ++i) {
        out[i] = static_cast<double>(e4m3_to_f32(q[i])) * scales[i / m.scale_block_cols];
      }
      return;
    }
  }
}

void dequantize_row(const MatrixView& m, int64_t r, float* out) {
  thread_local std::vector<double> exact;
  exact.resize(static_cast<size_t>(m.cols));
  reference_row(m, r, exact.data());
  for (int64_t i = 0; i < m.cols; ++i) out[i] = static_cast<float>(exact[static_cast<size_t>(i)]);
}

uint16_t bf16_nearest(double value) {
  float f = static_cast<float>(value);  // nearest even
  if (static_cast<double>(f) != value && std::isfinite(f)) {
    // Round to odd: the float truncated toward zero, its last bit set (sticky), so that the bf16 rounding
    // sees whether the value was above, at or below a tie.
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (std::fabs(static_cast<double>(f)) > std::fabs(value)) bits -= 1;  // nonzero f: one step toward 0
    bits |= 1u;
    std::memcpy(&f, &bits, 4);
  }
  return f32_to_bf16(f);
}

void dequantize_row_bf16(const MatrixView& m, int64_t r, uint16_t* out) {
  thread_local std::vector<double> exact;
  exact.resize(static_cast<size_t>(m.cols));
  reference_row(m, r, exact.data());
  for (int64_t i = 0; i < m.cols; ++i) out[i] = bf16_nearest(exact[static_cast<size_t>(i)]);
}

void quantize_row(DType t, const float* x, int64_t cols, void* out) {
  if (cols % block_elems(t) != 0 || t == DType::kFP8 || !is_quantized(t)) {
    throw std::invalid_argument("quantize_row: " + std::string(to_string(t)) + " rows of " +
                                std::to_string(cols) +
                                " elements (a block type and whole blocks are needed)");
  }
  auto* dst = static_cast<std::byte*>(out);
  switch (t) {
    case DType::kQ8_0:
      return quantize_q8_0(x, cols, dst);
    case DType::kMXFP4:
      return quantize_mxfp4(x, cols, dst);
    case DType::kQ4_K:
      return quantize_q4_k(x, cols, dst);
    case DType::kQ6_K:
      return quantize_q6_k(x, cols, dst);
    default:
      return;
  }
}

uint8_t f32_to_e4m3(float v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(v));
  int code;
  if (a < 0x1p-6) {
    code = static_cast<int>(std::nearbyint(a * 0x1p9));  // subnormal steps of 2^-9 (8: the first normal)
  } else {
    int e = 0;
    std::frexp(a, &e);  // a = f 2^e, 0.5 <= f < 1: the normal exponent is e - 1
    const int n = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - (e - 1))));  // 8..16
    code = ((e + 6) << 3) + n - 8;                                               // 16: the next binade
  }
  return static_cast<uint8_t>(sign | std::min(code, 0x7e));
}

void quantize_fp8(const float* w, int64_t rows, int64_t cols, int32_t block_rows, int32_t block_cols,
                  uint8_t* q, float* scales) {
  if (block_rows <= 0 || block_cols <= 0)
    throw std::invalid_argument("quantize_fp8: block size must be positive");
  const int64_t sr = (rows + block_rows - 1) / block_rows, sc = (cols + block_cols - 1) / block_cols;
  for (int64_t br = 0; br < sr; ++br) {
    for (int64_t bc = 0; bc < sc; ++bc) {
      const int64_t r0 = br * block_rows, r1 = std::min(rows, r0 + block_rows);
      const int64_t c0 = bc * block_cols, c1 = std::min(cols, c0 + block_cols);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      }
      const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
      scales[br * sc + bc] = s;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) q[r * cols + c] = f32_to_e4m3(w[r * cols + c] / s);
      }
    }
  }
}

}  // namespace moe::kernels

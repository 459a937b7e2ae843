// The quantized formats' vocabulary (kernels/quant_formats.h): the block layouts byte for byte, the reference
// dequantizer against one written here independently from ggml's published fp32 expressions (ggml-quants.c's
// dequantize_row_*: d1 * q - m1 and d * sc * q in fp32), the fp16 / e4m3 narrowings exhaustively, the
// quantizers' round trips, and the view checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/quant_formats.h"
#include "tests/support/expect_invalid.h"

namespace moe::kernels {
namespace {

TEST(QuantFormats, BlocksAreGgmlsBytes) {
  EXPECT_EQ(offsetof(BlockQ8_0, qs), 2u);
  EXPECT_EQ(offsetof(BlockMxfp4, qs), 1u);
  EXPECT_EQ(offsetof(BlockQ4_K, dmin), 2u);
  EXPECT_EQ(offsetof(BlockQ4_K, scales), 4u);
  EXPECT_EQ(offsetof(BlockQ4_K, qs), 16u);
  EXPECT_EQ(offsetof(BlockQ6_K, qh), 128u);
  EXPECT_EQ(offsetof(BlockQ6_K, scales), 192u);
  EXPECT_EQ(offsetof(BlockQ6_K, d), 208u);
  EXPECT_EQ(row_bytes(DType::kQ4_K, 512), 288u);
  EXPECT_EQ(row_bytes(DType::kMXFP4, 64), 34u);
  EXPECT_EQ(row_bytes(DType::kFP8, 7), 7u);
  EXPECT_EQ(dtype_size(DType::kQ6_K), 0u);
}

// A finite fp16 of random magnitude between 2^-20 (subnormal) and 2^3.
uint16_t random_f16(std::mt19937& rng) {
  for (;;) {
    const auto bits = static_cast<uint16_t>(rng() & 0xffff);
    const int e = (bits >> 10) & 31;
    if (e != 31 && (e == 0 || e <= 18)) return bits;
  }
}

// ggml's expressions, in fp32 (this file is built with -ffp-contract=off, as ggml's reference is meant).
std::vector<float> ggml_q8_0(const std::vector<uint8_t>& b) {
  std::vector<float> y(32);
  uint16_t d16;
  std::memcpy(&d16, b.data(), 2);
  const float d = f16_to_f32(d16);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
  return y;
}

std::vector<float> ggml_mxfp4(const std::vector<uint8_t>& b) {
  static const int kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  std::vector<float> y(32);
  const uint8_t e = b[0];
  const float d = e < 2 ? std::ldexp(1.0f, -128 + e) : std::ldexp(1.0f, e - 128);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(kv[b[1 + j] & 15]) * d;
    y[j + 16] = static_cast<float>(kv[b[1 + j] >> 4]) * d;
  }
  return y;
}

std::vector<float> ggml_q4_k(const std::vector<uint8_t>& b) {
  std::vector<float> y;
  uint16_t d16, m16;
  std::memcpy(&d16, b.data(), 2);
  std::memcpy(&m16, b.data() + 2, 2);
  const float d = f16_to_f32(d16), min = f16_to_f32(m16);
  const uint8_t* s = b.data() + 4;
  const uint8_t* q = b.data() + 16;
  auto scale_min = [s](int j, int* sc, int* m) {
    if (j < 4) {
      *sc = s[j] & 63;
      *m = s[j + 4] & 63;
    } else {
      *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
      *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
  };
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    int sc, m;
    scale_min(is, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
    scale_min(is + 1, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) y.push_back(d1 * static_cast<float>(q[l] & 0xF) - m1);
    for (int l = 0; l < 32; ++l) y.push_back(d2 * static_cast<float>(q[l] >> 4) - m2);
  }
  return y;
}

std::vector<float> ggml_q6_k(const std::vector<uint8_t>& b) {
  std::vector<float> y(256);
  uint16_t d16;
  std::memcpy(&d16, b.data() + 208, 2);
  const float d = f16_to_f32(d16);
  const uint8_t* ql = b.data();
  const uint8_t* qh = b.data() + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b.data() + 192);
  for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[n + l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[n + l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[n + l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[n + l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
  return y;
}

TEST(QuantFormats, DequantizeRowIsGgmlsBitForBit) {
  std::mt19937 rng(7);
  struct Format {
    DType type;
    std::vector<float> (*ggml)(const std::vector<uint8_t>&);
    std::vector<size_t> f16_at;  // byte offsets of fp16 fields
  };
  const Format formats[] = {{DType::kQ8_0, ggml_q8_0, {0}},
                            {DType::kMXFP4, ggml_mxfp4, {}},
                            {DType::kQ4_K, ggml_q4_k, {0, 2}},
                            {DType::kQ6_K, ggml_q6_k, {208}}};
  for (const Format& f : formats) {
    SCOPED_TRACE(to_string(f.type));
    const size_t bb = block_bytes(f.type);
    const int64_t be = block_elems(f.type);
    int64_t compared = 0;
    for (int trial = 0; trial < 400; ++trial) {
      std::vector<uint8_t> b(bb);
      for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
      for (size_t at : f.f16_at) {
        const uint16_t h = random_f16(rng);
        std::memcpy(b.data() + at, &h, 2);
      }
      if (f.type == DType::kMXFP4 && b[0] == 0xff) b[0] = static_cast<uint8_t>(trial % 255);
      if (f.type == DType::kMXFP4 && trial < 4) b[0] = static_cast<uint8_t>(trial);  // subnormal scales
      const MatrixView m{b.data(), f.type, 1, be, be};
      std::vector<float> ours(static_cast<size_t>(be));
      dequantize_row(m, 0, ours.data());
      const std::vector<float> theirs = f.ggml(b);
      for (int64_t i = 0; i < be; ++i) {
        ASSERT_EQ(std::memcmp(&ours[i], &theirs[i], 4), 0)
            << "trial " << trial << " element " << i << ": " << ours[i] << " vs " << theirs[i];
        ++compared;
      }
    }
    EXPECT_EQ(compared, 400 * be);
  }
}

TEST(QuantFormats, Fp8ValuesAndScales) {
  // Every e4m3 code: the OCP value, exact in bf16; NaN for 0x7f / 0xff.
  for (int b = 0; b < 256; ++b) {
    const float v = e4m3_to_f32(static_cast<uint8_t>(b));
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v));
      continue;
    }
    const int e = (b >> 3) & 15, m = b & 7;
    const double want = (b & 0x80 ? -1.0 : 1.0) *
                        (e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7));
    EXPECT_EQ(v, want) << b;
    EXPECT_EQ(f32_to_e4m3(v), b == 0x80 ? 0x80 : b) << b;  // round trip
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  // Ties to even, saturation.
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);   // between 1 (0x38) and 1.125 (0x39): even
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);   // between 1.125 and 1.25: even (0x3a)
  EXPECT_EQ(f32_to_e4m3(0x1p-10f), 0x00);  // half of the smallest subnormal: even (0)
  EXPECT_EQ(f32_to_e4m3(3 * 0x1p-10f), 0x02);
  EXPECT_EQ(f32_to_e4m3(1e9f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-1e9f), 0xfe);
  // A block-scaled row: element i times its block's scale.
  const uint8_t q[5] = {0x38, 0x40, 0xb8, 0x01, 0x7e};
  const float scales[2 * 3] = {0.5f, 2.0f, 4.0f, -1.0f, 8.0f, 3.0f};
  const MatrixView m{q, DType::kFP8, 2, 5, 0, scales, 3, 1, 2};  // row stride 0: both rows read q
  double out[5];
  reference_row(m, 1, out);
  EXPECT_EQ(out[0], -1.0);
  EXPECT_EQ(out[1], -2.0);
  EXPECT_EQ(out[2], -8.0);
  EXPECT_EQ(out[3], 8 * 0x1p-9);
  EXPECT_EQ(out[4], 3 * 448.0);
}

TEST(QuantFormats, F16NarrowingRoundsToNearestEven) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float v = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(v))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(v), h) << h;
    // The midpoint to the next finite value of the same sign rounds to the even neighbour.
    if ((h & 0x7fff) < 0x7bff) {
      const float next = f16_to_f32(static_cast<uint16_t>(h + 1));
      const float mid = static_cast<float>((static_cast<double>(v) + next) / 2);  // exact in fp32
      const uint32_t even = h % 2 == 0 ? h : h + 1;
      ASSERT_EQ(f32_to_f16(mid), even) << h;
      ASSERT_EQ(f32_to_f16(std::nextafter(mid, next)), h + 1) << h;
      ASSERT_EQ(f32_to_f16(std::nextafter(mid, v)), h) << h;
    }
  }
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e30f), 0xfc00);
}

TEST(QuantFormats, QuantizersRoundTripWithinTheFormatsStep) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t cols = 512;
  std::vector<float> x(static_cast<size_t>(cols));
  for (float& v : x) v = normal(rng);
  // The relative rms error of each format on gaussian values (4 bits: ~1/15 of a sub-block's range).
  const std::pair<DType, double> bounds[] = {
      {DType::kQ8_0, 0.01}, {DType::kQ6_K, 0.03}, {DType::kQ4_K, 0.12}, {DType::kMXFP4, 0.2}};
  for (const auto& [type, bound] : bounds) {
    std::vector<std::byte> q(row_bytes(type, cols));
    quantize_row(type, x.data(), cols, q.data());
    std::vector<float> back(static_cast<size_t>(cols));
    dequantize_row(MatrixView{q.data(), type, 1, cols, cols}, 0, back.data());
    double err = 0, norm = 0;
    for (int64_t i = 0; i < cols; ++i) {
      err += (back[i] - x[i]) * (back[i] - x[i]);
      norm += x[i] * x[i];
    }
    std::printf("  %s round trip: relative rms error %.4f\n", std::string(to_string(type)).c_str(),
                std::sqrt(err / norm));
    EXPECT_LE(std::sqrt(err / norm), bound) << to_string(type);
  }
  // FP8 with 128 x 128 blocks: e4m3 keeps 4 significant bits, ~2^-5 relative.
  const int64_t rows = 3;
  std::vector<float> w(static_cast<size_t>(rows * 200));
  for (float& v : w) v = normal(rng);
  std::vector<uint8_t> q(w.size());
  std::vector<float> scales(2);
  quantize_fp8(w.data(), rows, 200, 128, 128, q.data(), scales.data());
  const MatrixView m{q.data(), DType::kFP8, rows, 200, 200, scales.data(), 2, 128, 128};
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> back(200);
    dequantize_row(m, r, back.data());
    for (int64_t i = 0; i < 200; ++i) {
      ASSERT_LE(std::fabs(back[i] - w[r * 200 + i]),
                0x1p-4 * std::fabs(w[r * 200 + i]) + scales[i / 128] * 0x1p-10);
    }
  }
}

TEST(QuantFormats, ViewsAreCheckedByName) {
  uint8_t bytes[64] = {};
  float scale = 1.0f;
  testing::ExpectInvalid(
      [&] {
        validate_view(MatrixView{bytes, DType::kQ8_0, 1, 48, 48}, "w");
      },
      "w: q8_0 rows are whole blocks of 32 elements: cols 48");
  testing::ExpectInvalid(
      [&] {
        validate_view(MatrixView{nullptr, DType::kQ4_K, 1, 256, 256}, "w");
      },
      "w: data is null");
  testing::ExpectInvalid(
      [&] {
        validate_view(MatrixView{bytes, DType::kFP8, 1, 8, 8}, "w");
      },
      "w: fp8 block size 0 x 0 must be positive");
  testing::ExpectInvalid(
      [&] {
        validate_view(MatrixView{bytes, DType::kFP8, 1, 8, 8, nullptr, 1, 128, 128}, "w");
      },
      "w: fp8 block scales are null");
  testing::ExpectInvalid(
      [&] {
        validate_view(MatrixView{bytes, DType::kFP8, 1, 300, 300, &scale, 2, 128, 128}, "w");
      },
      "w: fp8 scale_stride 2 is below the 3 scale blocks of a row");
  testing::ExpectInvalid(
      [&] {
        validate_view(MatrixView{bytes, DType::kQ8_0, 1, 32, 32, &scale, 1, 1, 1}, "w");
      },
      "w: q8_0 matrices have no block scales beside them");
  validate_view(MatrixView{bytes, DType::kFP8, 1, 8, 8, &scale, 1, 128, 128}, "w");
  validate_view(MatrixView{bytes, DType::kMXFP4, 1, 64, 64}, "w");
}

}  // namespace
}  // namespace moe::kernels

// moe/io's private element conversions: exactness of widening, round-to-nearest-even of narrowing.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "kernels/bf16.h"
#include "moe/io/dtype_convert.h"

namespace moe::io::internal {

// The weights loader rounds with the project's one bf16 conversion (kernels/bf16.h).
using kernels::bf16_to_f32;
using kernels::f32_to_bf16;
namespace {

uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}

TEST(DtypeConvert, Bf16ToF32IsTheHighHalf) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    EXPECT_EQ(bits(bf16_to_f32(static_cast<uint16_t>(b))), b << 16);
  }
}

TEST(DtypeConvert, F32ToBf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);  // above tie
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f807fffu)), 0x3f80);  // below tie
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0xbf818000u)), 0xbf82);  // negative tie
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // overflows to +Inf
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x00000001u)), 0x0000);  // tiny subnormal rounds to 0
  // NaN stays NaN, sign kept, even when the payload lives only in the low bits.
  const uint16_t nan = f32_to_bf16(std::bit_cast<float>(0xff800001u));
  EXPECT_EQ(nan & 0xff80, 0xff80);
  EXPECT_NE(nan & 0x007f, 0);
}

// Every bf16 value survives bf16 -> f32 -> bf16 unchanged (except NaN payloads get the quiet bit).
TEST(DtypeConvert, Bf16RoundTripIsIdentity) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_bf16(f), b);
  }
}

// Every f16 value widens to the exact float: checked against ldexp arithmetic in double.
TEST(DtypeConvert, F16ToF32IsExactForAllInputs) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const int sign = (h >> 15) ? -1 : 1;
    const int exponent = (h >> 10) & 0x1f;
    const int mantissa = h & 0x3ff;
    const float got = f16_to_f32(static_cast<uint16_t>(h));
    if (exponent == 0x1f) {
      if (mantissa == 0) {
        EXPECT_EQ(got, sign * std::numeric_limits<float>::infinity());
      } else {
        EXPECT_TRUE(std::isnan(got)) << h;
      }
      continue;
    }
    const double want =
        exponent == 0 ? sign * std::ldexp(mantissa, -24) : sign * std::ldexp(1024 + mantissa, exponent - 25);
    EXPECT_EQ(static_cast<double>(got), want) << "f16 bits " << h;
    EXPECT_EQ(std::signbit(got), sign < 0) << h;
  }
}

TEST(DtypeConvert, ConvertHandlesUnalignedBuffers) {
  alignas(8) std::byte src[1 + 3 * 4];
  const float vals[3] = {1.0f, -3.0f, 0.5f};
  std::memcpy(src + 1, vals, sizeof(vals));
  alignas(8) std::byte dst[1 + 3 * 2];
  convert(src + 1, kernels::DType::kF32, dst + 1, kernels::DType::kBF16, 3);
  uint16_t out[3];
  std::memcpy(out, dst + 1, sizeof(out));
  EXPECT_EQ(out[0], 0x3f80);
  EXPECT_EQ(out[1], 0xc040);
  EXPECT_EQ(out[2], 0x3f00);
  EXPECT_THROW(convert(src, kernels::DType::kF32, dst, kernels::DType::kF16, 1), std::invalid_argument);
}

}  // namespace
}  // namespace moe::io::internal

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "base/float_bits.h"
#include "kernels/bf16.h"

namespace moe::kernels {
namespace {

TEST(Bf16, WideningIsExactAndRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = bf16_to_f32(h);
    EXPECT_EQ(float_bits(f), b << 16);
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_bf16(f), h) << std::hex << b;
    }
  }
}

TEST(Bf16, RoundsToNearestEven) {
  // 1.0 = 0x3f800000; one bf16 ulp at 1.0 is 0x10000 in fp32 bits.
  EXPECT_EQ(f32_to_bf16(float_from_bits(0x3f808000u)), 0x3f80);  // exact tie, even stays
  EXPECT_EQ(f32_to_bf16(float_from_bits(0x3f818000u)), 0x3f82);  // exact tie, odd rounds up to even
  EXPECT_EQ(f32_to_bf16(float_from_bits(0x3f808001u)), 0x3f81);  // just above the tie
  EXPECT_EQ(f32_to_bf16(float_from_bits(0x3f807fffu)), 0x3f80);  // just below the tie
  EXPECT_EQ(f32_to_bf16(float_from_bits(0xbf808001u)), 0xbf81);  // sign is symmetric
  EXPECT_EQ(f32_to_bf16(1.0f / 3.0f), 0x3eab);
}

TEST(Bf16, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_bf16(inf), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-inf), 0xff80);
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  // Largest finite float rounds up to inf; the largest bf16 stays.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(float_from_bits(0x7f7f0000u)), 0x7f7f);
  // Subnormals are kept, not flushed.
  EXPECT_EQ(f32_to_bf16(float_from_bits(0x00010000u)), 0x0001);
  EXPECT_EQ(f32_to_bf16(float_from_bits(0x00018000u)), 0x0002);
  // NaNs stay NaN (never rounded into inf), quiet, with their sign; including payloads in the low bits.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xff800001u, 0xffc00000u}) {
    const uint16_t h = f32_to_bf16(float_from_bits(nan));
    EXPECT_TRUE(std::isnan(bf16_to_f32(h))) << std::hex << nan;
    EXPECT_EQ(h & 0x8000u, (nan >> 16) & 0x8000u);
    EXPECT_NE(h & 0x0040u, 0u);
  }
}

TEST(Bf16, ArrayConversion) {
  const float src[5] = {1.0f, -2.5f, 3.14159f, 1e-30f, 65504.0f};
  uint16_t mid[5];
  float back[5];
  f32_to_bf16(src, mid, 5);
  bf16_to_f32(mid, back, 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(back[i], round_to_bf16(src[i]));
    EXPECT_LE(std::fabs(back[i] - src[i]), std::fabs(src[i]) * 0x1p-8f);
  }
}

}  // namespace
}  // namespace moe::kernels

// The vdpbf16ps contract of kernels/cpu/dpbf16.h: the scalar emulation's documented rules (on any build),
// and, on a CPU with AVX512_BF16, the hardware's bits equal to the emulation's on ~1.5 million lanes
// (tests/support/dpbf16_cases.h) and independent of MXCSR.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <limits>

#include "base/float_bits.h"
#include "kernels/cpu/dpbf16.h"
#include "tests/support/dpbf16_cases.h"

#if MOE_HAVE_AVX512_BF16_TARGET
#include <xmmintrin.h>
#endif

namespace moe::kernels {
namespace {

constexpr uint16_t kOne = 0x3f80, kTwo = 0x4000, kMinusOne = 0xbf80;

TEST(Dpbf16Contract, OddPairFirstEachStepRounded) {
  // c = 2^24, odd product 1, even product 1. Odd first: 2^24 + 1 -> 2^24 (tie to even), + 1 -> 2^24.
  // The other order gives the same; use a case where it matters: odd product -2^24, even product 1:
  // odd first: 2^24 - 2^24 = 0, then + 1 = 1. Even first: 2^24 + 1 = 2^24, - 2^24 = 0.
  const uint16_t two24 = 0x4b80, minus_two24 = 0xcb80;
  EXPECT_EQ(dpbf16(0x1p24f, kOne, minus_two24, kOne, kOne), 1.0f);
  EXPECT_EQ(dpbf16(0x1p24f, minus_two24, kOne, kOne, kOne), 0.0f);
  EXPECT_EQ(dpbf16(0x1p24f, two24, 0, kOne, 0), 0x1p25f);
  // Two roundings, not one: c = 1, odd 2^-24 (a tie: stays 1), even 2^-24 (again 1); one rounding of
  // 1 + 2^-23 would keep it.
  const uint16_t two_m24 = 0x3380;
  EXPECT_EQ(dpbf16(1.0f, two_m24, two_m24, kOne, kOne), 1.0f);
  EXPECT_EQ(dpbf16(1.0f, 0, kTwo, 0, kMinusOne), -1.0f);
}

TEST(Dpbf16Contract, SubnormalsAreZeroAndTinyResultsFlushAfterRounding) {
  // bf16 subnormal operand reads as zero.
  EXPECT_EQ(float_bits(dpbf16(0.0f, 0x0001, 0, kOne, 0)), 0u);
  EXPECT_EQ(dpbf16(1.0f, 0x0040, 0, 0x7f00, 0), 1.0f);  // 2^-127 * 2^127 would be 0.5: flushed operand
  // Subnormal accumulator reads as zero (sign kept: -0 + (+0) = +0, -0 + (-0) = -0).
  EXPECT_EQ(float_bits(dpbf16(float_from_bits(0x00000005u), 0, 0, 0, 0)), 0u);
  EXPECT_EQ(float_bits(dpbf16(float_from_bits(0x80000005u), 0x8000, 0x8000, 0, 0)), 0x80000000u);
  // Subnormal results flush to a signed zero.
  const uint16_t two_m70 = 0x1c80;  // 2^-70 * 2^-70 = 2^-140
  EXPECT_EQ(float_bits(dpbf16(0.0f, two_m70, 0, two_m70, 0)), 0u);
  EXPECT_EQ(float_bits(dpbf16(0.0f, two_m70, 0, static_cast<uint16_t>(two_m70 | 0x8000), 0)), 0x80000000u);
  // At 2^-126: c = 2^-126, product -2^-150 -> 2^-126 - 2^-150 has 24 bits: tiny after rounding, flushed.
  // Product -2^-151: rounds (tie, even) up to 2^-126: kept.
  const uint16_t two_m75 = 0x1a00;
  EXPECT_EQ(float_bits(dpbf16(0x1p-126f, two_m75, 0, 0x9a00, 0)), 0u);
  EXPECT_EQ(float_bits(dpbf16(0x1p-126f, two_m75, 0, 0x9980, 0)), 0x00800000u);
  // The intermediate is flushed too: odd step 2^-126 - 2^-150 -> 0, then + 2^-150 stays tiny -> 0.
  EXPECT_EQ(float_bits(dpbf16(0x1p-126f, two_m75, two_m75, 0x1a00, 0x9a00)), 0u);
}

TEST(Dpbf16Contract, NaNsInfinitiesAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  // First NaN of (a, b, c) in the step, made quiet; the odd step runs first.
  EXPECT_EQ(float_bits(dpbf16(float_from_bits(0x7fa00000u), 0, 0x7f81, 0, 0xff82)), 0x7fc10000u);
  EXPECT_EQ(float_bits(dpbf16(float_from_bits(0x7fa00000u), 0, 0, 0, 0xff82)), 0xffc20000u);
  EXPECT_EQ(float_bits(dpbf16(float_from_bits(0x7fa00000u), 0x7f81, 0, 0, 0)),
            0x7fc10000u);  // even step: a beats c
  EXPECT_EQ(float_bits(dpbf16(0.0f, 0x7f81, 0xff82, 0, 0)), 0x7fc10000u);
  // Invalid operations give the negative default NaN.
  EXPECT_EQ(float_bits(dpbf16(0.0f, 0, 0x7f80, 0, 0)), 0xffc00000u);
  EXPECT_EQ(float_bits(dpbf16(-inf, 0, 0x7f80, 0, kOne)), 0xffc00000u);
  EXPECT_EQ(float_bits(dpbf16(0.0f, 0, 0x7f80, 0, 0x0001)), 0xffc00000u);  // inf * subnormal = inf * 0
  // Overflow.
  EXPECT_EQ(dpbf16(std::numeric_limits<float>::max(), 0x7f7f, 0, 0x3f80, 0), inf);
  EXPECT_EQ(dpbf16(1.0f, 0x7f00, 0, 0x7f00, 0), inf);
}

#if MOE_HAVE_AVX512_BF16_TARGET
#define SKIP_WITHOUT_AVX512_BF16()                                                                     \
  if (!cpu_has_avx512_bf16()) {                                                                        \
    GTEST_SKIP() << "this CPU has no AVX512_BF16 (vdpbf16ps): only the emulation's rules are checked"; \
  }

size_t count_mismatches(const std::vector<testing::DpLane>& in, const std::vector<uint32_t>& hw) {
  size_t mismatches = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const testing::DpLane& l = in[i];
    const uint32_t e = float_bits(dpbf16(l.c, l.a0, l.a1, l.b0, l.b1));
    if (e != hw[i]) {
      if (++mismatches <= 5) {
        std::printf("mismatch: c=%08x a=(%04x,%04x) b=(%04x,%04x) hardware=%08x emulation=%08x\n",
                    float_bits(l.c), l.a0, l.a1, l.b0, l.b1, hw[i], e);
      }
    }
  }
  return mismatches;
}

TEST(Dpbf16Hardware, MatchesEmulationBitForBit) {
  SKIP_WITHOUT_AVX512_BF16();
  const auto in = testing::dpbf16_cases();
  const auto hw = testing::dpbf16_hardware(in);
  EXPECT_EQ(count_mismatches(in, hw), 0u) << "of " << in.size() << " lanes";
  std::printf("vdpbf16ps == emulation on %zu lanes checked\n", in.size());
}

TEST(Dpbf16Hardware, IgnoresMxcsr) {
  SKIP_WITHOUT_AVX512_BF16();
  const auto in = testing::dpbf16_cases(777, 1);
  const auto hw = testing::dpbf16_hardware(in);
  const unsigned saved = _mm_getcsr();
  // FTZ (bit 15), DAZ (bit 6), round toward zero (bits 14:13 = 11).
  _mm_setcsr(saved | 0x8000u | 0x0040u | 0x6000u);
  const auto hw2 = testing::dpbf16_hardware(in);
  _mm_setcsr(saved);
  EXPECT_TRUE(hw == hw2);
}
#endif

}  // namespace
}  // namespace moe::kernels

// The tile contract of kernels/cpu/tile_bf16.h (what AMX's tdpbf16ps computes): the documented rules on
// hand-computed cases, through the emulation and every tile kernel this CPU has (on any build), and, on a CPU
// with AMX-BF16, the hardware instruction's bits equal to the emulation's on ~1.5 million one-pair lanes
// (tests/support/dpbf16_cases.h) and on 1- to 16-pair elements with special values sprinkled in.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "base/float_bits.h"
#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/tile_bf16.h"
#include "tests/support/amx_tile.h"
#include "tests/support/dpbf16_cases.h"

namespace moe::kernels {
namespace {

constexpr uint16_t kOne = 0x3f80, kTwo24 = 0x4b80;

// One output of a one-row product with weights w (in elements) and activations x, by every tile kernel this
// CPU has; all must agree with the emulation, and the emulation's answer is returned.
uint32_t tile_output(const std::vector<uint16_t>& x, const std::vector<uint16_t>& w) {
  const int64_t in = static_cast<int64_t>(w.size());
  const PackedBf16Weights packed(MatrixView{w.data(), DType::kBF16, 1, in, in});
  std::vector<uint16_t> xb(static_cast<size_t>(2 * bf16_pairs(in)), 0);
  std::copy(x.begin(), x.end(), xb.begin());
  float expected = 0.0f;
  linear_bf16_rounded_portable(xb.data(), 1, packed, &expected, 1, Bf16Contract::kTile);
  ThreadPool pool(1);
  for (Bf16Kernel k : {Bf16Kernel::kPortableTile, Bf16Kernel::kAvx512FmaTile, Bf16Kernel::kAmx}) {
    if (!bf16_kernel_available(k)) continue;
    float y = -1.0f;
    linear_bf16_rounded_with(k, xb.data(), 1, packed, &y, 1, pool);
    EXPECT_EQ(float_bits(y), float_bits(expected)) << to_string(k) << " kernel, in=" << in;
  }
  return float_bits(expected);
}

TEST(TileBf16Contract, TwoChainsPerBlockThenOneSum) {
  // Pairs (2^24, 1) x (1, 1) and (0, 1) x (1, 1): the even chain is 2^24, the odd one 1 + 1 = 2, their sum
  // 2^24 + 2 is exact. The pair contract (one chain, odd first) rounds 1 + 2^24 and 2^24 + 1 to 2^24.
  const std::vector<uint16_t> x = {kTwo24, kOne, 0, kOne}, w = {kOne, kOne, kOne, kOne};
  EXPECT_EQ(tile_output(x, w), float_bits(0x1p24f + 2.0f));
  std::vector<uint16_t> xb = x;
  const PackedBf16Weights packed(MatrixView{w.data(), DType::kBF16, 1, 4, 4});
  float pair = 0.0f;
  linear_bf16_rounded_portable(xb.data(), 1, packed, &pair, 1, Bf16Contract::kPair);
  EXPECT_EQ(pair, 0x1p24f);
}

TEST(TileBf16Contract, BlocksStartEvery16Pairs) {
  // 17 pairs: pair 0 = (2^24, 0) x (1, 0), pair 16 = (1, 1) x (1, 1). Blocks [0, 16) and [16, 32): 2^24, then
  // + (1 + 1) = 2^24 + 2. One 17-pair block would give 2^24 + 1 -> 2^24 in the even chain, then 2^24 + 1
  // -> 2^24.
  std::vector<uint16_t> x(34, 0), w(34, 0);
  x[0] = kTwo24;
  w[0] = kOne;
  x[32] = x[33] = w[32] = w[33] = kOne;
  EXPECT_EQ(tile_output(x, w), float_bits(0x1p24f + 2.0f));
}

TEST(TileBf16Contract, NaNOrder) {
  // One block: the even chain's NaN (from x[0]) comes before the odd chain's, each made quiet.
  EXPECT_EQ(tile_output({0x7f81, 0x7f82}, {kOne, kOne}), 0x7fc10000u);
  // Two blocks: the accumulator's NaN (block 0) before the block's.
  std::vector<uint16_t> x(34, 0), w(34, kOne);
  x[0] = 0x7f81;
  x[32] = 0xff83;
  EXPECT_EQ(tile_output(x, w), 0x7fc10000u);
  // A product's NaN: x before w.
  EXPECT_EQ(tile_output({0x7f85, 0}, {0xff86, 0}), 0x7fc50000u);
  // inf * 0 gives the default NaN.
  EXPECT_EQ(tile_output({0x7f80, 0}, {0, 0}), 0xffc00000u);
}

TEST(TileBf16Contract, SubnormalsFlushAndPaddingPairsAreZeros) {
  // 33 pairs, three blocks. Block 0: 2^-63 * 2^-63 = 2^-126 (acc = 2^-126). Block 1: -(1 + 2^-7) 2^-126, so
  // acc + t = -2^-133, tiny: flushed to -0. Block 2 has one pair, 2^-70 * -2^-70 = -2^-140 in each chain,
  // flushed to -0, then 15 padding pairs (+0 x +0) turn each chain into +0: acc = -0 + +0 = +0. Without the
  // padding the chains would stay -0 and the output would be -0.
  std::vector<uint16_t> x(66, 0), w(66, 0);
  x[0] = 0x2000;  // 2^-63
  w[0] = 0x2000;
  x[32] = 0xa001;  // -(1 + 2^-7) 2^-63
  w[32] = 0x2000;
  x[64] = x[65] = 0x1c80;  // 2^-70
  w[64] = w[65] = 0x9c80;  // -2^-70
  EXPECT_EQ(tile_output(x, w), 0x00000000u);
  // A subnormal operand reads as zero: 2^-127 (bf16 subnormal) * 2^127 adds nothing.
  EXPECT_EQ(tile_output({0x0040, kOne}, {0x7f00, kOne}), float_bits(1.0f));
}

#if MOE_HAVE_AMX_TARGET
#define SKIP_WITHOUT_AMX()                                                                          \
  if (!cpu_has_amx_bf16()) {                                                                        \
    GTEST_SKIP() << "this CPU (or OS) has no AMX-BF16 (tdpbf16ps): only the emulation's rules and " \
                    "the tile emulation kernel are checked";                                        \
  }

TEST(TileBf16Hardware, MatchesEmulationOnOnePairLanes) {
  SKIP_WITHOUT_AMX();
  std::vector<testing::DpLane> in = testing::dpbf16_cases();
  in.resize(in.size() - in.size() % 16);  // whole tiles: lane m of a tile is element (m, m)
  size_t mismatches = 0;
  for (size_t base = 0; base < in.size(); base += 16) {
    alignas(64) float c[256];
    alignas(64) uint16_t a[32], b[32];
    for (int m = 0; m < 16; ++m) {
      const testing::DpLane& l = in[base + m];
      for (int j = 0; j < 16; ++j) c[m * 16 + j] = l.c;
      a[2 * m] = l.a0;
      a[2 * m + 1] = l.a1;
      b[2 * m] = l.b0;
      b[2 * m + 1] = l.b1;
    }
    testing::amx_tile_dp(c, a, b, 1);
    for (int m = 0; m < 16; ++m) {
      const testing::DpLane& l = in[base + m];
      const uint16_t xe[2] = {l.a0, l.a1};
      const uint32_t wp = static_cast<uint32_t>(l.b0) | static_cast<uint32_t>(l.b1) << 16;
      const uint32_t e = float_bits(tdpbf16_element(
          l.c, 1, [&](int64_t i) -> uint32_t { return xe[i]; }, [&](int64_t) { return wp; }));
      const uint32_t h = float_bits(c[m * 16 + m]);
      if (e != h && ++mismatches <= 5) {
        std::printf("mismatch: c=%08x a=(%04x,%04x) b=(%04x,%04x) hardware=%08x emulation=%08x\n",
                    float_bits(l.c), l.a0, l.a1, l.b0, l.b1, h, e);
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << in.size() << " lanes";
  std::printf("tdpbf16ps == tile emulation on %zu one-pair lanes\n", in.size());
}

TEST(TileBf16Hardware, MatchesEmulationOnMultiPairElements) {
  SKIP_WITHOUT_AMX();
  std::mt19937_64 rng(11);
  const auto special = [&]() -> uint16_t {
    const uint16_t sign = static_cast<uint16_t>(rng() & 0x8000u);
    switch (rng() % 6) {
      case 0:
        return sign | 0x7f80;  // inf
      case 1:
        return static_cast<uint16_t>(sign | 0x7f80 | (1 + rng() % 0x7f));  // NaN with a payload
      case 2:
        return static_cast<uint16_t>(sign | (rng() % 0x80));  // subnormal or zero
      case 3:
        return sign | 0x7f7f;  // the largest finite
      default:
        return static_cast<uint16_t>(rng());
    }
  };
  const auto value = [&](double p_special) -> uint16_t {
    if (static_cast<double>(rng() % 1000000) < p_special * 1e6) return special();
    const uint32_t e = 100 + static_cast<uint32_t>(rng() % 50);
    return static_cast<uint16_t>(((rng() & 1) << 15) | (e << 7) | (rng() & 0x7f));
  };
  size_t elements = 0, mismatches = 0;
  for (double p_special : {0.0, 0.002, 0.05}) {
    for (int pairs : {1, 2, 3, 8, 15, 16}) {
      for (int rep = 0; rep < 200; ++rep) {
        alignas(64) float c[256], c0[256];
        alignas(64) uint16_t a[512], b[512];
        for (float& v : c) {
          const uint32_t u =
              static_cast<uint32_t>(rng() % 1000000) < p_special * 1e6
                  ? static_cast<uint32_t>(special()) << 16 | static_cast<uint32_t>(rng() & 0xffff)
                  : static_cast<uint32_t>(((rng() & 1) << 31) | ((90 + rng() % 60) << 23) |
                                          (rng() & 0x7fffff));
          v = float_from_bits(u);
        }
        for (uint16_t& v : a) v = value(p_special);
        for (uint16_t& v : b) v = value(p_special);
        std::memcpy(c0, c, sizeof c);
        testing::amx_tile_dp(c, a, b, pairs);
        for (int m = 0; m < 16; ++m) {
          for (int j = 0; j < 16; ++j) {
            const uint16_t* xr = a + m * 2 * pairs;
            const uint32_t e = float_bits(tdpbf16_element(
                c0[m * 16 + j], pairs, [&](int64_t i) -> uint32_t { return xr[i]; },
                [&](int64_t p) {
                  return static_cast<uint32_t>(b[p * 32 + 2 * j]) |
                         static_cast<uint32_t>(b[p * 32 + 2 * j + 1]) << 16;
                }));
            ++elements;
            mismatches += e != float_bits(c[m * 16 + j]);
          }
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << elements << " elements";
  std::printf("tdpbf16ps == tile emulation on %zu elements of 1-16 pairs\n", elements);
}
#endif

}  // namespace
}  // namespace moe::kernels

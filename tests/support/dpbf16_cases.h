// Inputs for checking what vdpbf16ps computes: random lanes of several kinds plus every combination of
// special values, and the hardware's answer for them. Shared by tests/kernels_cpu_dpbf16_test.cc (which
// checks kernels/cpu/dpbf16.h against the CPU) and bench/dpbf16_probe.cc (which scores alternative
// emulations, for investigating a CPU on which the test fails).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#if MOE_HAVE_AVX512_BF16_TARGET
#include <immintrin.h>
#endif

namespace moe::testing {

// One lane: accumulator c, even pair (a0, b0), odd pair (a1, b1).
struct DpLane {
  float c;
  uint16_t a0, a1, b0, b1;
};

inline float dp_bits_to_f32(uint32_t u) {
  return std::bit_cast<float>(u);
}

// About 1.5 million lanes: (1) random bits, (2) moderate normal values, (3) cancellations against the
// accumulator or between the two products, (4) tiny products, subnormal bf16 operands and subnormal
// accumulators, (5) every combination of special values (+-0, +-inf, quiet and signalling NaNs with
// payloads, subnormals, the extremes), (6) overflow, (7) results around 2^-126, (8) the tie cases at
// the 2^-126 boundary that separate tininess before and after rounding.
inline std::vector<DpLane> dpbf16_cases(uint64_t seed = 12345, int scale = 1) {
  std::mt19937_64 rng(seed);
  std::vector<DpLane> in;
  const auto bits16 = [&] { return static_cast<uint16_t>(rng()); };
  const auto normal_bf = [&](int emin, int emax) {
    const uint32_t e = static_cast<uint32_t>(emin) + static_cast<uint32_t>(rng() % (emax - emin + 1));
    return static_cast<uint16_t>(((rng() & 1) << 15) | (e << 7) | (rng() & 0x7f));
  };
  const auto f32 = [&](uint32_t emin, uint32_t emax) {
    const uint32_t e = emin + static_cast<uint32_t>(rng() % (emax - emin + 1));
    return dp_bits_to_f32(static_cast<uint32_t>(((rng() & 1) << 31) | (e << 23) | (rng() & 0x7fffff)));
  };
  const auto wide = [](uint16_t h) { return dp_bits_to_f32(static_cast<uint32_t>(h) << 16); };
  const int n = 100000 * scale;
  for (int i = 0; i < 2 * n; ++i) {
    in.push_back({dp_bits_to_f32(static_cast<uint32_t>(rng())), bits16(), bits16(), bits16(), bits16()});
  }
  for (int i = 0; i < 2 * n; ++i) {
    in.push_back(
        {f32(100, 155), normal_bf(110, 140), normal_bf(110, 140), normal_bf(110, 140), normal_bf(110, 140)});
  }
  for (int i = 0; i < 2 * n; ++i) {
    uint16_t a0 = normal_bf(100, 150), a1 = normal_bf(120, 135), b0 = normal_bf(100, 150),
             b1 = normal_bf(120, 135);
    const float p1 = wide(a1) * wide(b1), p0 = wide(a0) * wide(b0);
    float c = 0.0f;
    switch (rng() % 4) {
      case 0:
        c = -p1;
        break;
      case 1:
        c = -p0;
        break;
      case 2:
        c = -(p0 + p1);
        break;
      default:
        c = dp_bits_to_f32(std::bit_cast<uint32_t>(-p1) ^ static_cast<uint32_t>(rng() & 0xff));
        break;
    }
    if (rng() % 2) {  // p0 = -p1
      a0 = static_cast<uint16_t>(a1 ^ 0x8000);
      b0 = b1;
    }
    in.push_back({c, a0, a1, b0, b1});
  }
  for (int i = 0; i < 3 * n; ++i) {
    uint16_t a0 = normal_bf(40, 90), a1 = normal_bf(40, 90), b0 = normal_bf(40, 90), b1 = normal_bf(40, 90);
    if (rng() % 4 == 0) a0 = static_cast<uint16_t>(rng() & 0x807f);  // subnormal bf16
    if (rng() % 4 == 0) b1 = static_cast<uint16_t>(rng() & 0x807f);
    float c = f32(0, 5);
    if (rng() % 3 == 0) c = -(wide(a1) * wide(b1));
    in.push_back({c, a0, a1, b0, b1});
  }
  const uint16_t sp16[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xff81, 0x7fa5, 0x0001,
                           0x8001, 0x007f, 0x0080, 0x3f80, 0xbf80, 0x7f7f, 0xff7f, 0x4000, 0x0040};
  const uint32_t sp32[] = {0,           0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
                           0x7f800001u, 0x7fa00000u, 0xffa12345u, 0x00000001u, 0x80000001u, 0x007fffffu,
                           0x00800000u, 0x3f800000u, 0x7f7fffffu, 0xff7fffffu};
  constexpr size_t kSp16 = sizeof(sp16) / sizeof(sp16[0]);
  for (uint32_t c : sp32) {
    for (uint16_t a0 : sp16) {
      for (uint16_t a1 : sp16) {
        for (uint16_t b0 : sp16) {
          for (size_t j = 0; j < 3; ++j) {
            const uint16_t b1 = sp16[(a0 * 7u + a1 * 3u + j * 5u + c) % kSp16];
            in.push_back({dp_bits_to_f32(c), a0, a1, b0, b1});
          }
        }
      }
    }
  }
  for (int i = 0; i < n; ++i) {
    in.push_back(
        {f32(250, 254), normal_bf(180, 254), normal_bf(180, 254), normal_bf(60, 130), normal_bf(60, 130)});
  }
  for (int i = 0; i < 2 * n; ++i) {
    in.push_back({f32(0, 2), normal_bf(60, 66), normal_bf(60, 66), normal_bf(60, 66), normal_bf(60, 66)});
  }
  // 2^-75 = bf16 0x1a00. c = 2^-126 plus a product of -2^-150 (a tie at 24 bits below 2^-126: tiny after
  // rounding, flushed), -2^-151 (rounds up to 2^-126: kept), -3 * 2^-151; in the even and the odd pair;
  // and their negations.
  for (uint16_t b : {uint16_t{0x9a00}, uint16_t{0x9980}, uint16_t{0x99c0}, uint16_t{0x9a80}}) {
    for (uint32_t sign : {0u, 1u}) {
      const float c = dp_bits_to_f32(0x00800000u | (sign << 31));
      const uint16_t bs = static_cast<uint16_t>(b ^ (sign << 15));
      in.push_back({c, 0x1a00, 0, bs, 0});
      in.push_back({c, 0, 0x1a00, 0, bs});
      in.push_back({c, 0x1a00, 0x1a00, bs, bs});
    }
  }
  return in;
}

#if MOE_HAVE_AVX512_BF16_TARGET
// The hardware's results (bits), 16 lanes per instruction. Call only when kernels::cpu_has_avx512_bf16().
MOE_TARGET_AVX512_BF16 inline std::vector<uint32_t> dpbf16_hardware(const std::vector<DpLane>& in) {
  std::vector<uint32_t> out(in.size());
  for (size_t i = 0; i < in.size(); i += 16) {
    alignas(64) float c[16] = {};
    alignas(64) uint16_t a[32] = {}, b[32] = {};
    const size_t n = std::min<size_t>(16, in.size() - i);
    for (size_t l = 0; l < n; ++l) {
      c[l] = in[i + l].c;
      a[2 * l] = in[i + l].a0;
      a[2 * l + 1] = in[i + l].a1;
      b[2 * l] = in[i + l].b0;
      b[2 * l + 1] = in[i + l].b1;
    }
    const __m512 r =
        _mm512_dpbf16_ps(_mm512_load_ps(c), (__m512bh)_mm512_load_si512(a), (__m512bh)_mm512_load_si512(b));
    alignas(64) float o[16];
    _mm512_store_ps(o, r);
    for (size_t l = 0; l < n; ++l) out[i + l] = std::bit_cast<uint32_t>(o[l]);
  }
  return out;
}
#endif

}  // namespace moe::testing

// amx_probe: does this CPU's AMX `tdpbf16ps` compute what kernels/cpu/dpbf16.h's contract (the rounding of
// one `vdpbf16ps` lane, which the invariant bf16 kernels keep) computes, per output element? An AMX kernel
// would serve the batch-invariant bf16 path only if it did (each output element of a tile product is one
// fixed sequence whatever its row, so invariance alone does not rule AMX out; its rounding does). Scores the
// contract and alternatives on tests/support/dpbf16_cases.h's lanes (one pair per element, the diagonal of a
// 16 x 16 tile) and on 16-pair elements of moderate values (the contract chained over the pairs), and prints
// how many disagree. A plain program (not run by scripts/bench.sh): build/bin/amx_probe
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/dpbf16.h"
#include "tests/support/dpbf16_cases.h"

#if !(defined(__x86_64__) && defined(__GNUC__))
int main() {
  std::printf("amx_probe: not an x86-64 GCC/Clang build (nothing to probe)\n");
  return 0;
}
#else
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {

using moe::kernels::dpbf16;
using moe::kernels::dpbf16_step;
using moe::kernels::dpbf16_detail::daz;
float wide(uint16_t h) {
  return moe::kernels::bf16_to_f32(h);
}
using moe::testing::DpLane;

bool cpu_has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool tile = (d >> 24) & 1u, bf16 = (d >> 22) & 1u;
  // Linux hands out the tile state on request only (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA).
  return tile && bf16 && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

struct TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// C (16 x 16 fp32, tile 0) += A (16 rows of `pairs` bf16 pairs, tile 1) x B (`pairs` rows of 16 pairs, tile
// 2).
__attribute__((target("amx-tile,amx-bf16"))) void tile_dp(float* c, const uint16_t* a, const uint16_t* b,
                                                          int pairs) {
  TileConfig cfg;
  cfg.rows[0] = 16;
  cfg.colsb[0] = 64;
  cfg.rows[1] = 16;
  cfg.colsb[1] = static_cast<uint16_t>(4 * pairs);
  cfg.rows[2] = static_cast<uint8_t>(pairs);
  cfg.colsb[2] = 64;
  _tile_loadconfig(&cfg);
  _tile_loadd(0, c, 64);
  _tile_loadd(1, a, 4 * pairs);
  _tile_loadd(2, b, 64);
  _tile_dpbf16ps(0, 1, 2);
  _tile_stored(0, c, 64);
  _tile_release();
}

float ftz(float v) {
  return std::fabs(v) < 0x1p-126f ? std::copysign(0.0f, v) : v;
}
bool same(float r, uint32_t h) {  // NaN payloads are not compared
  const uint32_t u = std::bit_cast<uint32_t>(r);
  const bool rn = (u & 0x7fffffffu) > 0x7f800000u, hn = (h & 0x7fffffffu) > 0x7f800000u;
  return (rn && hn) || u == h;
}

}  // namespace

int main() {
  if (!cpu_has_amx_bf16()) {
    std::printf("amx_probe: this CPU (or OS) has no AMX-BF16 (nothing to probe)\n");
    return 0;
  }
  std::vector<DpLane> in = moe::testing::dpbf16_cases();
  in.resize(in.size() - in.size() % 16);  // whole tiles
  std::vector<uint32_t> hw(in.size());
  for (size_t base = 0; base + 16 <= in.size(); base += 16) {
    alignas(64) float c[256];
    alignas(64) uint16_t a[32], b[32];
    for (int m = 0; m < 16; ++m) {
      const DpLane& l = in[base + m];
      for (int j = 0; j < 16; ++j) c[m * 16 + j] = l.c;
      a[2 * m] = l.a0;
      a[2 * m + 1] = l.a1;
      b[2 * m] = l.b0;
      b[2 * m + 1] = l.b1;
    }
    tile_dp(c, a, b, 1);
    for (int m = 0; m < 16; ++m) hw[base + m] = std::bit_cast<uint32_t>(c[m * 16 + m]);
  }
  struct Candidate {
    const char* name;
    float (*f)(const DpLane&);
  };
  const Candidate candidates[] = {
      {"the vdpbf16ps contract (odd pair first, two fused steps)",
       [](const DpLane& l) { return dpbf16(l.c, l.a0, l.a1, l.b0, l.b1); }},
      {"even pair first, two fused steps",
       [](const DpLane& l) {
         return dpbf16_step(dpbf16_step(l.c, wide(l.a0), wide(l.b0)), wide(l.a1), wide(l.b1));
       }},
      {"the pair summed in fp32, then + c (DAZ in, FTZ out)",
       [](const DpLane& l) {
         const float p = daz(wide(l.a0)) * daz(wide(l.b0)) + daz(wide(l.a1)) * daz(wide(l.b1));
         return ftz(daz(l.c) + ftz(p));
       }},
      {"c + p0 + p1 rounded once (DAZ in, FTZ out)",
       [](const DpLane& l) {
         const double p = static_cast<double>(daz(wide(l.a0))) * daz(wide(l.b0)) +
                          static_cast<double>(daz(wide(l.a1))) * daz(wide(l.b1));
         return ftz(static_cast<float>(static_cast<double>(daz(l.c)) + p));
       }},
  };
  std::printf("one pair per element, %zu lanes:\n", in.size());
  for (const Candidate& k : candidates) {
    size_t bad = 0, first = in.size();
    for (size_t i = 0; i < in.size(); ++i) {
      if (!same(k.f(in[i]), hw[i])) {
        if (bad++ == 0) first = i;
      }
    }
    std::printf("  %-58s disagrees on %zu", k.name, bad);
    if (bad > 0) {
      const DpLane& l = in[first];
      std::printf("  (e.g. c=%08x a=(%04x,%04x) b=(%04x,%04x): amx %08x, candidate %08x)",
                  std::bit_cast<uint32_t>(l.c), l.a0, l.a1, l.b0, l.b1, hw[first],
                  std::bit_cast<uint32_t>(k.f(l)));
    }
    std::printf("\n");
  }
  // 16 pairs per element, moderate normal values: the contract chained over the pairs in either order.
  std::mt19937_64 rng(7);
  const auto bf = [&](int emin, int emax) {
    const uint32_t e = static_cast<uint32_t>(emin) + static_cast<uint32_t>(rng() % (emax - emin + 1));
    return static_cast<uint16_t>(((rng() & 1) << 15) | (e << 7) | (rng() & 0x7f));
  };
  size_t elements = 0, up_bad = 0, down_bad = 0;
  for (int rep = 0; rep < 4000; ++rep) {
    alignas(64) float c[256], c0[256];
    alignas(64) uint16_t a[512], b[512];
    for (float& v : c) {
      v = std::bit_cast<float>(
          static_cast<uint32_t>(((rng() & 1) << 31) | ((110 + rng() % 30) << 23) | (rng() & 0x7fffff)));
    }
    for (int i = 0; i < 512; ++i) {
      a[i] = bf(115, 135);
      b[i] = bf(115, 135);
    }
    std::memcpy(c0, c, sizeof c);
    tile_dp(c, a, b, 16);
    for (int m = 0; m < 16; ++m) {
      for (int j = 0; j < 16; ++j) {
        float up = c0[m * 16 + j], down = up;
        for (int k = 0; k < 16; ++k) {
          const int kd = 15 - k;
          up = dpbf16(up, a[m * 32 + 2 * k], a[m * 32 + 2 * k + 1], b[k * 32 + 2 * j], b[k * 32 + 2 * j + 1]);
          down = dpbf16(down, a[m * 32 + 2 * kd], a[m * 32 + 2 * kd + 1], b[kd * 32 + 2 * j],
                        b[kd * 32 + 2 * j + 1]);
        }
        const uint32_t h = std::bit_cast<uint32_t>(c[m * 16 + j]);
        ++elements;
        up_bad += !same(up, h);
        down_bad += !same(down, h);
      }
    }
  }
  std::printf(
      "16 pairs per element, %zu elements of moderate values: the contract chained over the pairs\n"
      "  in ascending order disagrees on %zu, in descending order on %zu\n",
      elements, up_bad, down_bad);
  return 0;
}
#endif

// amx_probe: what does this CPU's AMX `tdpbf16ps` compute per output element? Scores candidate roundings
// against the hardware: kernels/cpu/tile_bf16.h's tile contract (the one the AMX kernel keeps; the test
// kernels_cpu_tile_bf16_test checks it too), kernels/cpu/dpbf16.h's vdpbf16ps contract (the pair contract of
// the other bf16 kernels) and simple alternatives, on tests/support/dpbf16_cases.h's lanes (one pair per
// element, the diagonal of a 16 x 16 tile) and on 16-pair elements of moderate values, and prints how many
// disagree: the tool for investigating a CPU on which the tile contract's test fails. A plain program (not
// run by scripts/bench.sh): build/bin/amx_probe
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dpbf16.h"
#include "kernels/cpu/tile_bf16.h"
#include "tests/support/amx_tile.h"
#include "tests/support/dpbf16_cases.h"

#if !MOE_HAVE_AMX_TARGET
int main() {
  std::printf("amx_probe: this compiler or platform cannot build AMX code (nothing to probe)\n");
  return 0;
}
#else

namespace {

using moe::kernels::dpbf16;
using moe::kernels::dpbf16_step;
using moe::kernels::tdpbf16_element;
using moe::kernels::dpbf16_detail::daz;
using moe::testing::amx_tile_dp;
float wide(uint16_t h) {
  return moe::kernels::bf16_to_f32(h);
}
using moe::testing::DpLane;

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
  if (!moe::kernels::cpu_has_amx_bf16()) {
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
    amx_tile_dp(c, a, b, 1);
    for (int m = 0; m < 16; ++m) hw[base + m] = std::bit_cast<uint32_t>(c[m * 16 + m]);
  }
  struct Candidate {
    const char* name;
    float (*f)(const DpLane&);
  };
  const Candidate candidates[] = {
      {"the tile contract (even and odd chains, summed, then + c)",
       [](const DpLane& l) {
         const uint16_t x[2] = {l.a0, l.a1};
         const uint32_t w = static_cast<uint32_t>(l.b0) | static_cast<uint32_t>(l.b1) << 16;
         return tdpbf16_element(
             l.c, 1, [&](int64_t i) -> uint32_t { return x[i]; }, [&](int64_t) { return w; });
       }},
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
  size_t elements = 0, up_bad = 0, down_bad = 0, tile_bad = 0;
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
    amx_tile_dp(c, a, b, 16);
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
        const float tile = tdpbf16_element(
            c0[m * 16 + j], 16, [&](int64_t i) -> uint32_t { return a[m * 32 + i]; },
            [&](int64_t p) {
              return static_cast<uint32_t>(b[p * 32 + 2 * j]) | uint32_t{b[p * 32 + 2 * j + 1]} << 16;
            });
        tile_bad += !same(tile, h);
        ++elements;
        up_bad += !same(up, h);
        down_bad += !same(down, h);
      }
    }
  }
  std::printf(
      "16 pairs per element, %zu elements of moderate values: the tile contract disagrees on %zu; the pair\n"
      "  contract chained over the pairs in ascending order on %zu, in descending order on %zu\n",
      elements, tile_bad, up_bad, down_bad);
  return 0;
}
#endif

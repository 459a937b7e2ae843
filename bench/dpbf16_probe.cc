// dpbf16_probe: what does this CPU's vdpbf16ps compute? Scores the contract of kernels/cpu/dpbf16.h and a
// set of alternative emulations against the hardware on the lanes of tests/support/dpbf16_cases.h and
// prints, per candidate, how many lanes disagree (and the first one). Exactly one candidate, the contract,
// should score 0; on a CPU where tests/kernels_cpu_dpbf16_test fails, this shows which rule differs.
// A plain program (not run by scripts/bench.sh): build/bin/dpbf16_probe
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/dpbf16.h"
#include "tests/support/dpbf16_cases.h"

#if !MOE_HAVE_AVX512_BF16_TARGET
int main() {
  std::printf("dpbf16_probe: this compiler cannot target AVX512_BF16 (nothing to probe)\n");
  return 0;
}
#else
namespace {

using moe::testing::DpLane;

float wide(uint16_t h) {
  return moe::kernels::bf16_to_f32(h);
}
bool subnormal(float v) {
  return v != 0.0f && std::fabs(v) < 0x1p-126f;
}
float daz(float v) {
  return subnormal(v) ? std::copysign(0.0f, v) : v;
}

// One alternative: which pair goes first, whether the three terms are rounded once, which inputs are
// read as zero when subnormal, and how tiny results are flushed.
struct Candidate {
  const char* name;
  int order;  // 0 odd pair first, 1 even pair first, 2 one rounding of c + p0 + p1 (binary128 sum)
  bool daz_operands, daz_accumulator, flush_intermediate;
  int ftz;  // 0 none, 1 tiny after rounding to fp32 (subnormal result), 2 tiny before rounding
};

float flush(float r, double exact, int ftz) {
  if (ftz == 1 && subnormal(r)) return std::copysign(0.0f, r);
  if (ftz == 2 && r != 0.0f && std::isfinite(r) && std::fabs(exact) < 0x1p-126) return std::copysign(0.0f, r);
  return r;
}

float step(float c, float a, float b, const Candidate& k, bool last) {
  const float r = std::fma(a, b, c);
  return last || k.flush_intermediate ? flush(r, static_cast<double>(a) * b + c, k.ftz) : r;
}

float emulate(const DpLane& l, const Candidate& k) {
  float a0 = wide(l.a0), a1 = wide(l.a1), b0 = wide(l.b0), b1 = wide(l.b1), c = l.c;
  if (k.daz_operands) a0 = daz(a0), a1 = daz(a1), b0 = daz(b0), b1 = daz(b1);
  if (k.daz_accumulator) c = daz(c);
  if (k.order == 2) {
    const __float128 s =
        static_cast<__float128>(c) + static_cast<__float128>(a0) * b0 + static_cast<__float128>(a1) * b1;
    return flush(static_cast<float>(s), static_cast<double>(s), k.ftz);
  }
  const bool odd_first = k.order == 0;
  float t = odd_first ? step(c, a1, b1, k, false) : step(c, a0, b0, k, false);
  if (k.daz_accumulator) t = daz(t);
  return odd_first ? step(t, a0, b0, k, true) : step(t, a1, b1, k, true);
}

}  // namespace

int main() {
  if (!moe::kernels::cpu_has_avx512_bf16()) {
    std::printf("dpbf16_probe: this CPU has no AVX512_BF16 (nothing to probe)\n");
    return 0;
  }
  const std::vector<DpLane> in = moe::testing::dpbf16_cases();
  const std::vector<uint32_t> hw = moe::testing::dpbf16_hardware(in);
  const Candidate candidates[] = {
      {"odd first, DAZ all inputs, FTZ after rounding (subnormal r)", 0, true, true, true, 1},
      {"odd first, DAZ all inputs, FTZ tiny before rounding", 0, true, true, true, 2},
      {"odd first, no flush of the intermediate", 0, true, true, false, 1},
      {"odd first, DAZ on bf16 operands only", 0, true, false, true, 1},
      {"odd first, no DAZ/FTZ (plain IEEE)", 0, false, false, false, 0},
      {"even first, DAZ all inputs, FTZ", 1, true, true, true, 1},
      {"one rounding of c + p0 + p1, DAZ, FTZ", 2, true, true, false, 1},
  };
  size_t nan_out = 0;
  for (uint32_t h : hw) nan_out += (h & 0x7fffffffu) > 0x7f800000u ? 1 : 0;
  std::printf("%zu lanes (%zu with a NaN result)\n", in.size(), nan_out);
  const auto report = [&](const char* name, auto&& fn) {
    size_t bad = 0, first = in.size();
    for (size_t i = 0; i < in.size(); ++i) {
      if (std::bit_cast<uint32_t>(fn(in[i])) != hw[i]) {
        if (bad++ == 0) first = i;
      }
    }
    std::printf("%-66s %8zu lanes differ", name, bad);
    if (bad > 0) {
      const DpLane& l = in[first];
      std::printf("  e.g. c=%08x a=(%04x,%04x) b=(%04x,%04x): hardware %08x, candidate %08x",
                  std::bit_cast<uint32_t>(l.c), l.a0, l.a1, l.b0, l.b1, hw[first],
                  std::bit_cast<uint32_t>(fn(l)));
    }
    std::printf("\n");
  };
  report("kernels/cpu/dpbf16.h (the contract)",
         [](const DpLane& l) { return moe::kernels::dpbf16(l.c, l.a0, l.a1, l.b0, l.b1); });
  for (const Candidate& k : candidates) {
    report(k.name, [&](const DpLane& l) { return emulate(l, k); });
  }
  return 0;
}
#endif

// What one lane of `vdpbf16ps` (AVX512_BF16) computes, as a contract and as a portable scalar emulation.
//
// A lane holds an fp32 accumulator c and two bf16 pairs (a0, a1), (b0, b1): a0/b0 are the even elements
// (bits 15:0 of the 32-bit lane), a1/b1 the odd ones (bits 31:16). The lane's result is two fused
// multiply-adds in sequence, the ODD pair first, each rounded to fp32:
//
//   t = step(c, a1, b1);   result = step(t, a0, b0)
//   step(c, a, b) = ftz(round_rne(daz(a) * daz(b) + daz(c)))      (one rounding: a fused multiply-add)
//
//   daz(v): a subnormal input (bf16 or fp32) is read as a zero of the same sign. The accumulator c is an
//           input of each step, so a subnormal accumulator, and the intermediate t, count as zero too.
//   ftz(r): a result that is tiny AFTER rounding - rounded to 24 significant bits with an unbounded
//           exponent, its magnitude is below 2^-126 - becomes a zero with the result's sign. A result
//           just below 2^-126 that rounds up to 2^-126 is kept (x86's tininess-after-rounding rule).
//   Rounding is always to nearest, ties to even; MXCSR (rounding mode, FTZ/DAZ bits) is neither read nor
//   written. Signed zeros follow IEEE: (-0) + (-0) = -0, an exact cancellation gives +0.
//   NaN: if any of a, b, c of a step is NaN, the step returns the first NaN in the order a, b, c, made
//   quiet (bit 22 set, sign and payload kept). Otherwise an invalid operation (inf * 0, inf - inf)
//   returns the default NaN 0xffc00000 (negative, quiet). Overflow gives +/-inf.
//
// Evidence (bench/dpbf16_probe.cc, and tests/kernels_cpu_dpbf16_test.cc which keeps checking it): on an
// Intel Xeon (family 6 model 207, AVX512_BF16 + AMX) the hardware matched this emulation bit for bit on
// 1.5 million lanes of random bits, moderate values, cancellations, subnormal inputs and accumulators,
// results around 2^-126, overflow, and every combination of +-0, +-inf, quiet and signalling NaNs,
// subnormals and extremes; every alternative tried (even pair first, one rounding for the three terms,
// the pair summed first, no DAZ on the accumulator, no flush of the intermediate, tininess before rounding)
// disagreed on thousands of lanes or on the boundary cases. Intel's SDM pseudocode says the same. Other
// vendors' implementations are not covered by that evidence: the test fails on a CPU that differs.
//
// The emulation needs only IEEE binary32 with a correctly rounded std::fma in the default environment
// (round to nearest, no flush-to-zero), so its bits are the same on every platform.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace moe::kernels {

namespace dpbf16_detail {

inline bool is_nan_bits(uint32_t u) {
  return (u & 0x7fffffffu) > 0x7f800000u;
}

// daz(): subnormal -> signed zero.
inline float daz(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  return (u & 0x7f800000u) == 0 ? std::bit_cast<float>(u & 0x80000000u) : v;
}

}  // namespace dpbf16_detail

// One step: ftz(round(daz(a) * daz(b) + daz(c))) with the NaN rules above; a and b are fp32 values of
// bf16 numbers (their low 16 bits are zero), c any fp32 value.
inline float dpbf16_step(float c, float a, float b) {
  using namespace dpbf16_detail;
  const uint32_t ua = std::bit_cast<uint32_t>(a), ub = std::bit_cast<uint32_t>(b),
                 uc = std::bit_cast<uint32_t>(c);
  if (is_nan_bits(ua) || is_nan_bits(ub) || is_nan_bits(uc)) {
    const uint32_t first = is_nan_bits(ua) ? ua : is_nan_bits(ub) ? ub : uc;
    return std::bit_cast<float>(first | 0x00400000u);
  }
  a = daz(a);
  b = daz(b);
  c = daz(c);
  const float r = std::fma(a, b, c);
  if (r != r) return std::bit_cast<float>(0xffc00000u);  // invalid: inf * 0 or inf - inf
  // A zero r is exact or the signed zero of an underflow below 2^-150; a zero product leaves c (normal or
  // zero) unrounded: in each case r is the answer.
  if (r == 0.0f || a == 0.0f || b == 0.0f) return r;
  // Tininess after rounding. A nonzero result of magnitude below 2^-125 comes only from a nonzero product
  // and a c both below 2^-99 (their exact sum is a multiple of the smaller one's last bit: 2^-14 of the
  // product, 2^-23 of c), so scaling a and c by 2^64 is exact, cannot overflow, and rounds to 24 bits as an
  // unbounded exponent would.
  if (std::fabs(r) < 0x1p-125f) {
    const float scaled = std::fma(a * 0x1p64f, b, c * 0x1p64f);
    if (std::fabs(scaled) < 0x1p-62f) return std::copysign(0.0f, scaled);
    return scaled * 0x1p-64f;
  }
  return r;
}

// One lane of vdpbf16ps: c + a1*b1 (first) + a0*b0, bf16 operands given by their bits.
inline float dpbf16(float c, uint16_t a0, uint16_t a1, uint16_t b0, uint16_t b1) {
  const auto wide = [](uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); };
  const float t = dpbf16_step(c, wide(a1), wide(b1));
  return dpbf16_step(t, wide(a0), wide(b0));
}

}  // namespace moe::kernels

// What AMX's `tdpbf16ps` computes for one output element, as a contract and as a portable scalar emulation:
// the "tile" contract of the bf16-compute linear (kernels/cpu/linear_bf16.h), the one its AMX kernel keeps.
//
// An output y = sum_i x_i w_i over bf16 operands x (the activation row) and w (the weight row), in pairs
// (x[2p], x[2p+1]) / (w[2p], w[2p+1]), is accumulated in BLOCKS of 16 pairs (32 elements, one 64-byte tile
// row), from the first pair on; a short last block is padded with pairs of +0 (x and w alike). Per block:
//
//   e = +0;  o = +0
//   for each of the block's 16 pairs p, in order:
//     e = step(e, x[2p],   w[2p])            (the even elements: one chain)
//     o = step(o, x[2p+1], w[2p+1])          (the odd elements: another chain)
//   t = add(e, o);   acc = add(acc, t)        (acc starts at +0 before the first block)
//
//   step(c, a, b) = dpbf16_step(c, a, b) of kernels/cpu/dpbf16.h: ftz(round_rne(daz(a) * daz(b) + daz(c)))
//                   with its NaN rule (the first NaN in the order a, b, c, made quiet; invalid -> the
//                   default NaN 0xffc00000);
//   add(f, s)     = the same rounding of daz(f) + daz(s), a NaN coming from f before one from s
//                   (dpbf16_step(s, f, 1)).
//
// So per block two independent chains of fused steps, summed once, then added once to the accumulator; the
// block boundaries sit at fixed pair indices (0, 16, 32, ...), never where a kernel's loop happens to cut.
// The padding pairs matter only for signed zeros (a padded step turns an e or o of -0 into +0).
//
// Evidence (tests/kernels_cpu_tile_bf16_test.cc, which keeps checking it, and bench/amx_probe.cc): on an
// Intel Xeon with AMX-BF16 the hardware matched this emulation bit for bit, NaN payloads included, on the 1.5
// million lanes of tests/support/dpbf16_cases.h (random bits, cancellations, subnormal operands and
// accumulators, results around 2^-126, overflow, every combination of special values) as one-pair products,
// and on 2.3 million elements of 1-16-pair products with specials sprinkled in; the vdpbf16ps contract
// (one chain, odd element first) disagreed on 18 % of the lanes. Intel's SDM pseudocode for TDPBF16PS
// (temporary even/odd accumulators, a horizontal add, then the add into the destination) says the same.
//
// The emulation needs only IEEE binary32 with a correctly rounded std::fma in the default environment, so
// its bits are the same on every platform.
#pragma once

#include <bit>
#include <cstdint>

#include "kernels/cpu/dpbf16.h"

namespace moe::kernels {

// Pairs per block of the tile contract (one tdpbf16ps with full 64-byte tile rows).
inline constexpr int64_t kBf16TilePairs = 16;

// add(f, s) of the contract: daz(f) + daz(s) rounded once, FTZ after rounding; a NaN of f first, then of s.
inline float tile_add(float first, float second) {
  return dpbf16_step(second, first, 1.0f);
}

// One element of one tdpbf16ps over n pairs (n <= 16): c + (even chain + odd chain), where x(i) gives the
// activation's bf16 element i (i < 2 n) and w(p) the weight's pair p as one dword (even element in bits 15:0,
// odd in 31:16).
template <class XElement, class WeightPair>
float tdpbf16_element(float c, int64_t n, XElement x, WeightPair w) {
  const auto wide = [](uint32_t h) { return std::bit_cast<float>(h << 16); };
  float e = 0.0f, o = 0.0f;
  for (int64_t p = 0; p < n; ++p) {
    const uint32_t wp = w(p);
    e = dpbf16_step(e, wide(x(2 * p)), wide(wp & 0xffffu));
    o = dpbf16_step(o, wide(x(2 * p + 1)), wide(wp >> 16));
  }
  return tile_add(c, tile_add(e, o));
}

// One output of the tile contract: x = the row's 2 * pairs bf16 elements, w(p) = the weight's pair p as one
// dword, for p < pairs; blocks of 16 pairs, the last one padded with +0 pairs.
template <class WeightPair>
float tile_bf16_dot(const uint16_t* x, int64_t pairs, WeightPair w) {
  float acc = 0.0f;
  for (int64_t p0 = 0; p0 < pairs; p0 += kBf16TilePairs) {
    const int64_t n = pairs - p0 < kBf16TilePairs ? pairs - p0 : kBf16TilePairs;
    acc = tdpbf16_element(
        acc, kBf16TilePairs, [&](int64_t i) -> uint32_t { return i < 2 * n ? x[2 * p0 + i] : 0u; },
        [&](int64_t p) -> uint32_t { return p < n ? w(p0 + p) : 0u; });
  }
  return acc;
}

}  // namespace moe::kernels

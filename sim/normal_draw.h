// Fast standard-normal draws for the score model: a counter-based stream, two draws per 64-bit word, each an
// interpolated inverse normal CDF. Fixed integer arithmetic plus a committed table and IEEE double +, *, so
// every machine and compiler gives the same bits, and a loop over experts vectorises. Draws are floats.
#pragma once

#include <cstdint>

namespace moe::sim {

// The draw of 32 random bits u: sign = bit 31, x = 2 * (u mod 2^31) + 1 (odd, in [1, 2^32)); with octave
// o = floor(log2 x) and T the grid kNormalTable (sim/normal_table.h: Phi^-1(1 - x / 2^33) at
// x = 2^o (1 + c/64)) rounded to float,
//   |z| = T[i] + (T[i + 1] - T[i]) * frac   in float, i = 64 o + c, c and frac the cell of x in its octave
// and z = -|z| when the sign bit is set. So |z| follows the half-normal up to the table's linear
// interpolation (cells 1/64 of an octave of tail probability wide) and float rounding, and |z| <= 6.34 (tail
// probability 2^-32).
float normal_from_bits(uint32_t u);

// Draw d of stream `key`: normal_from_bits of the low (d even) or high (d odd) half of splitmix64's word
// d / 2 from state key (word j = mix64(key + j * golden gamma), base/splitmix64.h): a function of (key, d).
// out[i] = draw first + i for i < n (first >= 0, n >= 0).
void draw_normals(uint64_t key, int64_t first, int n, float* out);

// Draws 0 .. n - 1 of each of `rows` streams: out[r * n + i] = draw i of stream keys[r], the values
// draw_normals(keys[r], 0, n, out + r * n) writes (rows >= 0, n >= 0). The streams' words are mixed and
// converted together, so that short streams (a router with 8 experts) vectorise as well as long ones.
void draw_normals_rows(const uint64_t* keys, int rows, int n, float* out);

}  // namespace moe::sim

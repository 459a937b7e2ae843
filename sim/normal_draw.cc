#include "sim/normal_draw.h"

#include <bit>

#include "base/float_bits.h"
#include "base/splitmix64.h"
#include "sim/normal_table.h"

namespace moe::sim {
namespace {

constexpr int kWordsPerBlock = 256;
constexpr int kRowsBlockWords = 1024;  // words per block of draw_normals_rows (on the stack)

// The table's cells as (T[i], T[i + 1]) pairs of float bits, so that a draw reads its cell with one load
// (one 64-bit gather per lane in the vectorised loop instead of two 32-bit ones).
struct Cells {
  uint64_t bits[2048];
};
constexpr Cells make_cells() {
  Cells c{};
  for (int i = 0; i < 2048; ++i) {
    c.bits[i] = static_cast<uint64_t>(std::bit_cast<uint32_t>(kNormalTableF[i])) |
                static_cast<uint64_t>(std::bit_cast<uint32_t>(kNormalTableF[i + 1])) << 32;
  }
  return c;
}
constexpr Cells kCells = make_cells();

// Branch-free, so that the loop in draw_normals vectorises (shifts, a gather and a blend); the octave comes
// from x's count of leading zeros (one vector instruction with AVX-512 CD), the sign is or-ed into the
// result's sign bit.
inline float from_bits(uint32_t u) {
  const uint32_t x = ((u & 0x7fffffffu) << 1) | 1u;
  const int o = 31 - std::countl_zero(x);  // floor(log2 x), x >= 1
  const int s = o - 6;                     // bits of x below the cell index
  const int right = s > 0 ? s : 0;
  const int left = s < 0 ? -s : 0;
  const uint32_t c = ((x << left) >> right) & 63u;
  const uint32_t rem = x & ((1u << right) - 1u);
  const float scale = float_from_bits(static_cast<uint32_t>(127 - right) << 23);  // 2^-right
  const float frac = static_cast<float>(rem) * scale;
  const int i = o * 64 + static_cast<int>(c);
  const uint64_t cell = kCells.bits[i];  // (T[i], T[i + 1]) in one load
  const float lo = float_from_bits(static_cast<uint32_t>(cell));
  const float hi = float_from_bits(static_cast<uint32_t>(cell >> 32));
  const float z = lo + (hi - lo) * frac;
  return float_from_bits(float_bits(z) | (u & 0x80000000u));
}

}  // namespace

float normal_from_bits(uint32_t u) {
  return from_bits(u);
}

void draw_normals(uint64_t key, int64_t first, int n, float* out) {
  uint32_t bits[2 * kWordsPerBlock];
  constexpr int kPerBlock = 2 * kWordsPerBlock - 2;  // even, and room for an odd first draw
  for (int done = 0; done < n; done += kPerBlock) {
    const int count = n - done < kPerBlock ? n - done : kPerBlock;
    const int64_t d0 = first + done;
    const uint64_t w0 = static_cast<uint64_t>(d0 / 2);
    const int offset = static_cast<int>(d0 & 1);
    const int words = (offset + count + 1) / 2;
    for (int j = 0; j < words; ++j) {
      const uint64_t w = mix64(key + (w0 + static_cast<uint64_t>(j)) * kGoldenGamma);
      bits[2 * j] = static_cast<uint32_t>(w);
      bits[2 * j + 1] = static_cast<uint32_t>(w >> 32);
    }
    for (int i = 0; i < count; ++i) out[done + i] = from_bits(bits[offset + i]);
  }
}

void draw_normals_rows(const uint64_t* keys, int rows, int n, float* out) {
  if (n % 2 != 0 || n / 2 > kRowsBlockWords) {  // a row's draws do not end on a word, or fill a block
    for (int r = 0; r < rows; ++r) draw_normals(keys[r], 0, n, out + static_cast<int64_t>(r) * n);
    return;
  }
  if (n == 0) return;
  const int words_per_row = n / 2;
  const int rows_per_block = kRowsBlockWords / words_per_row;
  uint64_t state[kRowsBlockWords];
  uint32_t bits[2 * kRowsBlockWords];
  for (int r0 = 0; r0 < rows; r0 += rows_per_block) {
    const int m = rows - r0 < rows_per_block ? rows - r0 : rows_per_block;
    // Word j of row r is mix64(keys[r] + j * golden gamma), in row order: the draws of row r are then
    // bits[r * n .. r * n + n), low half first, as in draw_normals.
    for (int r = 0; r < m; ++r) {
      for (int j = 0; j < words_per_row; ++j) {
        state[r * words_per_row + j] = keys[r0 + r] + static_cast<uint64_t>(j) * kGoldenGamma;
      }
    }
    const int words = m * words_per_row;
    for (int j = 0; j < words; ++j) {
      const uint64_t w = mix64(state[j]);
      bits[2 * j] = static_cast<uint32_t>(w);
      bits[2 * j + 1] = static_cast<uint32_t>(w >> 32);
    }
    float* dst = out + static_cast<int64_t>(r0) * n;
    for (int i = 0; i < 2 * words; ++i) dst[i] = from_bits(bits[i]);
  }
}

}  // namespace moe::sim

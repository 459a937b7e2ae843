// The loop structure that every bf16 panel kernel shares (linear_bf16_avx512.cc, linear_bf16_fma512.cc,
// linear_bf16_amx.cc): row blocks (the block's activations prepared once and kept in cache) x the thread's
// weight panels x slices of a panel x row groups, each (group, slice) one call of the kernel's tile. A
// kernel is its tile policy (below): how it prepares a block, how many rows and outputs one tile takes, and
// the tile's arithmetic. Every output is one tile's, computed whole over the reduction, so the loops decide
// only which tile computes it, never its bits.
//
// Include it INSIDE a file's target region (MOE_TARGET_REGION_BEGIN of cpu_features.h), after the file
// included every header this one includes before the region (so that their inline functions keep the
// build's flags): its own functions then take that file's target, and they have internal linkage, so each
// file compiles its own copy (no inline function is shared between files built for different targets).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/bf16_packed.h"

namespace moe::kernels::detail {
namespace {

// A tile policy T has:
//   T::Block         a row block's activations as its tiles read them (in place, widened, zero-padded, ...)
//   T::kGroupRows    the most rows of one tile
//   int64_t block_rows() const
//                    rows per block
//   Block load_block(const uint16_t* xb, int64_t rows) const
//                    the block of `rows` rows (> 0) from xb (row r at xb + r * 2 * pairs(in))
//   int64_t slice_outputs(int64_t rows) const
//                    outputs per tile for a block of `rows` rows: kBf16PanelOutputs or a divisor of it
//   void tile(const Block& block, int64_t g, int64_t nr, const uint32_t* slice, float* y, int64_t y_stride,
//             int64_t nc, bool first) const
//                    block rows [g, g + nr) x the first nc outputs of the panel slice whose first dword is
//                    `slice`, stored to y (row g's first output of the slice); first: the block's first
//                    group over this slice (it reads the weights from memory, later groups find them cached)
// drive_panels computes outputs of panels [j_begin, j_end) for all rows with it.
template <class Tiles>
void drive_panels(const Tiles& tiles, const uint16_t* xb, int64_t rows, const PackedBf16Weights& w,
                  int64_t j_begin, int64_t j_end, float* y, int64_t y_stride) {
  const int64_t xs = 2 * w.pairs(), block_rows = tiles.block_rows();
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    const int64_t n = std::min(block_rows, rows - r0);
    const typename Tiles::Block block = tiles.load_block(xb + r0 * xs, n);
    const int64_t slice = tiles.slice_outputs(n);
    for (int64_t j = j_begin; j < j_end; ++j) {
      for (int64_t s = 0; s < kBf16PanelOutputs; s += slice) {
        const int64_t o = j * kBf16PanelOutputs + s;
        const int64_t nc = std::min(slice, w.out() - o);  // valid outputs of the slice
        if (nc <= 0) break;
        for (int64_t g = 0; g < n; g += Tiles::kGroupRows) {
          tiles.tile(block, g, std::min<int64_t>(Tiles::kGroupRows, n - g), w.panel(j) + s,
                     y + (r0 + g) * y_stride + o, y_stride, nc, g == 0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace moe::kernels::detail

// The AMX kernel of the bf16-compute linear: the tile contract (kernels/cpu/tile_bf16.h), computed by
// tdpbf16ps on 16 x 16 fp32 accumulator tiles.
//
// Why it keeps the contract: one tdpbf16ps over a 16-pair block computes, for each element of the C tile,
// c + (even chain + odd chain) of that element's row of A and column of B (tile_bf16.h, checked against the
// hardware by tests/kernels_cpu_tile_bf16_test.cc); the C tiles start at +0 (tilezero) and take the blocks
// in order p = 0-15, 16-31, ... So every output is the contract's sequence whatever the tile it sits in, the
// row group, the number of rows or the thread: rows of a tile never mix (each C row reads only its A row),
// and a short last block is zero-padded on both sides (the packed panels carry zero rows up to a multiple of
// 16 pairs; the activation rows are copied zero-padded when pairs(in) is not a multiple of 16), which is
// the contract's padding. AMX ignores MXCSR.
//
// NOTES: the loops are drive_panels' (linear_bf16_driver.h); this file holds the AMX tile policy. Tiles 0-3
// are C (2 row tiles x 2 column tiles: 32 rows x 32 outputs, half a weight panel), 4-5 A (the two row tiles'
// 16 pairs), 6-7 B (16 pairs x 16 outputs, read in place from the packed panel with a 256-byte stride); a
// group of 16 rows or fewer uses tiles 0-1 only, and a block (row chunk) of 16 rows or fewer takes whole
// panels in one pass (group16_panel). Loop order: row chunks (AmxTiles::block_rows: the chunk's activations
// stay in L2) x the thread's panels x panel halves x row groups of 32 (the half panel, 90-180 KB, stays in L2
// while the chunk's groups pass over it). Rows past the end of a group are read from a per-thread buffer
// whose stale contents only reach C rows that are never stored. Products of kFmaRows rows or fewer run
// bf16_panels_fma512_tile instead (the same contract, so the same bits).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/linear_bf16_driver.h"
#include "kernels/cpu/linear_bf16_kernel.h"

#if MOE_HAVE_AMX_TARGET
#include <immintrin.h>
// Everything below, and nothing else in the library, is compiled for AMX. linear_bf16.cc calls it only when
// cpu_has_amx_bf16().
MOE_TARGET_REGION_BEGIN("amx-tile,amx-bf16")

namespace moe::kernels::detail {
namespace {

constexpr int64_t kRowChunkMax = 256;
constexpr int64_t kBlockPairs = 16;
constexpr int64_t kPrefetchBlocks = 2;
// Products of at most this many rows go to the FMA implementation of the tile contract
// (bf16_panels_fma512_tile): a 16-row tile computes 1 or 2 of its rows there, and the FMA kernel streamed
// the weights 1.1-1.5x faster at one row (kernels_cpu_linear_bench, 2026-12-01), while at 16 rows AMX was
// 3-4x faster.
constexpr int64_t kFmaRows = 2;
constexpr int64_t kPanelStrideBytes = kBf16PanelOutputs * 4;

// The tile palette 1 layout: 64 bytes, loaded by ldtilecfg.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
}

// A per-thread buffer of bf16 elements; grows to the largest request, then is reused. New space is zeroed.
uint16_t* thread_buffer(size_t elems) {
  thread_local std::vector<uint16_t> buffer;
  if (buffer.size() < elems) buffer.resize(elems, 0);
  return buffer.data();
}

// Copies a stored 16 x 16 tile (scratch, row-major) to y: nr rows, nc outputs.
void copy_tile(const float* scratch, float* y, int64_t ys, int64_t nr, int64_t nc) {
  for (int64_t r = 0; r < nr; ++r) std::memcpy(y + r * ys, scratch + 16 * r, static_cast<size_t>(nc) * 4);
}

// Stores C tile T (rows r, outputs o of y, of which nr rows and nc outputs are valid). A macro: the tile
// number must be a literal.
#define MOE_AMX_STORE(T, ydst, ys, nr, nc, scratch)                                             \
  do {                                                                                          \
    if ((nr) >= 16 && (nc) >= 16) {                                                             \
      _tile_stored(T, (ydst), (ys)*4);                                                          \
    } else if ((nr) > 0 && (nc) > 0) {                                                          \
      _tile_stored(T, (scratch), 64);                                                           \
      copy_tile((scratch), (ydst), (ys), std::min<int64_t>(nr, 16), std::min<int64_t>(nc, 16)); \
    }                                                                                           \
  } while (0)

// 16 rows (C tiles 0-1), or with TwoRowTiles 32 rows (C tiles 2-3 for rows 16-31), of A (a, row stride as
// bytes) x 32 outputs of a panel (b: the half panel's first dword).
template <bool TwoRowTiles>
void group(const uint16_t* a, int64_t as, const uint32_t* b, int64_t blocks) {
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (TwoRowTiles) {
    _tile_zero(2);
    _tile_zero(3);
  }
  const uint16_t* a1 = a + 16 * (as / 2);
  for (int64_t kb = 0; kb < blocks; ++kb) {
    const uint32_t* bk = b + kb * kBlockPairs * kBf16PanelOutputs;
    _tile_loadd(4, a + 2 * kBlockPairs * kb, as);
    _tile_loadd(6, bk, kPanelStrideBytes);
    _tile_loadd(7, bk + 16, kPanelStrideBytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (TwoRowTiles) {
      _tile_loadd(5, a1 + 2 * kBlockPairs * kb, as);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
}

// 16 rows x a whole panel (64 outputs), for chunks of 16 rows or fewer: one pass over the panel, the next
// blocks prefetched (few rows: the product streams the weights and the tile loads alone leave the memory
// system idle between them). B tiles 5-7, tile 5 reloaded for the fourth once its first product is issued.
void group16_panel(const uint16_t* a, int64_t as, const uint32_t* b, int64_t blocks) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  constexpr int64_t kBlockDwords = kBlockPairs * kBf16PanelOutputs;
  for (int64_t kb = 0; kb < blocks; ++kb) {
    const uint32_t* bk = b + kb * kBlockDwords;
    if (kb + kPrefetchBlocks < blocks) {
      const char* ahead = reinterpret_cast<const char*>(bk + kPrefetchBlocks * kBlockDwords);
      for (int line = 0; line < kBlockDwords * 4 / 64; ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
    }
    _tile_loadd(4, a + 2 * kBlockPairs * kb, as);
    _tile_loadd(5, bk, kPanelStrideBytes);
    _tile_loadd(6, bk + 16, kPanelStrideBytes);
    _tile_loadd(7, bk + 32, kPanelStrideBytes);
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 6);
    _tile_loadd(5, bk + 48, kPanelStrideBytes);
    _tile_dpbf16ps(2, 4, 7);
    _tile_dpbf16ps(3, 4, 5);
  }
}

// The tile policy of drive_panels (linear_bf16_driver.h) for AMX: blocks are row chunks whose activations
// stay within about 512 KB of L2; groups of 32 rows over half panels, or, for a chunk of 16 rows or fewer,
// one group over whole panels.
struct AmxTiles {
  // A chunk's rows as the A tiles read them: its first in_place_rows rows in place (whole groups, when a row
  // needs no padding), the others from a copy zero-padded to the padded row (the contract's padding pairs),
  // with the rows up to a whole group of 32, which hold stale values that reach no stored output.
  struct Block {
    const uint16_t* in_place;
    int64_t in_place_rows;
    const uint16_t* copy;
    int64_t rows;
  };
  static constexpr int64_t kGroupRows = 32;

  int64_t xs;      // elements of a row of xb: 2 * pairs(in)
  int64_t ps;      // elements of a padded row: 2 * panel_pairs()
  int64_t blocks;  // 16-pair blocks of the padded row

  int64_t block_rows() const {
    return std::clamp<int64_t>((512 * 1024) / (2 * ps) / 32 * 32, 32, kRowChunkMax);
  }

  Block load_block(const uint16_t* xb, int64_t rows) const {
    Block b{xb, xs == ps ? rows / 32 * 32 : 0, nullptr, rows};
    if (b.in_place_rows < rows) {
      uint16_t* copy = thread_buffer(static_cast<size_t>((rows + 31) / 32 * 32 * ps));
      for (int64_t r = b.in_place_rows; r < rows; ++r) {
        std::memcpy(copy + r * ps, xb + r * xs, static_cast<size_t>(xs) * 2);
        std::fill(copy + r * ps + xs, copy + (r + 1) * ps, uint16_t{0});
      }
      b.copy = copy;
    }
    return b;
  }

  int64_t slice_outputs(int64_t rows) const { return rows <= 16 ? kBf16PanelOutputs : 32; }

  void tile(const Block& block, int64_t g, int64_t nr, const uint32_t* slice, float* y, int64_t ys,
            int64_t nc, bool /*first: the tile loads need no prefetch*/) const {
    const bool in_place = g < block.in_place_rows;
    const uint16_t* a = in_place ? block.in_place + g * xs : block.copy + g * ps;
    const int64_t as = 2 * (in_place ? xs : ps);  // bytes
    alignas(64) float scratch[256];
    if (block.rows <= 16) {
      group16_panel(a, as, slice, blocks);
      MOE_AMX_STORE(0, y, ys, nr, nc, scratch);
      MOE_AMX_STORE(1, y + 16, ys, nr, nc - 16, scratch);
      MOE_AMX_STORE(2, y + 32, ys, nr, nc - 32, scratch);
      MOE_AMX_STORE(3, y + 48, ys, nr, nc - 48, scratch);
    } else if (nr > 16) {
      group<true>(a, as, slice, blocks);
      MOE_AMX_STORE(0, y, ys, nr, nc, scratch);
      MOE_AMX_STORE(1, y + 16, ys, nr, nc - 16, scratch);
      MOE_AMX_STORE(2, y + 16 * ys, ys, nr - 16, nc, scratch);
      MOE_AMX_STORE(3, y + 16 * ys + 16, ys, nr - 16, nc - 16, scratch);
    } else {
      group<false>(a, as, slice, blocks);
      MOE_AMX_STORE(0, y, ys, nr, nc, scratch);
      MOE_AMX_STORE(1, y + 16, ys, nr, nc - 16, scratch);
    }
  }
};

#undef MOE_AMX_STORE

}  // namespace

void bf16_panels_amx(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j_begin,
                     int64_t j_end, float* y, int64_t y_stride) {
  if (rows <= kFmaRows && cpu_has_avx512f()) {  // the same bits, faster for so few rows
    bf16_panels_fma512_tile(xb, rows, w, j_begin, j_end, y, y_stride);
    return;
  }
  configure_tiles();
  drive_panels(AmxTiles{2 * w.pairs(), 2 * w.panel_pairs(), w.panel_pairs() / kBlockPairs}, xb, rows, w,
               j_begin, j_end, y, y_stride);
  _tile_release();
}

}  // namespace moe::kernels::detail

MOE_TARGET_REGION_END()
#endif

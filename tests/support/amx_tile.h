// The hardware side of the tile contract's tests: one AMX tdpbf16ps on 16 x 16 fp32 tiles, for
// tests/kernels_cpu_tile_bf16_test.cc (which checks kernels/cpu/tile_bf16.h against it) and
// bench/amx_probe.cc. Call amx_tile_dp only when kernels::cpu_has_amx_bf16().
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_features.h"

#if MOE_HAVE_AMX_TARGET
#include <immintrin.h>

namespace moe::testing {

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// c (16 x 16 fp32, row-major) += a (16 rows of `pairs` bf16 pairs, row-major, rows 4 * pairs bytes apart) x
// b (`pairs` rows of 16 bf16 pairs, 64 bytes apart); 1 <= pairs <= 16.
__attribute__((target("amx-tile,amx-bf16"))) inline void amx_tile_dp(float* c, const uint16_t* a,
                                                                     const uint16_t* b, int pairs) {
  AmxTileConfig cfg;
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

}  // namespace moe::testing
#endif

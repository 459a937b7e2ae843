// Internal: the bf16-compute linear's per-thread work (see linear_bf16.h for the contract). Inputs are
// validated by linear_bf16.cc; rows > 0, w.out() > 0, w.in() > 0.
#pragma once

#include <cstdint>

#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/linear_bf16.h"

namespace moe::kernels::detail {

// Outputs of panels [j_begin, j_end) for all rows, with the AVX-512 vdpbf16ps kernel. Call it only when
// cpu_has_avx512_bf16() (kernels/cpu/cpu_features.h): linear_bf16_avx512.cc is the one file compiled for
// AVX512_BF16 (a target region), and this is its only entry point. Defined where MOE_HAVE_AVX512_BF16_TARGET.
// Each ISA kernel is a tile policy of one driver (linear_bf16_driver.h).
void bf16_panels_avx512(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j_begin,
                        int64_t j_end, float* y, int64_t y_stride);

// The same with AVX-512F fp32 FMAs under DAZ/FTZ (linear_bf16_fma512.cc; same bits). Call it only when
// cpu_has_avx512f(). Defined where MOE_HAVE_AVX512_BF16_TARGET.
void bf16_panels_fma512(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j_begin,
                        int64_t j_end, float* y, int64_t y_stride);

// The tile contract (tile_bf16.h) with AMX tdpbf16ps (linear_bf16_amx.cc). Call it only when
// cpu_has_amx_bf16(). Defined where MOE_HAVE_AMX_TARGET.
void bf16_panels_amx(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j_begin,
                     int64_t j_end, float* y, int64_t y_stride);

// The tile contract with AVX-512F fp32 FMAs under DAZ/FTZ (linear_bf16_fma512.cc; same bits as
// bf16_panels_amx). Call it only when cpu_has_avx512f(). Defined where MOE_HAVE_AVX512_BF16_TARGET.
void bf16_panels_fma512_tile(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j_begin,
                             int64_t j_end, float* y, int64_t y_stride);

// The same outputs by a contract's scalar emulation (dpbf16.h for kPair, tile_bf16.h for kTile): the same
// bits as that contract's kernels.
void bf16_panels_emulated(Bf16Contract contract, const uint16_t* xb, int64_t rows, const PackedBf16Weights& w,
                          int64_t j_begin, int64_t j_end, float* y, int64_t y_stride);

// Output o of the row xr (2 * pairs bf16 elements) by the contract's scalar emulation: what the FMA kernels
// recompute for NaN outputs.
float emulated_output(Bf16Contract contract, const uint16_t* xr, const PackedBf16Weights& w, int64_t o);

}  // namespace moe::kernels::detail

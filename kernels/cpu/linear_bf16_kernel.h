// Internal: the bf16-compute linear's per-thread work (see linear_bf16.h for the contract). Inputs are
// validated by linear_bf16.cc; rows > 0, w.out() > 0, w.in() > 0.
#pragma once

#include <cstdint>

#include "kernels/cpu/bf16_packed.h"

namespace moe::kernels::detail {

#if defined(__AVX512F__) && defined(__AVX512BF16__)
inline constexpr bool kBf16UsesAvx512 = true;
#else
inline constexpr bool kBf16UsesAvx512 = false;
#endif

// Outputs of panels [j_begin, j_end) for all rows, with the AVX-512 vdpbf16ps kernel (only on builds
// where kBf16UsesAvx512; elsewhere it runs the portable path).
void bf16_panels_avx512(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j_begin,
                        int64_t j_end, float* y, int64_t y_stride);

// The same with the scalar emulation of dpbf16.h (same bits).
void bf16_panels_portable(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j_begin,
                          int64_t j_end, float* y, int64_t y_stride);

}  // namespace moe::kernels::detail

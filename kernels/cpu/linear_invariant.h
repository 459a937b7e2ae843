// Internal: the batch-invariant linear kernel (see KernelKind::kInvariant in linear.h for the contract).
// Arguments are validated by the callers in linear.cc; rows > 0, w.rows > 0, w.cols > 0.
#pragma once

#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"

namespace moe::kernels::detail {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
inline constexpr bool kInvariantUsesAvx512 = true;
#else
inline constexpr bool kInvariantUsesAvx512 = false;
#endif

// Multithreaded; AVX-512 when kInvariantUsesAvx512, else the portable path split over the pool.
void linear_invariant(const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, float* y,
                      int64_t y_stride, ThreadPool& pool);

// Single-threaded scalar emulation of the same reduction order (same bits as the AVX-512 kernel).
void linear_invariant_portable(const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, float* y,
                               int64_t y_stride);

}  // namespace moe::kernels::detail

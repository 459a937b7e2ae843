// Internal: the batch-invariant linear kernel (see KernelKind::kInvariant in linear.h for the contract).
// Arguments are validated by the callers in linear.cc; rows > 0, w.rows > 0, w.cols > 0.
#pragma once

#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"

namespace moe::kernels::detail {

// Whether linear_invariant runs its AVX-512 code on this CPU (chosen at run time: cpu_has_avx512_skx(),
// whatever the build's flags), else the portable path. Both give the same bits.
bool invariant_uses_avx512();

// Multithreaded; AVX-512 when invariant_uses_avx512(), else the portable path split over the pool.
void linear_invariant(const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, float* y,
                      int64_t y_stride, ThreadPool& pool);

// Single-threaded scalar emulation of the same reduction order (same bits as the AVX-512 kernel).
void linear_invariant_portable(const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, float* y,
                               int64_t y_stride);

}  // namespace moe::kernels::detail

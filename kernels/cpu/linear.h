// Linear layer y = x @ W^T on the CPU, in two kinds, plus the float64 oracle.
//
//   y[r][o] = sum_i x[r][i] * w[o][i]      r < rows, o < w.rows (out), i < w.cols (in)
//
// W is a MatrixView in the nn.Linear layout [out, in], fp32 or bf16. bf16 weights are widened exactly
// to fp32; products and sums are fp32 (the kernels never round x or W to a narrower type).
#pragma once

#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"

namespace moe::kernels {

// Computes y = x @ W^T.
//   kind kInvariant (kernels/tensor.h's contract) on the CPU: each y[r][o] is computed with one fixed
//   reduction order: 16 fp32 lane accumulators, acc[l] = fma(x[r][i], w[o][i], acc[l]) for i = 16c + l in
//   ascending c; the last partial chunk reads zeros beyond `in`; then the fixed pairwise tree
//   ((a0+a8)+(a4+a12)) + ((a2+a10)+(a6+a14)) + ... (halves: +8, then +4, +2, +1). Threads split output
//   columns (never the reduction); every register tile shape, the in-place path for 1-3 rows and the packed
//   path for more rows use this same order (a long reduction may be processed in pieces, with the 16 lane
//   accumulators stored and reloaded exactly in between). kind kFast is Eigen: a GEMV for one row and a
//   blocked GEMM otherwise.
//   x: rows x w.cols fp32, row r at x + r * x_stride (x_stride >= w.cols); any alignment.
//   w: [out, in] fp32 or bf16 (kF16 is rejected: convert it when loading).
//   y: rows x w.rows fp32, row r at y + r * y_stride (y_stride >= w.rows); overwritten. y must not
//      overlap x or w.
//   rows may be 0 (nothing is written). in == 0 gives y = 0.
// Threading: runs on `pool` (the calling thread participates); the call itself is not reentrant on the
// same pool from two threads at once (the pool serialises such calls).
// Memory: no allocation per call after warm-up. kInvariant packs operand blocks (for rows >= 4) into
// per-thread, 64-byte-aligned buffers (thread_local, grown to the largest shape seen, then reused, at
// most ~1 MB per thread); kFast with bf16 weights widens blocks of W into a per-thread fp32 buffer
// the same way. Eigen's GEMM (kFast) allocates its own packing buffers with malloc for large shapes.
// Errors: std::invalid_argument for null pointers with nonzero sizes, negative sizes, strides smaller
// than the row length, or an unsupported dtype.
void linear(KernelKind kind, const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, float* y,
            int64_t y_stride, ThreadPool& pool);

// The oracle: plain loops in double (products and sums in double, i ascending). x is contiguous
// [rows, w.cols], y is contiguous [rows, w.rows]. Same validation as linear().
void linear_reference_f64(const float* x, int64_t rows, const MatrixView& w, double* y);

// --- Implementation paths, exposed so that tests can compare them ------------------------------------

// True when linear(kInvariant, ...) uses the AVX-512 kernel (the build targets AVX-512F/BW/VL).
bool linear_invariant_uses_avx512();

// The portable scalar form of the kInvariant contract, single-threaded. It emulates the same 16 lanes,
// zero-filled tail and reduction tree with std::fma, so it returns the same bits as the AVX-512 kernel.
// It is what linear(kInvariant, ...) runs on builds without AVX-512. Same arguments and errors as linear.
void linear_invariant_portable(const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, float* y,
                               int64_t y_stride);

// Throws std::invalid_argument naming `what` if `w` is not a valid fp32/bf16 matrix view.
void validate_weights(const MatrixView& w, const char* what);

}  // namespace moe::kernels

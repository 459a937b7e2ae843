// The batch-invariant bf16-compute linear: y = bf16(x) @ W^T with fp32 accumulation in vdpbf16ps's order
// (computed by vdpbf16ps, or by fp32 FMAs that reproduce its bits, whichever is faster on the CPU).
//
// Contract (every y[r][o], whatever the number of rows, the row's place, strides, alignment or thread
// count): with xb = x's row r rounded to bf16 (f32_to_bf16) and wb = W's row o in bf16 (bf16_packed.h),
// both padded with one zero element when `in` is odd, and P = pairs(in),
//   acc = +0;  for p = 0, 1, ..., P - 1:  acc = dpbf16(acc, xb[2p], xb[2p+1], wb[2p], wb[2p+1]);  y = acc
// where dpbf16 is one lane of vdpbf16ps (kernels/cpu/dpbf16.h: odd element first, two fused steps with DAZ
// and FTZ). One sequential chain per output: no lanes to reduce at the end, no split of the reduction.
// The AVX-512 kernel puts 16 outputs of a weight panel in the lanes of a register and broadcasts the x
// pair, so every register tile shape runs exactly this chain per element; threads split whole panels of
// outputs. The implementation is chosen at run time (Bf16Kernel below: CPUID, then a short timing): vdpbf16ps,
// or AVX-512F fp32 FMAs on the exactly widened operands under DAZ/FTZ (the same two roundings per pair), or on
// CPUs without AVX-512 the scalar emulation; all give the same bits (tested on subnormals, infinities and NaN
// payloads).
//
// Accuracy (tests/kernels_cpu_bf16_compute_test.cc), against float64 of the SAME bf16-rounded x and W:
// each product of two bf16 numbers is exact in fp32, so the only errors are the 2 P roundings of the
// chain (and flushing of values below 2^-126, which the tests' data never reach):
//   |y - ref| <= gamma(2P) * sum_i |xb_i wb_i|,  gamma(n) = n u / (1 - n u), u = 2^-24        (worst case)
// and, since the rounding errors of a long chain have random signs, typically ~ sqrt(2P) u of that scale.
// The tests require |y - ref| <= 4 sqrt(2P) u * sum_i |xb_i wb_i| + 2^-126 * 2P (about 1.2e-5 for in =
// 2816), well inside the worst case and a few times what is measured. Against the unrounded fp32 x and W
// the rounding of both operands (bf16's unit roundoff is 2^-8) adds up to (2^-7 + 2^-16) of the scale
// sum_i |x_i w_i|.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/thread_pool.h"

namespace moe::kernels {

// bf16 elements of input workspace that linear_bf16() needs for `rows` rows of length `in`.
inline constexpr size_t linear_bf16_workspace_elems(int64_t rows, int64_t in) {
  return static_cast<size_t>(rows) * static_cast<size_t>(2 * bf16_pairs(in));
}

// y = bf16(x) @ W^T by the contract above.
//   x: rows x w.in() fp32, row r at x + r * x_stride (x_stride >= in); any alignment.
//   y: rows x w.out() fp32, row r at y + r * y_stride (y_stride >= out), overwritten; must not overlap x.
//   workspace: linear_bf16_workspace_elems(rows, in) bf16 elements owned by the caller (clobbered), or
//   null to use a buffer of the calling thread that grows to the largest call and is then reused.
// Threading: runs on `pool`; the per-call allocation is none after warm-up. Errors: std::invalid_argument
// for negative rows, strides below the row lengths, or null pointers with nonzero sizes.
void linear_bf16(const float* x, int64_t rows, int64_t x_stride, const PackedBf16Weights& w, float* y,
                 int64_t y_stride, uint16_t* workspace, ThreadPool& pool);

// The same on an input already rounded to bf16 (round_rows_to_bf16's layout: row r at
// xb + r * 2 * pairs(in)); the FFN feeds its hidden activation this way.
void linear_bf16_rounded(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, float* y,
                         int64_t y_stride, ThreadPool& pool);

// The implementations of the contract above; all give the same bits (tested), they differ in speed:
//   kPortable     the scalar emulation of dpbf16.h (any CPU)
//   kAvx512Fma    AVX-512F fp32 FMAs on the widened operands under DAZ/FTZ, NaN outputs redone by the
//                 emulation (linear_bf16_fma512.cc; CPUs with AVX512F)
//   kAvx512Dpbf16 vdpbf16ps (linear_bf16_avx512.cc; CPUs with AVX512_BF16)
enum class Bf16Kernel : uint8_t { kPortable, kAvx512Fma, kAvx512Dpbf16 };
const char* to_string(Bf16Kernel k);
bool bf16_kernel_available(Bf16Kernel k);
// The implementation linear_bf16 runs: MOE_BF16_KERNEL=portable|fma|dpbf16 in the environment forces one
// (if this CPU has it); otherwise, where both AVX-512 kernels are available, the faster of the two on a short
// timing at first use (on some CPUs vdpbf16ps has half the FMA rate in FLOP/s, on others twice), else the
// best available. Chosen once per process; thread-safe.
Bf16Kernel linear_bf16_kernel();

// True when linear_bf16 runs the AVX-512 vdpbf16ps kernel (this CPU has AVX512_BF16; a run-time check).
bool linear_bf16_uses_avx512();

// linear_bf16_rounded with a given implementation (for tests and benchmarks). Throws std::invalid_argument if
// this CPU lacks it.
void linear_bf16_rounded_with(Bf16Kernel k, const uint16_t* xb, int64_t rows, const PackedBf16Weights& w,
                              float* y, int64_t y_stride, ThreadPool& pool);

// The portable scalar path (what CPUs without AVX512_BF16 run), single-threaded, on a rounded input.
void linear_bf16_rounded_portable(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, float* y,
                                  int64_t y_stride);

}  // namespace moe::kernels

// One expert's FFN in bf16 compute (see expert_ffn.h for the activations and the weight layout):
//
//   xb = bf16(x)                                   (round to nearest even, f32_to_bf16)
//   g = xb @ w1^T + b1, u = xb @ w3^T + b3         bf16 x bf16 products, fp32 accumulation (linear_bf16.h),
//                                                  the fp32 biases (if any) added in fp32
//   h = act(g, u)                                  in fp32 (expert_ffn.h's activate_row)
//   y = bf16(h) @ w2^T + b2                        the hidden activation is rounded to bf16 first
//
// Invariance (with the invariant kind): the same contract as the fp32 invariant FFN - each row of y depends
// only on that row of x and the weights, bitwise, for any rows, strides, alignment or thread count (every
// step is row-wise: the linear's fixed chain per output, elementwise activations, elementwise rounding).
// Accuracy (tests/kernels_cpu_bf16_compute_test.cc), against ffn_bf16_reference_f64 (float64 from the same
// bf16 x and weights, h NOT rounded): rounding h to bf16 moves each term of y_o = sum_j h_j w2[o][j] by at
// most 2^-8 of itself (bf16's unit roundoff). The fp32 errors of the three products and of the activation
// are ~1e-5 of their own scales, which cancellation in g (sum_i |x_i w1_ji| is ~sqrt(d) times |g_j|) can
// raise to a few 1e-4 of h. The tests require |y_o - ref_o| <= 1.25 * 2^-8 * sum_j |h_j w2[o][j]|.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cpu/bf16_linear_op.h"
#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/expert_ffn.h"
#include "kernels/cpu/thread_pool.h"

namespace moe::kernels {

// An expert's weights prepared once for bf16 compute (fp32 weights are rounded to bf16), by either kind of
// bf16 linear (bf16_linear_op.h): the invariant kernel by default, or e.g. oneDNN's for the fast kind.
struct PackedFfnBf16 {
  Activation act = Activation::kSwiGLU;
  std::unique_ptr<Bf16LinearOp> w1, w3, w2;  // w3 is null for kGELU
  FfnWeights params;  // the biases (pointers into the caller's weights, which must outlive this) and the
                      // activation's constants; its matrices are not used after construction

  PackedFfnBf16() = default;
  // Validates like validate_ffn_weights and prepares each matrix with `make`. Throws
  // std::invalid_argument.
  PackedFfnBf16(Activation activation, const FfnWeights& w,
                const Bf16LinearMaker& make = make_invariant_bf16_linear);

  int64_t d() const { return w1->in(); }
  int64_t ff() const { return w1->out(); }
  KernelKind kind() const { return w1->kind(); }
};

// Floats of scratch that ffn_bf16_forward needs for `rows` rows: the fp32 gate and up activations, and the
// bf16 copies of x and h, each part 64-byte aligned within the buffer (which itself may have any alignment).
size_t ffn_bf16_scratch_floats(int64_t rows, int64_t d, int64_t ff);

// y = FFN(x) for `rows` rows in bf16 compute.
//   x: rows x d, row r at x + r * x_stride (x_stride >= d). y: rows x d, row r at y + r * y_stride
//   (y_stride >= d), overwritten; y must not overlap x or scratch.
//   scratch: ffn_bf16_scratch_floats(rows, d, ff) floats owned by the caller, clobbered.
// Threading: runs on `pool`. Allocates nothing. Errors: std::invalid_argument for null pointers with
// nonzero sizes, negative rows, or strides smaller than d.
void ffn_bf16_forward(const float* x, int64_t rows, int64_t x_stride, const PackedFfnBf16& w, float* y,
                      int64_t y_stride, float* scratch, ThreadPool& pool);

// The same from x already rounded to bf16: xb holds `rows` rows of 2 * bf16_pairs(d) elements, contiguous
// (round_rows_to_bf16's layout, the element past an odd d zero). Its result is ffn_bf16_forward's, bit for
// bit, on any fp32 rows that round to xb; callers that feed one token's row to several experts round it once.
// y must not overlap xb or scratch; scratch as for ffn_bf16_forward (its part for the bf16 x is unused).
void ffn_bf16_forward_rounded(const uint16_t* xb, int64_t rows, const PackedFfnBf16& w, float* y,
                              int64_t y_stride, float* scratch, ThreadPool& pool);

// The oracle: x and the weights rounded to bf16 (f32_to_bf16; bf16 weights as they are), everything else
// in double (h not rounded, unless round_hidden: then h is rounded to bf16 as the kernel does, from the
// double value, so the oracle's GEMM operands are the kernel's except where the fp32 h of the kernel and the
// exact h straddle a bf16 rounding boundary). x is contiguous [rows, d]; y is contiguous [rows, d]. If
// `scale` is not null it receives, per output, sum_j |h_j w2[o][j]| (the scale of the accuracy bound above).
void ffn_bf16_reference_f64(Activation act, const float* x, int64_t rows, const FfnWeights& w, double* y,
                            double* scale, bool round_hidden = false);

}  // namespace moe::kernels

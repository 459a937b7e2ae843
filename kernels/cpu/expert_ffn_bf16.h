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
#include <vector>

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

// An element of the hidden activation whose bf16 rounding the kernel's contract does not determine (see
// ffn_bf16_reference_f64): the kernel may round h[row][j] to any bf16 value in [lo, hi]; the oracle took
// `rounded` (the rounding of the exact h, inside that range). Replacing it by v moves the oracle's y[row] by
// (v - rounded) * down, down = the bf16 column w2[:, j] (d values).
struct UndeterminedHidden {
  int64_t row = 0, j = 0;
  double rounded = 0.0, lo = 0.0, hi = 0.0;
  std::vector<double> down;
};

// The oracle: x and the weights rounded to bf16 (f32_to_bf16; bf16 weights as they are), everything else
// in double (h not rounded, unless round_hidden: then h is rounded to bf16 as the kernel does, from the
// double value). x is contiguous [rows, d]; y is contiguous [rows, d]. If `scale` is not null it receives,
// per output, sum_j |h_j w2[o][j]| (the scale of the accuracy bound above).
//
// With round_hidden the oracle's GEMM operands are the kernel's, except for the elements of h whose fp32
// value in the kernel and exact value may round to different bf16 neighbours (one bf16 ulp apart: 2^-7 of
// that term of y). Which ones may is decided from the kernel's contract on its fp32 h (before rounding),
// stated here once:
//   |h_fp32 - act(g, u)| <= e = max over the four corners |act(g +- dg, u +- du) - act(g, u)|
//                               + a (|act(g, u)| + that max) + 2^-126
//   dg = gamma(2P + 1) (sum_i |xb_i w1[j][i]| + |b1_j|) + (2P + 1) 2^-126, du the same with w3 and b3,
// where g, u are the exact (float64) pre-activations of the same bf16 operands, P = pairs(d),
// gamma(n) = n 2^-24 / (1 - n 2^-24): the worst case of any fp32 summation order of the 2P exact bf16
// products and the bias add, so it holds for the invariant kernel, oneDNN and Eigen alike (2^-126 per
// rounding for DAZ/FTZ); a is the fp32 activation's own error, twice what
// tests/kernels_cpu_activations_test.cc requires of it (swiglu 1.2e-6; gelu 1e-6 + 4e-7 |v| for its exp
// argument v; clamped swiglu 2e-6 + 2^-24 |alpha min(g, limit)|). The corners give the propagated error to
// first order; the box is ~1e-5 of g and u wide, so curvature adds ~1e-5 of it. bf16 rounding is monotone, so
// the kernel's bf16(h) lies in [bf16(h - e), bf16(h + e)], and every bf16 value there is reachable: where
// that range holds more than the oracle's value, the element is appended to `undetermined` (if not null). An
// accuracy test then asks whether the kernel's y is, within the fp32 errors of the down projection
// (linear_bf16.h), the oracle's y for SOME choice of those elements (tests/support/layer_reference.h).
// If `hidden` is not null it receives [rows, ff]: the h the oracle's down projection took (rounded with
// round_hidden).
void ffn_bf16_reference_f64(Activation act, const float* x, int64_t rows, const FfnWeights& w, double* y,
                            double* scale, bool round_hidden = false,
                            std::vector<UndeterminedHidden>* undetermined = nullptr,
                            double* hidden = nullptr);

}  // namespace moe::kernels

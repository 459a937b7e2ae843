// One expert's feed-forward network on a batch of rows, for the activations of kernels/tensor.h:
//
//   kSwiGLU         y = w2 @ (silu(w1 x + b1) * (w3 x + b3)) + b2      Mixtral, Qwen, DeepSeek, Llama 4
//   kGELU           y = w2 @ gelu(w1 x + b1) + b2                      w1 is the up projection; w3 is
//                                                                      ignored (may be empty)
//   kClampedSwiGLU  y = w2 @ clamped_swiglu(w1 x + b1, w3 x + b3) + b2 gpt-oss (activations.h)
//
// Weights use the Hugging Face layout: w1 = gate_proj [ff, d], w3 = up_proj [ff, d], w2 = down_proj
// [d, ff]; each fp32 or bf16 (independently). The biases are optional fp32 vectors (null: none): each is
// added in fp32 to the fp32 GEMM output of its row, before the activation (b1, b3) or as the last step (b2).
// Intermediate activations are fp32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"

namespace moe::kernels {

struct FfnWeights {
  MatrixView w1;                // gate_proj [ff, d] (the up projection for kGELU)
  MatrixView w3;                // up_proj [ff, d] (gated activations only)
  MatrixView w2;                // down_proj [d, ff]
  const float* b1 = nullptr;    // [ff] or null
  const float* b3 = nullptr;    // [ff] or null (gated activations only)
  const float* b2 = nullptr;    // [d] or null
  float swiglu_alpha = 1.702f;  // kClampedSwiGLU's constants (ignored by the other activations)
  float swiglu_limit = 7.0f;
};

// The activation of one row's gate (h1, already with b1) and up (h3, with b3) projections into out[ff]
// (out may alias h1): the one place every CPU FFN (fp32 and bf16 compute) applies an activation.
void activate_row(Activation act, const FfnWeights& w, float* h1, const float* h3, float* out, int64_t ff);
// y[c] += b[c] for c < n, when b is not null.
void add_bias(float* y, const float* b, int64_t n);
// Columns [c0, c0 + n) of one row, in place: the gate g and up u (pointing at column c0 of the row's h1 and
// h3) get their biases b1 and b3 (those that are set; u only for gated activations), then g = act(g, u).
// Every step is elementwise, so a row done in column ranges gets the bits of the row done whole.
void bias_and_activate(Activation act, const FfnWeights& w, float* g, float* u, int64_t c0, int64_t n);

// Checks that the weights fit together for `act` and returns d (hidden size) and ff (intermediate
// size). Throws std::invalid_argument naming the mismatching shapes, a null pointer or a bad dtype (with
// `allow_quantized`, quantized matrices are accepted too, checked by kernels::validate_view).
void validate_ffn_weights(Activation act, const FfnWeights& w, int64_t* d, int64_t* ff,
                          bool allow_quantized = false);

// Floats of scratch that ffn_forward needs for `rows` rows: 2 * rows * ff (any activation).
size_t ffn_scratch_floats(int64_t rows, int64_t ff);

// y = FFN(x) for `rows` rows.
//   x: rows x d, row r at x + r * x_stride (x_stride >= d). y: rows x d, row r at y + r * y_stride
//   (y_stride >= d), overwritten; y must not overlap x, the weights or scratch.
//   scratch: at least ffn_scratch_floats(rows, ff) floats, owned by the caller, contents clobbered.
//   kind: kInvariant makes each row of y depend only on that row of x and the weights (bitwise, for any
//   rows, strides, alignment or thread count); kFast uses Eigen (see linear.h).
// Threading: runs on `pool`. Allocates nothing (except what linear() documents for kFast + bf16).
// Errors: std::invalid_argument for inconsistent weight shapes, null pointers with nonzero sizes,
// negative rows, or strides smaller than d.
void ffn_forward(KernelKind kind, Activation act, const float* x, int64_t rows, int64_t x_stride,
                 const FfnWeights& w, float* y, int64_t y_stride, float* scratch, ThreadPool& pool);

// The activation of one element in double (the oracles' form): gate and up with their biases.
double activation_f64(Activation act, const FfnWeights& w, double gate, double up);

// The oracle: everything in double (the fp32 activations are not rounded between the layers), on the
// weights' exact values (quantized matrices dequantized exactly, kernels/quant_formats.h).
// x is contiguous [rows, d]; y is contiguous [rows, d]. Same validation as ffn_forward (quantized accepted).
void ffn_reference_f64(Activation act, const float* x, int64_t rows, const FfnWeights& w, double* y);

}  // namespace moe::kernels

// One expert's feed-forward network on a batch of rows, for the activations of kernels/tensor.h:
//
//   kSwiGLU  y = w2 @ (silu(w1 x) * (w3 x))     Mixtral / Qwen2-MoE / DeepSeek experts
//   kGELU    y = w2 @ gelu(w1 x)                w1 is the up projection; w3 is ignored (may be empty);
//                                               gelu is the tanh approximation (activations.h)
//
// Weights use the Hugging Face layout: w1 = gate_proj [ff, d], w3 = up_proj [ff, d], w2 = down_proj
// [d, ff]; each fp32 or bf16 (independently). Intermediate activations are fp32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"

namespace moe::kernels {

struct FfnWeights {
  MatrixView w1;  // gate_proj [ff, d] (the up projection for kGELU)
  MatrixView w3;  // up_proj [ff, d] (kSwiGLU only)
  MatrixView w2;  // down_proj [d, ff]
};

// Checks that the weights fit together for `act` and returns d (hidden size) and ff (intermediate
// size). Throws std::invalid_argument naming the mismatching shapes, a null pointer or a bad dtype.
void validate_ffn_weights(Activation act, const FfnWeights& w, int64_t* d, int64_t* ff);

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

// The oracle: everything in double (the fp32 activations are not rounded between the layers).
// x is contiguous [rows, d]; y is contiguous [rows, d]. Same validation as ffn_forward.
void ffn_reference_f64(Activation act, const float* x, int64_t rows, const FfnWeights& w, double* y);

}  // namespace moe::kernels

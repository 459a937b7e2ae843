// One expert's FFN on quantized weights (expert_ffn.h's activations and weight layout), as the weights are
// stored:
//
//   g = W1 x + b1, u = W3 x + b3     each GEMM a QuantLinear (linear_quant.h): its input quantized per row by
//                                    its weight type's rule (int8 blocks; bf16 for FP8), integer dots inside
//                                    blocks, one fixed fp32 chain per output; the fp32 biases added in fp32
//   h = act(g, u)                    in fp32 (expert_ffn.h's activate_row)
//   y = W2 h + b2                    h quantized per row by W2's rule
//
// A plain (f32 / bf16) matrix among them (a mixed checkpoint) runs kernels::linear of the FFN's kind (fp32
// compute). Where W1 and W3 have the same rule, x is quantized once for both.
// Invariance: with the invariant kind every step is row-wise (per-row quantization, the linear's fixed chain,
// elementwise activation), so each row of y depends only on that row of x and the weights, bitwise, for any
// rows, strides, alignment or thread count. The fast kind currently runs the same kernels (there is no faster
// library path for these formats here); its promise is only the accuracy.
// Accuracy: against ffn_reference_f64 on the exactly dequantized weights, the activation rule's error
// (linear_quant.h) at each GEMM input dominates; tests/kernels_cpu_quant_accuracy_test.cc states the bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cpu/expert_ffn.h"
#include "kernels/cpu/linear_quant.h"
#include "kernels/cpu/thread_pool.h"

namespace moe::kernels {

// An expert's weights prepared once for the quantized FFN: a QuantLinear per quantized matrix (null for a
// plain one, which params' view serves).
struct PackedFfnQuant {
  Activation act = Activation::kSwiGLU;
  KernelKind kind = KernelKind::kInvariant;
  std::unique_ptr<QuantLinear> w1, w3, w2;
  FfnWeights params;  // the views (plain matrices are read from them; the caller's weights must outlive
                      // this), the biases and the activation's constants
  int64_t d = 0, ff = 0;

  PackedFfnQuant() = default;
  // Validates like validate_ffn_weights (quantized matrices accepted) and prepares each quantized matrix.
  // Throws std::invalid_argument naming `what` and the matrix.
  PackedFfnQuant(Activation activation, const FfnWeights& w, KernelKind kind, const std::string& what);

  // Bytes the three GEMMs stream for one row.
  size_t weight_bytes() const;
};

// Whether any matrix of the FFN is quantized (then ffn_quant_forward runs it).
bool ffn_has_quantized(Activation act, const FfnWeights& w);

// Floats of scratch ffn_quant_forward needs for `rows` rows (the gate and up outputs and the quantized
// inputs, each 64-byte aligned within the buffer).
size_t ffn_quant_scratch_floats(const PackedFfnQuant& w, int64_t rows);

// y = FFN(x) for `rows` rows. x: rows x d (row r at x + r * x_stride, x_stride >= d); y: rows x d (y_stride
// >= d), overwritten, not overlapping x or scratch. Runs on `pool`; allocates nothing. std::invalid_argument
// for negative rows, short strides, null pointers with nonzero sizes.
void ffn_quant_forward(const float* x, int64_t rows, int64_t x_stride, const PackedFfnQuant& w, float* y,
                       int64_t y_stride, float* scratch, ThreadPool& pool);

}  // namespace moe::kernels

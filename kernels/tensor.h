// The kernels' vocabulary, shared by kernels/cpu, kernels/cuda and moe/io: element types, a view of a weight
// matrix, the expert activations and the two kernel kinds. Each backend's headers state their own reduction
// orders; this header states what every backend's kinds promise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace moe::kernels {

// Storage type of a tensor's elements.
//   kF32, kBF16   plain element types; computation is fp32 (weights are widened into registers, never
//                 rounded) or bf16 (kernels/cpu/linear_bf16.h)
//   kF16          exists for files and is converted to kF32 or kBF16 when loaded
//   kQ8_0 ... kFP8  quantized weight formats, kept in memory as their publishers store them and run by the
//                 quantized kernels (kernels/cpu/linear_quant.h): ggml's Q8_0, Q4_K, Q6_K and MXFP4 blocks
//                 (ggml-common.h) and FP8 e4m3 with 2-D block scales (DeepSeek-V3's safetensors layout).
//                 kernels/quant_formats.h defines every layout, its reference dequantizer and how a
//                 MatrixView describes such a matrix.
enum class DType : uint8_t { kF32, kBF16, kF16, kQ8_0, kQ4_K, kQ6_K, kMXFP4, kFP8 };

// Elements of one block of the type (1 for element types and FP8, whose scales live beside the matrix).
inline constexpr int64_t block_elems(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kMXFP4:
      return 32;
    case DType::kQ4_K:
    case DType::kQ6_K:
      return 256;
    default:
      return 1;
  }
}

// Bytes of one block (ggml-common.h's sizeof(block_q8_0) = 34, block_q4_K = 144, block_q6_K = 210,
// block_mxfp4 = 17; a byte per FP8 element; 4 / 2 / 2 for f32 / bf16 / f16).
inline constexpr size_t block_bytes(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kQ8_0:
      return 34;
    case DType::kQ4_K:
      return 144;
    case DType::kQ6_K:
      return 210;
    case DType::kMXFP4:
      return 17;
    case DType::kFP8:
      return 1;
  }
  return 0;
}

// Whether the type is one of the quantized formats (a block type or FP8 with its block scales).
inline constexpr bool is_quantized(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_K || t == DType::kQ6_K || t == DType::kMXFP4 ||
         t == DType::kFP8;
}

// Bytes of one element of an element type (f32, bf16, f16, fp8); 0 for the block types (use row_bytes).
inline constexpr size_t dtype_size(DType t) {
  return block_elems(t) == 1 ? block_bytes(t) : 0;
}

// Bytes of `elems` consecutive elements of a row (elems a multiple of block_elems(t)).
inline constexpr size_t row_bytes(DType t, int64_t elems) {
  return static_cast<size_t>(elems / block_elems(t)) * block_bytes(t);
}

inline constexpr std::string_view to_string(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_K:
      return "q4_k";
    case DType::kQ6_K:
      return "q6_k";
    case DType::kMXFP4:
      return "mxfp4";
    case DType::kFP8:
      return "fp8";
  }
  return "?";
}

// A row-major matrix [rows, cols] that the view does not own. Weights use the Hugging Face nn.Linear layout
// [out_features, in_features], so y = x @ W^T. The memory may be host or device memory; the consumer says
// which it expects.
//   Element types: row r starts row_stride elements after row r - 1.
//   Block types (kQ8_0, kQ4_K, kQ6_K, kMXFP4): each row is cols / block_elems(dtype) consecutive blocks
//   (cols a multiple of block_elems), row r starts row_bytes(dtype, row_stride) bytes after row r - 1
//   (row_stride a multiple of block_elems too).
//   kFP8: e4m3 bytes as an element type, plus fp32 block scales: element (o, i) is
//   e4m3(o, i) * scales[(o / scale_block_rows) * scale_stride + i / scale_block_cols]
//   (kernels/quant_formats.h).
struct MatrixView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;        // out_features
  int64_t cols = 0;        // in_features
  int64_t row_stride = 0;  // elements between consecutive rows (>= cols)
  // kFP8 only (null / 0 otherwise): the block scales, [ceil(rows / scale_block_rows), scale_stride] fp32
  // with scale_stride >= ceil(cols / scale_block_cols).
  const float* scales = nullptr;
  int64_t scale_stride = 0;
  int32_t scale_block_rows = 0;
  int32_t scale_block_cols = 0;
};

// An expert's feed-forward network (Hugging Face names: w1 = gate_proj, w3 = up_proj, w2 = down_proj), with
// optional biases b1, b3 (after w1, w3) and b2 (after w2):
//   kSwiGLU         y = w2 @ (silu(w1 x) * (w3 x))     Mixtral, Qwen, OLMoE, DeepSeek, GLM, Llama 4 experts
//   kGELU           y = w2 @ gelu(w1 x)                w1 is the up projection, w3 is unused; the tanh form
//   kClampedSwiGLU  y = w2 @ ((clamp(u, -L, L) + 1) * g * sigmoid(alpha g)) + b2, g = min(w1 x + b1, L),
//                   u = w3 x + b3: gpt-oss (alpha 1.702, L = swiglu_limit; kernels/activation_rules.h)
enum class Activation : uint8_t { kSwiGLU, kGELU, kClampedSwiGLU };

inline constexpr std::string_view to_string(Activation a) {
  switch (a) {
    case Activation::kSwiGLU:
      return "swiglu";
    case Activation::kGELU:
      return "gelu";
    case Activation::kClampedSwiGLU:
      return "clamped_swiglu";
  }
  return "?";
}

// Whether an activation has a gate and an up projection (w1 and w3).
inline constexpr bool is_gated(Activation a) {
  return a != Activation::kGELU;
}

// The two kinds every backend offers for its GEMMs.
enum class KernelKind : uint8_t {
  // The library path (Eigen on the CPU, cuBLAS on CUDA). Its reduction order may change with the number of
  // rows (a GEMV for one row, a blocked GEMM otherwise, split-K), so a row's bits may depend on the batch.
  kFast,
  // The batch-invariant path: each output element is computed in one fixed reduction order, so its bits
  // depend only on its own input row and the weights - not on the number of rows, the row's place in the
  // buffer, strides, alignment or the thread count. No split-K, no shape-dependent path, no atomics.
  kInvariant,
};

inline constexpr std::string_view to_string(KernelKind k) {
  return k == KernelKind::kFast ? "fast" : "invariant";
}

// The arithmetic of a layer's expert GEMMs (separate from the storage type of the weights):
//   kF32   fp32 activations x fp32 weights (bf16 weights widened exactly), fp32 accumulation
//   kBF16  every GEMM input rounded to bf16 (round to nearest even: x, and the FFN's hidden activation),
//          bf16 weights (fp32 weights rounded once at load), products exact in fp32, fp32 accumulation
//          (vdpbf16ps); activations, combine and everything outside the GEMMs stay fp32
enum class ComputePrecision : uint8_t { kF32, kBF16 };

inline constexpr std::string_view to_string(ComputePrecision c) {
  return c == ComputePrecision::kF32 ? "fp32" : "bf16";
}

}  // namespace moe::kernels

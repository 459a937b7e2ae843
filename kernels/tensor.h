// The kernels' vocabulary, shared by kernels/cpu, kernels/cuda and moe/io: element types, a view of a weight
// matrix, the expert activations and the two kernel kinds. Each backend's headers state their own reduction
// orders; this header states what every backend's kinds promise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace moe::kernels {

// Storage type of a tensor's elements. Computation is always fp32 (weights are widened on load into
// registers, never rounded): kF16 exists for files and is converted to kF32 or kBF16 when loaded.
enum class DType : uint8_t { kF32, kBF16, kF16 };

inline constexpr size_t dtype_size(DType t) {
  return t == DType::kF32 ? 4 : 2;
}

inline constexpr std::string_view to_string(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
  }
  return "?";
}

// A row-major matrix [rows, cols] of fp32 or bf16 elements that the view does not own. Weights use the
// Hugging Face nn.Linear layout [out_features, in_features], so y = x @ W^T. The memory may be host or device
// memory; the consumer says which it expects.
struct MatrixView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;        // out_features
  int64_t cols = 0;        // in_features
  int64_t row_stride = 0;  // elements between consecutive rows (>= cols)
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

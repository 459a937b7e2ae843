// Element types of stored tensors and a view of a row-major weight matrix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace moe::kernels {

// Storage type of a tensor's elements. Computation is always fp32 (weights are widened on load into
// registers, never rounded): kF16 exists for files and is converted to kF32 or kBF16 when loaded.
enum class DType : uint8_t { kF32, kBF16, kF16 };

inline constexpr size_t dtype_size(DType t) { return t == DType::kF32 ? 4 : 2; }

inline constexpr std::string_view to_string(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
  }
  return "?";
}

// A row-major matrix [rows, cols] of fp32 or bf16 elements that the view does not own. Weights use the
// Hugging Face nn.Linear layout [out_features, in_features], so y = x @ W^T.
struct MatrixView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;        // out_features
  int64_t cols = 0;        // in_features
  int64_t row_stride = 0;  // elements between consecutive rows (>= cols)
};

}  // namespace moe::kernels

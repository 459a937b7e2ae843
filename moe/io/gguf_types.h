// The two type vocabularies of a GGUF file (ggml's docs/gguf.md): the types of metadata values and the ggml
// tensor types, with each tensor type's block geometry (elements per block, bytes per block) - what a reader
// needs to check a tensor's byte count against the file. How a block's bytes decode is not here: the
// quantized formats' layouts and dequantizers live with the kernels that compute on them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace moe::io {

// gguf_metadata_value_type.
enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
inline constexpr uint32_t kGgufValueTypeCount = 13;

// "u8", "i32", "f32", "bool", "string", "array", ... ("type 17" for a value outside the enum).
std::string gguf_value_type_name(uint32_t type);
// Bytes of one value of a fixed-size type (0 for kString and kArray, whose size is in the file).
size_t gguf_value_type_size(GgufValueType type);

// ggml_type ids of the tensor types this project reads (the others are named by gguf_tensor_type_info).
enum class GgufTensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ6_K = 14,
  kBF16 = 30,
  kMXFP4 = 39,
};

// A ggml tensor type as a file stores it: a row of ne[0] elements is ne[0] / block_elements blocks of
// block_bytes bytes each.
struct GgufTensorTypeInfo {
  uint32_t id = 0;
  std::string_view name;  // ggml's spelling: "F32", "Q4_K", "MXFP4", ...
  int64_t block_elements = 0;
  int64_t block_bytes = 0;
};

// Every ggml type a GGUF file may hold (ggml.h's ggml_type, GGML_TYPE_COUNT = 43), or nullopt for an id that
// is not one (out of range, or one of the removed types 4, 5, 31-33 and 36-38, whose blocks ggml no longer
// defines). `removed` (if given) is set to the removed type's former name ("Q4_2", "Q4_0_4_4", ...) or "".
std::optional<GgufTensorTypeInfo> gguf_tensor_type_info(uint32_t id, std::string* removed = nullptr);

// The tensor types this project loads: F32, F16, BF16, Q8_0, Q4_K, Q6_K, MXFP4.
bool gguf_tensor_type_supported(uint32_t id);
// "F32, F16, BF16, Q8_0, Q4_K, Q6_K, MXFP4": for messages.
const std::string& gguf_supported_tensor_types();

// The name of a tensor type id: gguf_tensor_type_info's, "Q4_2 (removed)", or "type 99" (unknown).
std::string gguf_tensor_type_name(uint32_t id);

}  // namespace moe::io

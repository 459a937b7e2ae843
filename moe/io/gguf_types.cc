#include "moe/io/gguf_types.h"

#include <array>

namespace moe::io {
namespace {

// ggml.h's ggml_type, with each type's block geometry from ggml-common.h (the sizes of its block structs).
// Blocks of 256 elements are the "K" super-blocks (QK_K).
constexpr GgufTensorTypeInfo kTensorTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},      {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},   {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
    {40, "NVFP4", 64, 36},    {41, "Q1_0", 128, 18},    {42, "Q2_0", 64, 18},
};

struct Removed {
  uint32_t id;
  const char* name;
};
constexpr Removed kRemovedTypes[] = {{4, "Q4_2"},        {5, "Q4_3"},       {31, "Q4_0_4_4"},
                                     {32, "Q4_0_4_8"},   {33, "Q4_0_8_8"},  {36, "IQ4_NL_4_4"},
                                     {37, "IQ4_NL_4_8"}, {38, "IQ4_NL_8_8"}};

constexpr std::array<const char*, kGgufValueTypeCount> kValueTypeNames = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};

constexpr GgufTensorType kSupported[] = {GgufTensorType::kF32,  GgufTensorType::kF16,  GgufTensorType::kBF16,
                                         GgufTensorType::kQ8_0, GgufTensorType::kQ4_K, GgufTensorType::kQ6_K,
                                         GgufTensorType::kMXFP4};

}  // namespace

std::string gguf_value_type_name(uint32_t type) {
  if (type < kGgufValueTypeCount) return kValueTypeNames[type];
  return "type " + std::to_string(type);
}

size_t gguf_value_type_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

std::optional<GgufTensorTypeInfo> gguf_tensor_type_info(uint32_t id, std::string* removed) {
  if (removed) removed->clear();
  for (const GgufTensorTypeInfo& t : kTensorTypes) {
    if (t.id == id) return t;
  }
  for (const Removed& r : kRemovedTypes) {
    if (r.id == id && removed) *removed = r.name;
  }
  return std::nullopt;
}

bool gguf_tensor_type_supported(uint32_t id) {
  for (GgufTensorType t : kSupported) {
    if (static_cast<uint32_t>(t) == id) return true;
  }
  return false;
}

const std::string& gguf_supported_tensor_types() {
  static const std::string text = [] {
    std::string s;
    for (GgufTensorType t : kSupported) {
      s += (s.empty() ? "" : ", ") + std::string(gguf_tensor_type_info(static_cast<uint32_t>(t))->name);
    }
    return s;
  }();
  return text;
}

std::string gguf_tensor_type_name(uint32_t id) {
  std::string removed;
  if (const auto info = gguf_tensor_type_info(id, &removed)) return std::string(info->name);
  if (!removed.empty()) return removed + " (removed)";
  return "type " + std::to_string(id);
}

}  // namespace moe::io

// The model config of a moe-model file (moe/model/model_weights.h, shape_from_metadata): the JSON object of
// strings that the file's __metadata__ holds. A valid ModelShape, or std::invalid_argument naming the key.
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "fuzz/fuzz_util.h"
#include "moe/model/model_weights.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The JSON rules of safetensors' __metadata__ (moe/io/safetensors.cc): an object of string values.
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return 0;
  std::map<std::string, std::string> meta;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) return 0;
    meta.emplace(key, value.get<std::string>());
  }
  try {
    const moe::model::ModelShape s = moe::model::shape_from_metadata(meta, "fuzz.safetensors");
    bool valid = true;
    try {
      s.validate();
    } catch (const std::invalid_argument&) {
      valid = false;
    }
    MOE_FUZZ_CHECK(valid);
    MOE_FUZZ_CHECK(s.top_k <= s.num_experts && s.hidden % s.num_heads == 0);
  } catch (const std::invalid_argument&) {
  }
  return 0;
}

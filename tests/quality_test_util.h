// The quality tests' inputs: the trained model and its held-out text (the fixture kjv_corpus builds it; the
// test targets define MOE_SOURCE_DIR and MOE_KJV_CORPUS).
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "moe/model/model_weights.h"
#include "moe/model/tokenizer.h"
#include "sim/quality/quality.h"
#include "sim/quality/scored_text.h"

namespace moe::sim::quality {

inline const std::filesystem::path kKjvModel = std::filesystem::path(MOE_SOURCE_DIR) / "models" / "kjv-moe";

inline std::shared_ptr<const model::ModelWeights> kjv_weights() {
  static const auto w = model::load_pretrained(kKjvModel);
  return w;
}

inline const std::vector<int32_t>& heldout_tokens() {
  static const std::vector<int32_t> t = read_text_tokens(
      (std::filesystem::path(MOE_KJV_CORPUS) / "heldout.txt").string(), model::Tokenizer::load(kKjvModel));
  return t;
}

// The whole held-out text with the trained model.
inline QualityInput heldout_input() {
  QualityInput in;
  in.weights = kjv_weights();
  in.stream = heldout_tokens();
  in.model_label = "models/kjv-moe";
  in.text_label = "held-out KJV";
  return in;
}

}  // namespace moe::sim::quality

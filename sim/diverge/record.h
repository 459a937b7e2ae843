// Router logits of a model on text, recorded in the files `moe-sim replay` reads: real routing traces for
// the simulator.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "moe/model/model_weights.h"

namespace moe::sim::diverge {

struct RecordSummary {
  int64_t tokens = 0;
  int windows = 0;
  std::vector<std::filesystem::path> files;  // layer{l}.npy ..., meta.csv
};

// Runs `text` through the model in windows of `window` tokens (window w is request w, positions 0 ..
// window - 1; the last window may be shorter), one forward pass each, dropless with invariant kernels (the
// router logits do not depend on capacity: they are the gate's output before any dispatch), up to
// `max_tokens` tokens (0: all). Writes into `dir` (created):
//   layer{l}.npy   float32 [T, num_experts]: the router logits of MoE layer l for the T tokens
//   meta.csv       request_id,position of each of the T rows (the same row order in every layer's file)
// Throws std::invalid_argument for window < 1 or above max_positions, or text shorter than 1 token;
// sim::DataError when a file cannot be written.
RecordSummary record_router_logits(std::shared_ptr<const model::ModelWeights> weights,
                                   std::span<const int32_t> text, const std::filesystem::path& dir,
                                   int64_t max_tokens, int window);

}  // namespace moe::sim::diverge

// One MoE layer's weights out of a GGUF model (llama.cpp's tensor names, moe/io/gguf_names.h).
#pragma once

#include <memory>
#include <optional>

#include "kernels/tensor.h"
#include "moe/io/gguf_model.h"
#include "moe/io/layer_weights.h"
#include "moe/io/pretrained.h"

namespace moe::io {

// Loads MoE layer `layer_index` of `model`, whose metadata `config` describes (read_gguf_config, checked by
// check_gguf). Only this layer's tensors are touched (the shards are mapped; their pages are read on use).
//
// Tensors, ne order (moe/io/gguf_names.h): the router ffn_gate_inp [hidden, E] (and gpt-oss's bias [E], the
// DeepSeek-V3 / GLM-4.5 selection bias exp_probs_b [E]); the experts stacked, ffn_{gate,up}_exps
// [hidden, ff, E] and ffn_down_exps [ff, hidden, E] (expert e is the e-th [ff, hidden] or [hidden, ff]
// slice), or ffn_gate_up_exps [hidden, 2 ff, E] (gate rows first), or Mixtral's per-expert
// ffn_{gate,up,down}.{e}; gpt-oss's expert biases; the shared expert ffn_{gate,up,down}_shexp and Qwen2-MoE's
// ffn_gate_inp_shexp. Every tensor must exist with exactly that shape (trailing 1s may be left out) and one
// of the supported types (F32, F16, BF16, Q8_0, Q4_K, Q6_K, MXFP4; any other is refused by name:
// "blk.3.ffn_up_exps.weight: GGUF type Q5_K is not supported (supported: ...)").
//
// Storage (of the routed and shared experts' matrices; the router gate, the biases and the shared-expert
// gate are fp32):
//   nullopt      as stored: a Q8_0 / Q4_K / Q6_K / MXFP4 matrix stays in its blocks (a Q4_K_M layer holds
//                Q4_K and Q6_K matrices side by side) and an F32 or BF16 one in its dtype, each a zero-copy
//                view into the mapping (LayerWeights::zero_copy()); F16 widens exactly to F32 (and the plain
//                matrices take the first plain one's dtype). Every block's scale is checked first: a
//                non-finite fp16 scale or MXFP4's NaN scale 0xff is refused by name (tensor, row, block).
//   kF32, kBF16  that dtype: matrices of it are views, the others converted (F32 -> BF16 rounds to nearest
//                even) or dequantized exactly, each element's exact value rounded once.
//   kQ8_0, kQ4_K, kQ6_K, kMXFP4
//                that type: matrices of it are views; plain ones are quantized (weights_from_views, which
//                also refuses a quantized matrix of another type by name); kFP8 is not a GGUF type.
// Memory: the bytes the converted matrices take are checked against the memory available before anything
// is allocated (io::OutOfMemory names both).
//
// Parts: `experts` = ExpertSet::only(list) reads the router, its biases, the shared expert and only the
// listed experts' slices (the others' bytes are neither read nor counted; per-expert tensors of the others
// are not looked up), as load_layer does; the result holds() that list. Errors (std::invalid_argument, naming
// the tensor and the file): a missing tensor, a wrong shape, an unsupported type, a non-finite value where
// one is not allowed.
LayerWeights load_gguf_layer(std::shared_ptr<const GgufModel> model, const PretrainedConfig& config,
                             int layer_index, std::optional<kernels::DType> storage = std::nullopt,
                             const ExpertSet& experts = ExpertSet::all());

// What load_gguf_layer checks before it reads data - every tensor of the layer present with its shape and a
// loadable type - without reading or allocating anything; throws its errors. `moe-sim inspect` asks it of
// every MoE layer.
void check_gguf_layer(const GgufModel& model, const PretrainedConfig& config, int layer_index);

}  // namespace moe::io

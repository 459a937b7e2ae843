// A Hugging Face checkpoint directory: config.json (the architecture and its dimensions) + the safetensors
// weights. Loading one needs no shape arguments: they come from config.json and are checked against the
// tensors.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "kernels/tensor.h"
#include "moe/io/checkpoint.h"
#include "moe/io/layer_weights.h"

namespace moe::io {

// What config.json says, in the project's terms. Supported: model_type "mixtral" (a MixtralConfig):
//   hidden_size -> layer.hidden             intermediate_size -> layer.expert_ff
//   num_local_experts -> layer.num_experts  num_experts_per_tok -> top_k
//   num_hidden_layers, vocab_size, num_attention_heads, num_key_value_heads (default: num_attention_heads),
//   head_dim (default hidden / heads), max_position_embeddings, rms_norm_eps, rope_theta (default 1e6, as
//   transformers), tie_word_embeddings (default false), hidden_act (default "silu"), sliding_window (null or
//   absent: none; else its value).
// Mixtral's router always renormalises the top-k weights (renormalize = true).
struct PretrainedConfig {
  Architecture architecture = Architecture::kMixtral;
  std::string model_type;
  LayerShape layer;
  int num_layers = 0;
  int top_k = 0;
  bool renormalize = true;
  int vocab_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int max_positions = 0;
  double rms_eps = 0;
  double rope_theta = 0;
  bool tie_word_embeddings = false;
  std::string hidden_act;
  std::optional<int> sliding_window;
};

// Parses `dir`/config.json (`dir` may also name the config.json file itself). Throws io::IoError when the
// file cannot be read, std::invalid_argument naming the file and the key for malformed JSON, an unsupported
// model_type, a missing required key, a value of the wrong type or out of range (e.g. top_k above the
// expert count).
PretrainedConfig read_pretrained_config(const std::filesystem::path& dir);

// The directory of a config.json path or directory (where the weights are).
std::filesystem::path pretrained_dir(const std::filesystem::path& dir_or_config);

// Checks the config against the tensors of `checkpoint`: model.embed_tokens.weight [vocab_size, hidden]; per
// layer i < num_layers the router gate [num_local_experts, hidden], expert 0's w1 [intermediate_size,
// hidden], no expert num_local_experts; no layer num_layers. Throws std::invalid_argument naming the config
// key, its value and the tensor that disagrees, e.g. "config.json says intermediate_size = 96 but
// model.layers.0.block_sparse_moe.experts.0.w1.weight has shape [88, 256] (expected [96, 256])".
void check_pretrained(const PretrainedConfig& config, const Checkpoint& checkpoint);

// A checkpoint directory opened and checked: config + tensors.
struct Pretrained {
  PretrainedConfig config;
  std::shared_ptr<const Checkpoint> checkpoint;
};
// Reads config.json, opens the weights of the directory (Checkpoint's rules: model.safetensors.index.json or
// model.safetensors) and runs check_pretrained. Errors as read_pretrained_config, Checkpoint and
// check_pretrained.
Pretrained open_pretrained(const std::filesystem::path& dir);

// Layer `layer_index` (0 <= layer_index < num_hidden_layers, else std::invalid_argument naming both) of a
// checked checkpoint directory, with load_layer's storage rules.
LayerWeights load_pretrained_layer(const Pretrained& pretrained, int layer_index,
                                   std::optional<kernels::DType> storage = std::nullopt);
LayerWeights load_pretrained_layer(const std::filesystem::path& dir, int layer_index,
                                   std::optional<kernels::DType> storage = std::nullopt);

}  // namespace moe::io

// A Hugging Face checkpoint directory: config.json (the family and its dimensions) + the safetensors weights.
// Loading one needs no shape arguments: they come from config.json and are checked against the tensors.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "moe/io/checkpoint.h"
#include "moe/io/gguf_model.h"
#include "moe/io/layer_weights.h"
#include "moe/io/quantized.h"
#include "router/router_config.h"

namespace moe::io {

// How a checkpoint stores its expert matrices (config.json's quantization_config).
enum class Quantization {
  kNone,      // F32 / BF16 / F16
  kFp8Block,  // quant_method "fp8": F8_E4M3 weights with weight_block_size block scales (weight_scale_inv)
  kMxfp4,     // quant_method "mxfp4": gpt-oss's *_blocks + *_scales
};
std::string_view to_string(Quantization q);

// The files a checkpoint comes in: a Hugging Face directory (config.json + safetensors) or a GGUF file (its
// metadata and tensors, llama.cpp's names; moe/io/gguf_config.h).
enum class CheckpointFormat { kSafetensors, kGguf };
std::string_view to_string(CheckpointFormat f);  // "safetensors", "gguf"

// What config.json says, in the project's terms. Every routing and expert key of each family is read and
// honoured, or refused by name when its value is not supported (the message names the key, its value and
// what is supported). model_type and the keys read (defaults as in transformers):
//   mixtral            hidden_size, intermediate_size, num_local_experts, num_experts_per_tok; softmax top-k,
//                      renormalised; every layer MoE
//   qwen2_moe          hidden_size, moe_intermediate_size, num_experts, num_experts_per_tok, norm_topk_prob
//                      (false), shared_expert_intermediate_size (a sigmoid-gated shared expert when > 0),
//                      decoder_sparse_step (1), mlp_only_layers ([]): layer i is MoE iff i is not in
//                      mlp_only_layers and (i + 1) % decoder_sparse_step == 0
//   qwen3_moe          as qwen2_moe without the shared expert (norm_topk_prob default false)
//   olmoe              hidden_size, intermediate_size, num_experts, num_experts_per_tok, norm_topk_prob
//                      (false); every layer MoE
//   deepseek_v2        hidden_size, moe_intermediate_size, n_routed_experts, num_experts_per_tok,
//                      n_shared_experts (null: none; fused, moe_intermediate_size x n), routed_scaling_factor
//                      (1), scoring_func (softmax only), topk_method (greedy | group_limited_greedy: a
//                      group's value is its best score), n_group, topk_group, norm_topk_prob (false only:
//                      the remote code normalises without scaling, transformers ignores it - they
//                      disagree), first_k_dense_replace (0), moe_layer_freq (1): layer i is MoE iff
//                      i >= first_k_dense_replace and i % moe_layer_freq == 0
//   deepseek_v3        (and Kimi K2) as deepseek_v2 with scoring_func sigmoid only, topk_method noaux_tc only
//                      (a group's value is its two best biased scores), e_score_correction_bias,
//                      norm_topk_prob (renormalised iff true and top-k > 1), num_nextn_predict_layers (the
//                      MTP layers after the last)
//   glm4_moe           hidden_size, moe_intermediate_size, n_routed_experts, num_experts_per_tok,
//                      n_shared_experts, routed_scaling_factor, n_group, topk_group, norm_topk_prob (true),
//                      first_k_dense_replace, num_nextn_predict_layers; DeepSeek-V3's router
//   gpt_oss            hidden_size, intermediate_size, num_local_experts, num_experts_per_tok,
//                      swiglu_limit (7), swiglu_alpha (1.702); router with bias, softmax over the top-k
//                      logits; clamped SwiGLU experts with biases; every layer MoE
//   llama4, llama4_text
//                      (llama4: its text_config) hidden_size, intermediate_size (experts and the shared
//                      expert), num_local_experts, num_experts_per_tok, moe_layers or
//                      interleave_moe_layer_step (1: layer i is MoE iff (i + 1) % step == 0); sigmoid of the
//                      top-k logit scales the expert's input; a shared expert
// and for every family num_hidden_layers, hidden_act ("silu" only), quantization_config (quant_method "fp8"
// with fmt e4m3 and weight_block_size, or "mxfp4" for gpt-oss; anything else is refused by name), and the
// decoder's keys below (read with defaults; moe::model runs Mixtral only and checks them itself).
struct PretrainedConfig {
  CheckpointFormat format = CheckpointFormat::kSafetensors;
  Architecture architecture = Architecture::kMixtral;
  std::string model_type;       // config.json's model_type; GGUF: general.architecture ("deepseek2", "llama")
  LayerShape layer;             // the shape of its MoE layers
  int num_layers = 0;           // num_hidden_layers
  std::vector<int> moe_layers;  // the MoE layers' indices, ascending (the others are dense MLPs)
  int num_extra_layers = 0;     // num_nextn_predict_layers: MTP layers stored after the last layer
  RouterConfig router;          // num_experts, top_k and every routing rule of the family
  kernels::Activation activation = kernels::Activation::kSwiGLU;
  float swiglu_alpha = 1.702f;  // gpt-oss's clamped SwiGLU (activation kClampedSwiGLU)
  float swiglu_limit = 7.0f;
  bool weight_on_input = false;  // Llama 4: the routing weight scales the expert's input
  Quantization quantization = Quantization::kNone;
  Fp8BlockSize fp8_block;     // weight_block_size of kFp8Block
  std::string experts_key;    // the key of the expert count ("num_local_experts", "n_routed_experts", ...)
  std::string expert_ff_key;  // "intermediate_size" or "moe_intermediate_size"
  std::string torch_dtype;    // config.json's torch_dtype (informational; "" if absent)
  std::string file_type;  // GGUF: general.file_type, as llama.cpp names it ("Q4_K - Medium"; "" if absent)
  // The decoder (moe::model): vocab_size, num_attention_heads, num_key_value_heads (default heads), head_dim
  // (default hidden / heads), max_position_embeddings, rms_norm_eps, rope_theta (default 1e6, as
  // transformers' Mixtral), tie_word_embeddings (false), hidden_act, sliding_window (null or absent: none).
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

  // Whether layer i is an MoE layer.
  bool is_moe_layer(int i) const;
  // "3-60" style list of the MoE layers ("0-23", "1, 3, 5-7").
  std::string moe_layer_list() const;
};

// Parses `dir`/config.json (`dir` may also name the config.json file itself). Throws io::IoError when the
// file cannot be read, std::invalid_argument naming the file and the key for malformed JSON, an unsupported
// model_type (listing the supported ones), a missing required key, a value of the wrong type or out of range
// (e.g. top_k above the expert count), or a value this project does not support (naming the key, its value
// and why).
// A GGUF file (is_gguf_path) is read by read_gguf_config instead (moe/io/gguf_config.h), with its errors.
PretrainedConfig read_pretrained_config(const std::filesystem::path& dir);

// The model_type values read_pretrained_config accepts.
const std::vector<std::string>& supported_model_types();

// The directory of a config.json path or directory (where the weights are).
std::filesystem::path pretrained_dir(const std::filesystem::path& dir_or_config);

// Checks the config against the tensors' headers (no tensor data is read): the embedding [vocab_size,
// hidden] when present; per MoE layer the router gate [E, hidden], the first expert's gate projection
// [expert_ff, hidden] (or the fused gate_up tensor), no expert E; no layer at or past num_hidden_layers +
// num_nextn_predict_layers. Throws std::invalid_argument naming the config key, its value and the tensor
// that disagrees, e.g. "config.json says intermediate_size = 96 but
// model.layers.0.block_sparse_moe.experts.0.w1.weight has shape [88, 256] (expected [96, 256])".
void check_pretrained(const PretrainedConfig& config, const Checkpoint& checkpoint);

// A checkpoint opened and checked: config + tensors. Exactly one of `checkpoint` (a Hugging Face directory)
// and `gguf` (a GGUF file, single or split) is set, as config.format says.
struct Pretrained {
  PretrainedConfig config;
  std::shared_ptr<const Checkpoint> checkpoint;
  std::shared_ptr<const GgufModel> gguf;
  // The checkpoint's path, for messages.
  const std::filesystem::path& path() const { return gguf ? gguf->path() : checkpoint->path(); }
};
// Opens a checkpoint and checks its config against its tensors' headers:
//   - a Hugging Face directory (or its config.json): reads config.json, opens the weights of the directory
//     (Checkpoint's rules: model.safetensors.index.json or model.safetensors) and runs check_pretrained;
//   - a GGUF file (is_gguf_path: a name ending in .gguf or the GGUF magic), or any shard of a split one:
//     GgufModel, read_gguf_config and check_gguf (moe/io/gguf_config.h).
// Errors as read_pretrained_config, Checkpoint, check_pretrained, GgufModel, read_gguf_config, check_gguf.
Pretrained open_pretrained(const std::filesystem::path& path);

// MoE layer `layer_index` of a checked checkpoint, with load_layer's storage, quantization and memory rules
// (storage nullopt: the file's dtype; quantized files: bf16), or load_gguf_layer's for a GGUF file. A layer
// index outside [0, num_hidden_layers) (GGUF: block_count less the MTP layers) or a dense layer is
// std::invalid_argument naming the MoE layers ("layer 2 of /path is a dense MLP layer, not an MoE layer; the
// MoE layers of this deepseek_v3 checkpoint are 3-60").
// `experts`: a rank's part (load_layer's ExpertSet: the router gate, its biases, the shared expert and only
// these experts are read).
LayerWeights load_pretrained_layer(const Pretrained& pretrained, int layer_index,
                                   std::optional<kernels::DType> storage = std::nullopt,
                                   const ExpertSet& experts = ExpertSet::all());
LayerWeights load_pretrained_layer(const std::filesystem::path& dir, int layer_index,
                                   std::optional<kernels::DType> storage = std::nullopt,
                                   const ExpertSet& experts = ExpertSet::all());

// "Load these experts of layer `layer_index`" of a checked checkpoint (directory or GGUF file;
// LayerPartReader, moe/io/layer_weights.h): what an ExpertParallelLayer built from the directory calls on
// each rank.
LayerPartReader pretrained_part_reader(Pretrained pretrained, int layer_index,
                                       std::optional<kernels::DType> storage = std::nullopt);

}  // namespace moe::io

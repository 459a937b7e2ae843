// Weights of the small MoE decoder: seeded random init, and a safetensors file in the Mixtral layout.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "moe/io/layer_weights.h"
#include "moe/io/pretrained.h"
#include "moe/model/model_config.h"

namespace moe::model {

// One decoder block. Dense matrices are fp32 row-major in the nn.Linear layout [out, in].
struct BlockWeights {
  std::vector<float> attn_norm;                 // [hidden] RMSNorm weight before attention
  std::vector<float> wq, wk, wv, wo;            // [hidden, hidden] each
  std::vector<float> moe_norm;                  // [hidden] RMSNorm weight before the MoE layer
  std::shared_ptr<const io::LayerWeights> moe;  // router gate + experts (fp32 storage)
};

// All the weights of a model. Immutable once built; shared by every Model that runs it.
struct ModelWeights {
  ModelShape shape;
  std::vector<float> embedding;      // [vocab_size, hidden]
  std::vector<BlockWeights> layers;  // num_layers
  std::vector<float> final_norm;     // [hidden]
  std::vector<float> lm_head;        // [vocab_size, hidden]

  // Throws std::invalid_argument if a tensor's size does not fit `shape` (the message names it).
  void validate() const;
  // The MoE layers' io shape (no shared expert, no bias).
  static io::LayerShape moe_shape(const ModelShape& shape);
};

// Scales of the seeded init. Dense matrices are uniform in [-a, a) with a = gain * sqrt(3 / in), so a unit
// variance input gives outputs of variance gain^2; the embedding has unit variance.
//   moe_norm_gain  the MoE RMSNorm weight. io::random_layer draws experts with nn.Linear's init (variance
//                  1 / (3 in)), which leaves the MoE branch small beside the residual; a gain of 1.5 lifts it
//                  and sharpens the router so that a dropped pair moves the logits enough to change the
//                  argmax now and then, not always (tests/model_weights_test.cc checks both;
//                  docs/divergence.md shows how the gain sets the model's sensitivity).
//   lm_head_gain   the standard deviation of the logits over the vocabulary for a unit-RMS final state.
struct RandomInit {
  float moe_norm_gain = 1.5f;
  float lm_head_gain = 2.0f;
};

// Seeded random weights: the same bits for the same (shape, seed, init) on every machine. Each tensor draws
// from its own splitmix64 stream keyed by (seed, tensor name); MoE layers come from
// io::random_layer(moe_shape, kF32, seed mixed with the layer index). Throws for an invalid shape.
std::shared_ptr<const ModelWeights> random_model(const ModelShape& shape, uint64_t seed,
                                                 const RandomInit& init = {});

// File layout (one .safetensors file, Hugging Face Mixtral names, every tensor F32):
//   model.embed_tokens.weight                                   [vocab, hidden]
//   model.layers.{i}.input_layernorm.weight                      [hidden]
//   model.layers.{i}.self_attn.{q,k,v,o}_proj.weight             [hidden, hidden]
//   model.layers.{i}.post_attention_layernorm.weight             [hidden]
//   model.layers.{i}.block_sparse_moe.gate.weight                [experts, hidden]
//   model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight      [expert_ff, hidden]  (gate_proj)
//   model.layers.{i}.block_sparse_moe.experts.{e}.w3.weight      [expert_ff, hidden]  (up_proj)
//   model.layers.{i}.block_sparse_moe.experts.{e}.w2.weight      [hidden, expert_ff]  (down_proj)
//   model.norm.weight                                            [hidden]
//   lm_head.weight                                               [vocab, hidden]
// plus __metadata__: format = "moe-model/1" and every ModelShape field (top_k, rms_eps, rope_theta,
// max_positions, num_heads are not recoverable from tensor shapes). Attention is multi-head (no GQA),
// rotary on (q, k) with the half-split (rotate_half) convention of Hugging Face Llama/Mixtral.
// save_model throws io::IoError on I/O failure.
void save_model(const ModelWeights& weights, const std::filesystem::path& path);
// The ModelShape a moe-model file's __metadata__ describes: "format" must be "moe-model/1", every ModelShape
// field present, integers written in decimal in full (no sign but '-', no trailing text), floats as numbers
// strtof reads in full, and the shape valid (ModelShape::validate). `where` (the file) appears in messages.
// Throws std::invalid_argument naming the key and its text.
ModelShape shape_from_metadata(const std::map<std::string, std::string>& meta, const std::string& where);

// Throws std::invalid_argument for a file that is not in this layout (missing metadata or tensor, wrong
// shape; a dense tensor that is not F32; MoE tensors may be F32/BF16/F16 and are widened to fp32 storage by
// io::load_layer), io::IoError on I/O failure.
std::shared_ptr<const ModelWeights> load_model(const std::filesystem::path& path);

// The ModelShape of a Hugging Face Mixtral config (io::read_pretrained_config): vocab_size, hidden_size,
// num_hidden_layers, num_attention_heads, num_local_experts, num_experts_per_tok, intermediate_size,
// max_position_embeddings, rms_norm_eps, rope_theta. Throws std::invalid_argument naming what moe::model
// cannot run: num_key_value_heads != num_attention_heads (grouped-query attention), tie_word_embeddings,
// hidden_act other than silu, a sliding window, head_dim * heads != hidden_size. `dir` is for messages.
ModelShape shape_from_pretrained(const io::PretrainedConfig& config, const std::filesystem::path& dir);
// A Hugging Face checkpoint directory (config.json + model.safetensors or a sharded index, the tensor layout
// above, any safetensors metadata): no shape arguments. The config is checked against the tensors
// (io::check_pretrained) and every tensor's shape against the config; errors name the mismatch.
std::shared_ptr<const ModelWeights> load_pretrained(const std::filesystem::path& dir);
// load_pretrained for a directory or a config.json path, load_model for a .safetensors file.
std::shared_ptr<const ModelWeights> load_model_any(const std::filesystem::path& path);

}  // namespace moe::model

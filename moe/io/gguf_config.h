// What a GGUF file's metadata says, in the project's terms (io::PretrainedConfig): the MoE architectures
// llama.cpp writes (convert_hf_to_gguf.py, src/llama-arch.cpp, src/models/*.cpp), the keys each one reads and
// the router and expert semantics llama.cpp's graph gives them. A = general.architecture; every key below is
// "A.<key>"; integers may be stored as any GGUF integer type, numbers as f32, f64 or integers.
//
//   general.architecture   llama      Mixtral (A.expert_count > 0; a dense llama file is refused): experts of
//                                     feed_forward_length; softmax over all experts, top-k renormalised
//                          qwen2moe   Qwen2-MoE: expert_feed_forward_length (absent: feed_forward_length /
//                                     expert_used_count, as llama.cpp), a shared expert of
//                                     expert_shared_feed_forward_length (absent: feed_forward_length) behind
//                                     the sigmoid gate ffn_gate_inp_shexp; softmax, not renormalised
//                          qwen3moe   Qwen3-MoE: expert_feed_forward_length (same fallback); softmax,
//                                     renormalised (llama.cpp always renormalises qwen3moe)
//                          olmoe      OLMoE: experts of feed_forward_length; softmax, not renormalised
//                          deepseek2  DeepSeek-V2 / V3 / Kimi K2 by expert_gating_func: 1 softmax (also when
//                                     absent or 0, as llama.cpp reads DeepSeek-V2 files without the key) is
//                                     DeepSeek-V2 (no exp_probs_b; with expert_group_count > 1 the published
//                                     group_limited_greedy, a group's value its best score - llama.cpp sums a
//                                     group's two best instead); 2 sigmoid is DeepSeek-V3 (exp_probs_b
//                                     required; a group's value the sum of its two best biased scores);
//                                     expert_feed_forward_length, expert_shared_count (a fused shared expert
//                                     of shared_count x ff), expert_weights_norm (false; V3 renormalises only
//                                     when top-k > 1, as its published block does), expert_weights_scale (1),
//                                     expert_group_count / expert_group_used_count (1),
//                                     leading_dense_block_count (0: layers below it are dense),
//                                     nextn_predict_layers (0: the MTP layers after the last, not loadable)
//                          glm4moe    GLM-4.5: as deepseek2's V3 (expert_gating_func must be 2 or absent),
//                                     renormalised iff expert_weights_norm; block_count includes the
//                                     nextn_predict_layers MTP layers, which are refused
//                          gpt-oss    gpt-oss: expert_feed_forward_length; router bias; a softmax over the
//                                     top-k logits; clamped SwiGLU with llama.cpp's constants (alpha 1.702,
//                                     limit 7: GGUF files carry no key for them); expert biases
//                          llama4     Llama 4: expert_feed_forward_length (the shared expert's too);
//                                     interleave_moe_layer_step (1: layer i is MoE iff (i + 1) % step == 0);
//                                     sigmoid of the top-k logit scales the expert's input; a shared expert
// and for every architecture block_count, embedding_length, expert_count, expert_used_count. A key that
// llama.cpp's graph ignores for an architecture (expert_weights_norm on qwen2moe, expert_gating_func on
// llama, ...) must be absent or hold the value the graph uses; a key of a semantics this project does not run
// (expert_group_scale, experts_per_group, moe_every_n_layers, swiglu_clamp_exp, swiglu_clamp_shexp,
// moe_latent_size, router_logit_softcapping) is refused by name, with its value. The decoder's keys
// (context_length, attention.head_count, head_count_kv, key_length, layer_norm_rms_epsilon, rope.freq_base,
// vocab_size or tokenizer.ggml.tokens) are read where present, for information.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/io/gguf_model.h"
#include "moe/io/pretrained.h"

namespace moe::io {

// Reads `model`'s metadata. Throws std::invalid_argument naming the file and the key: an unsupported
// general.architecture (listing the supported ones), a missing required key, a value of the wrong type or out
// of range (top-k above the expert count, groups that do not divide the experts), a key this project refuses.
PretrainedConfig read_gguf_config(const GgufModel& model);

// The general.architecture values read_gguf_config accepts.
const std::vector<std::string>& supported_gguf_architectures();

// Checks the config against the tensor infos (no tensor data is read): per MoE layer the router
// [hidden, E]; for the first MoE layer every expert tensor's shape; no tensor of a layer at or past
// block_count. Throws std::invalid_argument naming the key, its value and the tensor that disagrees, e.g.
// "qwen3moe.expert_feed_forward_length = 768 but blk.0.ffn_gate_exps.weight has shape [2048, 512, 128]
// (expected [2048, 768, 128])".
void check_gguf(const PretrainedConfig& config, const GgufModel& model);

// llama.cpp's name of a general.file_type value (llama_ftype): "all F32", "Q4_K - Medium", "MXFP4 MoE", ...;
// "file type N" for others.
std::string llama_ftype_name(int64_t ftype);

}  // namespace moe::io

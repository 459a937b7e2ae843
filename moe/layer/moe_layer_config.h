// Configuration of an MoE layer: router, dispatch policy, kernels and threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/expert_ffn.h"
#include "kernels/cpu/linear.h"
#include "moe/io/layer_weights.h"
#include "moe/io/pretrained.h"
#include "router/dispatch_policy.h"
#include "router/router_config.h"

namespace moe {

// Everything that decides what a layer computes, apart from the weights.
//
// Presets (MoELayerConfig::preset; MoELayerConfig::preset_description says what each one is, for every
// surface's documentation): "deterministic" (stable dispatch: prefix scope, request priority, drop; invariant
// kernels) and "greedy" (batch scope, arrival priority, drop; fast kernels). Any mix can be built by setting
// the fields.
struct MoELayerConfig {
  RouterConfig router;  // num_experts/top_k must match the weights
  DispatchPolicy policy = DispatchPolicy::mode("stable");
  kernels::KernelKind expert_kernel = kernels::KernelKind::kInvariant;  // routed and shared experts
  kernels::KernelKind gate_kernel = kernels::KernelKind::kInvariant;    // router gate x @ W_gate^T
  kernels::Activation activation = kernels::Activation::kSwiGLU;
  float swiglu_alpha = 1.702f;  // kClampedSwiGLU's constants (gpt-oss: 1.702 and config.json's swiglu_limit)
  float swiglu_limit = 7.0f;
  // Llama 4: a pair's routing weight scales the expert's input row (FFN_e(w x)), and the expert's output is
  // added with weight 1; otherwise (every other family) it scales the output (w FFN_e(x)).
  bool weight_on_input = false;
  // The arithmetic of the routed and shared experts' FFNs (kernels/tensor.h). kBF16 runs the invariant kind
  // on the own vdpbf16ps kernel (batch-invariant bits, kernels/cpu/linear_bf16.h) and the fast kind on
  // oneDNN's bf16 matmul (Eigen on the widened bf16 weights in builds without oneDNN). The router gate and
  // the shared-expert gate stay fp32 whatever this says: a routing decision does not move with it.
  kernels::ComputePrecision compute = kernels::ComputePrecision::kF32;
  int num_threads = 1;
  int max_tokens = 256;  // the workspace is sized for batches up to this many rows at construction

  // Throws std::invalid_argument naming the bad field (router and policy included).
  void validate() const;

  // The router and expert semantics of an architecture's checkpoints (router_for, and gpt-oss's clamped
  // SwiGLU, Llama 4's weight on the input) with `preset_name`'s dispatch and kernels ("deterministic" or
  // "greedy"). Throws std::invalid_argument for unknown names.
  static MoELayerConfig preset(std::string_view preset_name, io::Architecture arch);
  // The preset's dispatch and kernels with the router and expert semantics a Hugging Face config describes
  // (io::PretrainedConfig: its router, activation and constants, weight_on_input).
  static MoELayerConfig pretrained(std::string_view preset_name, const io::PretrainedConfig& config);
  // The router preset an architecture uses (RouterConfig::preset of its name).
  static RouterConfig router_for(io::Architecture arch);
  // The router a name means: an architecture's (router_for: "mixtral", "qwen2-moe", "deepseek-v3", "olmoe",
  // ..., "llama4") or a router preset's (RouterConfig::preset: also "switch"). Throws std::invalid_argument
  // listing both.
  static RouterConfig router_named(std::string_view name);
  static const std::vector<std::string>& preset_names();
  // One sentence on a preset: its dispatch and kernels, read from preset(name, kMixtral) itself (so it cannot
  // drift from what the preset does), then what it guarantees. The one source of the presets' descriptions:
  // the Python docstrings and the C API (moe_preset_description) give this. Throws
  // std::invalid_argument for an unknown name.
  static std::string preset_description(std::string_view preset_name);
  // "fp32" or "bf16" (also "float32", "bfloat16"). Throws std::invalid_argument listing the names.
  static kernels::ComputePrecision parse_compute(std::string_view name);

  // This config made to fit `weights`: validated, the expert count checked against the weights, and the
  // weights' selection bias (DeepSeek-V3 e_score_correction_bias) adopted as the router's. Every layer
  // (single process or expert-parallel) builds from the fitted config, so all hash and compute the same
  // thing. Throws std::invalid_argument naming the mismatch, or a top_k above kMaxTopK.
  MoELayerConfig fitted_to(const io::LayerWeights& weights) const;
  // The largest top_k a layer supports (combine keeps a row's k expert rows on the stack).
  static constexpr int kMaxTopK = 64;

  // A canonical one-line description of every field, the input of config_hash() (compute is written only
  // when it is not fp32, so that the hashes of fp32 configs are those of earlier versions).
  std::string describe() const;
  // XXH3-64 of describe(): equal configs give equal hashes on every machine.
  uint64_t config_hash() const;
};

// The FFN of one expert for `config.activation`: the gated activations use gate, up and down; GELU uses up
// and down (the gate projection is ignored); with the expert's biases and the activation's constants.
kernels::FfnWeights expert_ffn_weights(const io::ExpertTensors& tensors, const MoELayerConfig& config);

}  // namespace moe

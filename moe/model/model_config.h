// The shape of the small MoE decoder and the runtime choices of one Model instance.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/cpu/linear.h"
#include "moe/layer/moe_layer_config.h"
#include "router/dispatch_policy.h"
#include "router/router_config.h"

namespace moe::model {

// Dimensions of the decoder (what the weights fix). Defaults: the divergence lab's model.
//   vocab_size   tokens are ids in [0, vocab_size)
//   hidden       d_model; num_heads must divide it (head_dim = hidden / num_heads, even for RoPE)
//   num_layers   decoder blocks, each attention + one MoE layer
//   num_experts, top_k, expert_ff   every MoE layer (SwiGLU experts, Mixtral router: softmax, top-k
//                renormalised), no shared expert
//   max_positions  the longest sequence a request may reach (prompt + generated)
//   rms_eps, rope_theta  RMSNorm epsilon, rotary base
struct ModelShape {
  int vocab_size = 512;
  int hidden = 256;
  int num_layers = 4;
  int num_heads = 4;
  int num_experts = 8;
  int top_k = 2;
  int expert_ff = 512;
  int max_positions = 4096;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;

  int head_dim() const { return hidden / num_heads; }
  // Throws std::invalid_argument naming the bad field, e.g. "ModelShape: top_k (9) exceeds num_experts (8)".
  void validate() const;
  // A smaller model for tests: vocab 128, hidden 64, 2 layers, 2 heads, 8 experts, top-2, expert ff 128.
  static ModelShape tiny();
  bool operator==(const ModelShape&) const = default;
};

// Runtime choices of one Model (the weights are shared between Models with different choices).
//   kernel   every linear of the model: Q/K/V/O projections, LM head, MoE gate and experts. kInvariant makes
//            a row's logits bitwise independent of the batch (with an invariant dispatch policy); kFast
//            (Eigen) may change reduction order with the number of rows, as real engines' GEMMs do.
//   policy   the MoE layers' dispatch policy (capacity scope, priority, overflow, capacity factor).
//   max_tokens  rows per forward the workspaces are sized for (a larger batch grows them once).
// Attention, RMSNorm and RoPE have one batch-invariant implementation whatever `kernel` is.
struct ModelOptions {
  kernels::KernelKind kernel = kernels::KernelKind::kInvariant;
  // The MoE layers' expert FFNs (MoELayerConfig::compute); attention, norms and the LM head stay fp32.
  kernels::ComputePrecision compute = kernels::ComputePrecision::kF32;
  DispatchPolicy policy = DispatchPolicy::mode("stable");
  int max_tokens = 256;
  // Keep each live request's routing per position in the MoE layers' routing states (Model::cached_block;
  // rollbacks of prompt rows, or of any row under causal scope).
  bool record_routing = false;

  // Throws std::invalid_argument naming the bad field.
  void validate() const;
  // The config of every MoE layer of a model of `shape` (single-threaded layers).
  MoELayerConfig layer_config(const ModelShape& shape) const;
  // The dispatch modes of the divergence lab: "greedy", "rank-only", "stable" (router/ named modes; stable is
  // prefix scope), "sequence" (sequence scope + request priority + drop: the whole prompt's budget, which
  // makes a prefix's routing depend on the prompt length), "request" (request scope + request priority +
  // drop: pools of one forward pass, which chunking changes), "causal" (causal scope + request priority +
  // drop), "dropless" (no capacity), each at capacity factor cf.
  // Throws std::invalid_argument for an unknown name, listing the known ones.
  static DispatchPolicy dispatch_mode(std::string_view name, double capacity_factor);
  static const std::vector<std::string>& dispatch_mode_names();
};

}  // namespace moe::model

// Internal to moe/api (not installed): what the C API and the Python module share. Builds layer weights from
// caller buffers and a layer config from named options.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "moe/api/ep_factory.h"
#include "moe/io/layer_weights.h"
#include "moe/io/pretrained.h"
#include "moe/layer/moe_layer_config.h"
#include "router/dispatch_policy.h"

namespace moe::api {

// Caller buffers of one layer (see moe_weight_buffers_t in moe_c.h for shapes). Expert and shared matrices
// have dtype `dtype` (kF32: float, kBF16: uint16_t bits); router gate, score bias and shared gate are fp32.
struct WeightBuffers {
  kernels::DType dtype = kernels::DType::kF32;
  const float* router_gate = nullptr;
  const float* score_bias = nullptr;
  std::vector<const void*> gate_proj, up_proj, down_proj;  // num_experts each
  const void* shared_gate_proj = nullptr;
  const void* shared_up_proj = nullptr;
  const void* shared_down_proj = nullptr;
  const float* shared_expert_gate = nullptr;
  const float* router_bias = nullptr;                       // [E] iff shape.router_bias
  std::vector<const float*> gate_bias, up_bias, down_bias;  // E each iff shape.expert_bias
};

// Copies `buffers` into new LayerWeights of `shape` (storage = buffers.dtype) with io::weights_from_views:
// memory to memory, no file. Throws std::invalid_argument for a bad shape or a missing/superfluous buffer.
io::LayerWeights weights_from_buffers(const io::LayerShape& shape, const WeightBuffers& buffers);

// The layer options of moe_layer_config_t and moe.Layer: an option left unset (nullopt) takes the preset's or
// the router's value. The setters check a value at once and throw std::invalid_argument naming it (unknown
// names, values out of range), leaving the options unchanged; make_config checks what depends on the weights.
struct LayerOptions {
  std::string preset = "deterministic";  // MoELayerConfig::preset_names()
  std::string router = "mixtral";        // an architecture name or a router preset name
  // A checkpoint's config.json (pretrained_options): its router and expert semantics replace `router`'s.
  std::shared_ptr<const io::PretrainedConfig> pretrained;
  std::optional<int> top_k;
  std::optional<bool> renormalize;
  std::optional<int> num_groups, topk_groups;
  std::optional<double> capacity_factor;
  std::optional<int> min_capacity;
  std::optional<CapacityScope> scope;
  std::optional<Priority> priority;
  std::optional<Overflow> overflow;
  std::optional<int> reroute_depth;
  std::optional<uint32_t> lookahead;
  std::optional<kernels::KernelKind> kernel;
  std::optional<kernels::ComputePrecision> compute;
  std::optional<int> num_threads;
  std::optional<int> max_tokens;
  std::optional<kernels::DType> storage;  // of the weights a pretrained layer loads (nullopt: the file's)
  std::string device = "cpu";
  ExpertParallelSpec expert_parallel;  // none unless set (moe/api/ep_factory.h)

  void set_preset(const std::string& name);
  void set_router(const std::string& name);
  void set_top_k(int k);
  void set_renormalize(int on);     // 0 or 1
  void set_num_groups(int groups);  // must divide num_experts (checked by make_config)
  void set_topk_groups(int kept);   // <= num_groups (checked by make_config)
  void set_capacity_factor(double cf);
  void set_min_capacity(int n);
  void set_scope(const std::string& name);
  void set_priority(const std::string& name);
  void set_overflow(const std::string& name);
  void set_reroute_depth(int depth);
  void set_lookahead(int64_t positions);  // prefix scope's W (DispatchPolicy::lookahead), >= 0
  void set_kernel(const std::string& name);
  void set_compute(const std::string& name);  // "fp32" | "bf16" (MoELayerConfig::parse_compute)
  void set_num_threads(int n);
  void set_max_tokens(int n);
  void set_device(const std::string& name);
  // backend "" (none), "single", "mpi"; planning "global" | "home" (ExpertParallelSpec::check).
  void set_expert_parallel(const std::string& backend, const std::string& planning);
  // EPLB's physical_to_logical (slot s on rank s / (slots / world size)); empty: contiguous. Checked against
  // the layer (experts, world size) when it is created.
  void set_expert_placement(std::vector<int32_t> physical_to_logical);
};

// `options` for a layer of a Hugging Face checkpoint: the router and expert semantics config.json describes
// (MoELayerConfig::pretrained), with top_k and renormalisation overridden only where `options` sets them.
LayerOptions pretrained_options(LayerOptions options, const io::PretrainedConfig& config);

// The config of `options` for `weights` (num_experts from the weights). Validated; throws
// std::invalid_argument naming the bad option.
MoELayerConfig make_config(const LayerOptions& options, const io::LayerWeights& weights);
MoELayerConfig make_config(const LayerOptions& options, int num_experts);

}  // namespace moe::api

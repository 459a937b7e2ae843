// Internal to moe/api (not installed): what the C API and the Python module share. Builds layer weights from
// caller buffers and a layer config from named options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "moe/io/layer_weights.h"
#include "moe/layer/moe_layer_config.h"

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
};

// Copies `buffers` into new LayerWeights of `shape` (storage = buffers.dtype).
// NOTES: io::LayerWeights can only be built by moe_io (load_layer, random_layer), so the copy is staged as a
// safetensors file in std::filesystem::temp_directory_path(), loaded with load_layer (a mapping of the file)
// and unlinked before returning. A public "weights from views" constructor in moe_io would remove the detour.
// Throws std::invalid_argument for a bad shape or a missing/superfluous buffer, std::runtime_error on I/O.
io::LayerWeights weights_from_buffers(const io::LayerShape& shape, const WeightBuffers& buffers);

// The layer options of moe_layer_config_t with "keep" meaning empty strings and 0 / -1 values.
struct LayerOptions {
  std::string preset = "deterministic";  // "deterministic" | "greedy"
  std::string router = "mixtral";        // architecture name or router preset name
  int top_k = 0;
  int renormalize = -1;
  int num_groups = 0;
  int topk_groups = 0;
  double capacity_factor = 0.0;
  std::string scope, priority, overflow, kernel;
  int num_threads = 0;
  int max_tokens = 0;
};

// The config of `options` for `weights` (num_experts from the weights). Validated; throws
// std::invalid_argument naming the bad option.
MoELayerConfig make_config(const LayerOptions& options, const io::LayerWeights& weights);

}  // namespace moe::api

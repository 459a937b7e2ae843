// The MoE layer on CPU: gate -> route -> plan -> gather -> expert FFN -> combine (+ shared experts).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "moe/io/layer_weights.h"
#include "moe/layer/fingerprint.h"
#include "moe/layer/layer.h"
#include "moe/layer/moe_layer_config.h"
#include "router/dispatch_plan.h"
#include "router/dispatch_planner.h"
#include "router/routing_state.h"
#include "router/token_meta.h"
#include "router/topk_router.h"

namespace moe {

class ExpertFfns;  // moe/layer/expert_ffns.h (internal: not an installed header)

// The MoE layer on the CPU, with its weights, workspace and thread pool: moe::Layer's contract (layer.h).
//
// g(t) of the shared expert is sigmoid(shared_gate . x[t]) for Qwen2-MoE and 1 for DeepSeek-V3; FFNs and the
// gate use the configured kernels (kernels/cpu), the FFNs in the configured compute precision (expert_ffns.h;
// the gates always in fp32).
//
// Determinism: with scope request, causal, sequence, prefix or none + request priority and invariant kernels
// (the "deterministic" preset is prefix scope: MoELayerConfig::preset_description), the bits of y[t] depend
// only on x[t], the rows of t's request (and its causal state), the weights and the config: not on other
// requests in the batch, the row order, the batch size or num_threads (docs/determinism.md).
//
// Memory: the constructor sizes a workspace for config.max_tokens rows; forward() on up to that many rows
// allocates nothing (after the first call). A larger batch grows the workspace once (documented allocation).
// Threading: forward() is not reentrant; one layer serves one thread at a time (it owns a thread pool of
// config.num_threads threads, the caller being one of them).
class MoELayer final : public Layer {
 public:
  // Takes the weights (shared, immutable). Throws std::invalid_argument if the config is invalid or does not
  // fit the weights (expert count, shared expert presence, bias size).
  MoELayer(MoELayerConfig config, std::shared_ptr<const io::LayerWeights> weights);
  ~MoELayer();
  // MoE layer `layer_index` of a Hugging Face checkpoint directory (config.json + safetensors) of any family
  // io::read_pretrained_config reads: the weights and the router and expert semantics from config.json
  // (MoELayerConfig::pretrained), the preset's dispatch and kernels; `storage` as io::load_layer's (nullopt:
  // the file's dtype, quantized checkpoints dequantized to bf16). No shape arguments: a config that does not
  // fit the tensors, a layer index outside [0, num_hidden_layers) or a dense layer throws
  // std::invalid_argument naming the mismatch (io::open_pretrained, io::load_pretrained_layer); weights that
  // do not fit the memory available io::OutOfMemory.
  static std::unique_ptr<MoELayer> from_pretrained(const std::filesystem::path& dir, int layer_index,
                                                   std::string_view preset = "deterministic",
                                                   std::optional<kernels::DType> storage = std::nullopt);
  MoELayer(const MoELayer&) = delete;
  MoELayer& operator=(const MoELayer&) = delete;

  // Layer::forward's contract (layer.h); the planner's rules are DispatchPlanner::plan's.
  void forward(const float* x, int num_tokens, std::span<const TokenMeta> meta, float* y,
               RoutingState* state = nullptr, MoEStats* stats = nullptr) override;

  const MoELayerConfig& config() const override { return config_; }
  const io::LayerWeights& weights() const override { return *weights_; }
  int64_t hidden() const override { return hidden_; }
  // The plan of the last forward() (valid until the next call).
  const DispatchPlan& last_plan() const { return plan_; }
  const DispatchPlan& last_plan() override { return plan_; }
  // The router logits (gate output before scoring) of the last forward(): [num_tokens, num_experts] fp32,
  // row-major; valid until the next call.
  std::span<const float> last_router_logits() const {
    return {logits_.data(), static_cast<size_t>(last_tokens_) * static_cast<size_t>(num_experts())};
  }
  // Bytes of workspace held now (activations, routing, plan).
  size_t workspace_bytes() const;
  Fingerprint fingerprint() const override;

 private:
  void ensure_workspace(int num_tokens);
  // weight_on_input: the rows of every kept pair scaled by the pair's weight, in slot order (bf16 compute:
  // then rounded).
  void gather_scaled(const float* x, int64_t num_slots);
  void run_experts();
  void run_shared(const float* x, int num_tokens);
  void combine(int num_tokens, float* y);

  MoELayerConfig config_;
  std::shared_ptr<const io::LayerWeights> weights_;
  int64_t hidden_ = 0;
  std::unique_ptr<ExpertFfns> ffns_;
  bool has_shared_ = false;
  kernels::ThreadPool pool_;
  TopKRouter router_;
  DispatchPlanner planner_;

  // Workspace.
  int capacity_tokens_ = 0;
  int last_tokens_ = 0;        // rows of the last forward()
  std::vector<float> logits_;  // [T, E]
  TokenRoutes routes_;
  DispatchPlan plan_;
  std::vector<float> gathered_;  // [slots, hidden] rows of x in slot order (fp32 compute)
  // bf16 compute: x rounded once per token ([T, row]) and its rows in slot order ([slots, row]), row =
  // ExpertFfns::rounded_row_elems(); each used from its first 64-byte-aligned element (moe_layer.cc
  // aligned64).
  std::vector<uint16_t> x_rounded_, gathered_rounded_;
  std::vector<float> expert_out_;  // [slots, hidden]
  // FFN scratch; per_thread_scratch_ floats per thread when experts run one per thread.
  std::vector<float> scratch_;
  size_t per_thread_scratch_ = 0;
  std::vector<int> active_experts_;       // experts with rows in the current plan
  std::vector<float> shared_out_;         // [T, hidden]
  std::vector<float> shared_gate_logit_;  // [T]
};

}  // namespace moe

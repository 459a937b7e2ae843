// The MoE layer on CPU: gate -> route -> plan -> gather -> expert FFN -> combine (+ shared experts).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "moe/io/layer_weights.h"
#include "moe/layer/fingerprint.h"
#include "moe/layer/moe_layer_config.h"
#include "router/causal_state.h"
#include "router/dispatch_plan.h"
#include "router/dispatch_planner.h"
#include "router/token_meta.h"
#include "router/topk_router.h"

namespace moe {

// Routing outcome of one forward pass.
struct MoEStats {
  int64_t num_tokens = 0;
  int64_t num_kept = 0;
  int64_t num_rerouted = 0;
  int64_t num_dropped = 0;
  int64_t num_tokens_fully_dropped = 0;
  std::vector<int32_t> expert_load;  // slots used per expert
};

// The argument checks every layer's forward() makes, with MoELayer's messages (std::invalid_argument):
// num_tokens >= 0, x and y set when there are rows, meta.size() == num_tokens, y not overlapping x.
void check_forward_args(const float* x, int num_tokens, std::span<const TokenMeta> meta, const float* y,
                        int64_t hidden);

// The provenance every layer records: config and weights hashes, version, build, kernel kinds
// ("<expert kind> (gate <gate kind>)"), dispatch ("scope/priority/overflow"), and the given device and thread
// count. Layers amend what is theirs (a GPU layer prefixes the kernel, an expert-parallel one sets
// world_size).
Fingerprint layer_fingerprint(const MoELayerConfig& config, const io::LayerWeights& weights,
                              std::string device, int num_threads);

// Fills `stats` from a plan (num_tokens is the plan's batch). Reuses stats->expert_load's capacity.
void collect_stats(const DispatchPlan& plan, MoEStats* stats);

// One MoE layer with its weights, workspace and thread pool.
//
// forward() computes, for every row t of x:
//   y[t] = sum_{j in 0..k-1, pair (t,j) not dropped} w[t][j] * FFN_{e(t,j)}(x[t])     (j ascending)
//        + g(t) * SharedFFN(x[t])                                                   (if the layer has one)
// with g(t) = sigmoid(shared_gate . x[t]) for Qwen2-MoE and 1 for DeepSeek-V3. Routing (e, w) comes from the
// router and the planner (docs/routing.md); FFNs and the gate use the configured kernels.
//
// Determinism: with scope request/causal/none + request priority and invariant kernels (the "deterministic"
// preset), the bits of y[t] depend only on x[t], the rows of t's request (and its causal state), the weights
// and the config: not on other requests in the batch, the row order, the batch size or num_threads
// (docs/determinism.md).
//
// Memory: the constructor sizes a workspace for config.max_tokens rows; forward() on up to that many rows
// allocates nothing (after the first call). A larger batch grows the workspace once (documented allocation).
// Threading: forward() is not reentrant; one layer serves one thread at a time (it owns a thread pool of
// config.num_threads threads, the caller being one of them).
class MoELayer {
 public:
  // Takes the weights (shared, immutable). Throws std::invalid_argument if the config is invalid or does not
  // fit the weights (expert count, shared expert presence, bias size).
  MoELayer(MoELayerConfig config, std::shared_ptr<const io::LayerWeights> weights);
  ~MoELayer();
  MoELayer(const MoELayer&) = delete;
  MoELayer& operator=(const MoELayer&) = delete;

  // x: [num_tokens, hidden] row-major fp32; meta: num_tokens entries; y: [num_tokens, hidden], overwritten
  // (must not overlap x). state: the causal routing state (used and advanced under causal scope; may be null,
  // see DispatchPlanner::plan); stats: filled when non-null. Errors: std::invalid_argument for null pointers
  // with rows, a meta length mismatch, a row with no finite gate logit (NaN or inf in x; the message names
  // the row), or anything the planner rejects. On a throw, y and state are unchanged.
  void forward(const float* x, int num_tokens, std::span<const TokenMeta> meta, float* y,
               CausalRoutingState* state = nullptr, MoEStats* stats = nullptr);

  const MoELayerConfig& config() const { return config_; }
  const io::LayerWeights& weights() const { return *weights_; }
  int64_t hidden() const { return hidden_; }
  int num_experts() const { return config_.router.num_experts; }
  int top_k() const { return config_.router.top_k; }
  // The plan of the last forward() (valid until the next call).
  const DispatchPlan& last_plan() const { return plan_; }
  // Bytes of workspace held now (activations, routing, plan).
  size_t workspace_bytes() const;
  // Provenance of results computed by this layer.
  Fingerprint fingerprint() const;

 private:
  void ensure_workspace(int num_tokens);
  void run_experts();
  void run_shared(const float* x, int num_tokens);
  void combine(int num_tokens, float* y);

  MoELayerConfig config_;
  std::shared_ptr<const io::LayerWeights> weights_;
  int64_t hidden_ = 0;
  std::vector<kernels::FfnWeights> experts_;
  kernels::FfnWeights shared_{};
  bool has_shared_ = false;
  kernels::ThreadPool pool_;
  TopKRouter router_;
  DispatchPlanner planner_;

  // Workspace.
  int capacity_tokens_ = 0;
  std::vector<float> logits_;  // [T, E]
  TokenRoutes routes_;
  DispatchPlan plan_;
  std::vector<float> gathered_;    // [slots, hidden] rows of x in slot order
  std::vector<float> expert_out_;  // [slots, hidden]
  std::vector<float>
      scratch_;  // ffn scratch; per_thread_scratch_ floats per thread when experts run one per thread
  size_t per_thread_scratch_ = 0;
  std::vector<int> active_experts_;       // experts with rows in the current plan
  std::vector<float> shared_out_;         // [T, hidden]
  std::vector<float> shared_gate_logit_;  // [T]
};

}  // namespace moe

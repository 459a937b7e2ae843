// The MoE layer's interface: one contract that every backend keeps - MoELayer (CPU, moe/layer), CudaMoELayer
// (one CUDA device, moe/cuda) and parallel::ExpertParallelLayer (experts over the ranks of a communicator).
// The C API, the Python module and the test harness over every backend (tests/layer_cases_test.cc) hold
// layers through it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "moe/io/layer_weights.h"
#include "moe/layer/fingerprint.h"
#include "moe/layer/moe_layer_config.h"
#include "router/dispatch_plan.h"
#include "router/routing_state.h"
#include "router/token_meta.h"

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

// One MoE layer with its weights.
//
// forward() computes, for every row t of x (docs/runtime.md):
//   y[t] = sum_{j in 0..k-1, pair (t,j) not dropped} w[t][j] * FFN_{e(t,j)}(x[t])     (j ascending)
//        + g(t) * SharedFFN(x[t])                                                   (if the layer has one)
// with routing (e, w) from the router and the planner (docs/routing.md).
//   x: [num_tokens, hidden] row-major fp32 (host memory); meta: num_tokens entries (request_id, position);
//   y: [num_tokens, hidden], overwritten, must not overlap x. state: the causal routing state (read and
//   advanced under causal scope; may be null: every request then starts at position 0); stats: filled when
//   not null.
// Errors: std::invalid_argument for null pointers with rows, a meta length mismatch, a row with no finite
// gate logit (NaN or inf in x; the message names the row), or anything the planner rejects (duplicate
// (request_id, position), causal positions out of sequence); y and state are then unchanged. Backends add
// their own failures (std::runtime_error: a CUDA error, a dead peer) as their headers say.
// Determinism: under the "deterministic" preset the bits of y[t] depend only on x[t], the rows of t's request
// (and its causal state), the weights and the config (docs/determinism.md lists each backend's clauses).
// Threading: forward() is not reentrant; one thread at a time per layer.
class Layer {
 public:
  virtual ~Layer() = default;

  virtual void forward(const float* x, int num_tokens, std::span<const TokenMeta> meta, float* y,
                       RoutingState* state = nullptr, MoEStats* stats = nullptr) = 0;

  virtual const MoELayerConfig& config() const = 0;
  virtual const io::LayerWeights& weights() const = 0;
  virtual int64_t hidden() const = 0;
  int num_experts() const { return config().router.num_experts; }
  int top_k() const { return config().router.top_k; }
  // The plan of the last forward(), valid until the next one (a device backend copies it back on first use
  // after a forward; an expert-parallel layer's is the global batch's).
  virtual const DispatchPlan& last_plan() = 0;
  // Provenance of results computed by this layer.
  virtual Fingerprint fingerprint() const = 0;
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

}  // namespace moe

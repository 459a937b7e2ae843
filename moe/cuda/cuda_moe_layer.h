// The MoE layer on one CUDA device: MoELayer's config, weights and forward() contract, computed on the GPU
// (kernels/cuda: gate GEMM, top-k gating, planner, gather, grouped expert FFN, combine).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/cuda/device_buffer.h"
#include "kernels/cuda/expert_ffn.h"
#include "moe/io/layer_weights.h"
#include "moe/layer/fingerprint.h"
#include "moe/layer/layer.h"
#include "moe/layer/moe_layer.h"
#include "moe/layer/moe_layer_config.h"
#include "router/cuda/plan_host.h"
#include "router/cuda/plan_types.h"
#include "router/dispatch_plan.h"
#include "router/routing_state.h"
#include "router/token_meta.h"

namespace moe {

// A routing-state table in device memory, in the planner's layout (router/cuda/plan_types.h, PlanInputs):
// token_state_row[t] names the row of token t's request (causal: -1 = starts fresh; sequence: -1 = not
// admitted); rows are read and, when the plan succeeds, advanced in place. For forward_device() under causal
// and sequence scopes.
struct DeviceRoutingTable {
  const int32_t* token_state_row = nullptr;  // [T]
  int num_rows = 0;
  int32_t* slots_held = nullptr;            // [num_rows * E]
  uint32_t* next_position = nullptr;        // [num_rows]
  const uint32_t* prompt_length = nullptr;  // [num_rows] (sequence scope)
  // [num_rows * top_k * E] (sequence scope; rules::prompt_choice_counts_size)
  int32_t* higher_choices = nullptr;
};

// The GPU twin of MoELayer. forward() computes the same function (docs/runtime.md): same router, the same
// plan integer for integer (the planner is the CPU's algorithm on the device), the same FFN and combine
// formulas, with CUDA's expf where the CPU has its own exp, so outputs agree within fp32 rounding (about
// 1e-6 relative), not bitwise.
//
// Kernels: config.expert_kernel and config.gate_kernel choose per GEMM between kInvariant (kernels/cuda's
// fixed-tile SIMT GEMM: each output element one thread, one fixed k order) and kFast (cuBLAS).
// config.num_threads is ignored.
//
// Determinism: under the "deterministic" preset (stable dispatch + invariant kernels) the bits of y[t]
// depend only on x[t], the rows of t's request (and its causal state), the weights and the config: not on
// the rest of the batch, the row order or the batch size. The fast kind (cuBLAS) may change with the batch.
//
// Synchronisation: forward_device() enqueues everything on the given stream and never synchronises with the
// invariant kinds, so it can be captured in a CUDA graph; the fast expert kind synchronises once (it reads
// the per-expert row counts to size its cuBLAS calls). forward() is the host-memory convenience: it copies
// in, runs forward_device() on the layer's stream, synchronises once, checks the device-side errors and only
// then writes y and the causal state.
//
// Memory: the constructor uploads the weights (stream-ordered copies on the layer's stream, which it then
// synchronises, so that forward_device() on any stream sees them) and sizes a device workspace for
// config.max_tokens rows; a forward on up to that many rows allocates nothing. A larger batch grows the
// workspace once (forward() only; forward_device() throws instead, since it may be running inside a graph
// capture). Threading: one host thread at a time per layer. The layer's calls make `device` current.
class CudaMoELayer final : public Layer {
 public:
  // Throws std::invalid_argument if the config is invalid or does not fit the weights (as MoELayer), and
  // std::runtime_error naming the reason when no usable CUDA device exists (or `device` is out of range).
  CudaMoELayer(MoELayerConfig config, std::shared_ptr<const io::LayerWeights> weights, int device = 0);
  ~CudaMoELayer();
  CudaMoELayer(const CudaMoELayer&) = delete;
  CudaMoELayer& operator=(const CudaMoELayer&) = delete;

  // MoELayer::forward's contract on host arrays (same arguments, same checks and messages, same
  // exceptions; y and state unchanged on a throw). A row with no finite gate logit and the planner's data
  // errors are detected on the device and thrown here after the synchronisation.
  void forward(const float* x, int num_tokens, std::span<const TokenMeta> meta, float* y,
               RoutingState* state = nullptr, MoEStats* stats = nullptr) override;

  // Device arrays: x [num_tokens, hidden], meta [num_tokens], y [num_tokens, hidden] (not overlapping x),
  // all device memory; asynchronous on `stream`. Under causal and sequence scopes `state` is the request
  // table (null: causal - every request starts fresh at position 0; sequence - each request's rows are its
  // whole prompt). Data errors are recorded on the device: call
  // check_device_errors(stream) when the host may synchronise. Throws std::invalid_argument for host-side
  // argument errors (num_tokens above the workspace, null pointers).
  void forward_device(const float* x, int num_tokens, const TokenMeta* meta, float* y, cudaStream_t stream,
                      const DeviceRoutingTable* state = nullptr);
  // Synchronises `stream` and throws std::invalid_argument (the CPU layer's wording) if the last
  // forward_device() found a row with no finite gate logit or a planner error.
  void check_device_errors(cudaStream_t stream);

  const MoELayerConfig& config() const override { return config_; }
  const io::LayerWeights& weights() const override { return *weights_; }
  int64_t hidden() const override { return hidden_; }
  int device() const { return device_; }
  // The stream forward() runs on (created non-blocking by the layer).
  cudaStream_t stream() const { return stream_; }
  // The plan of the last forward: copied from the device on the first call after a forward (ordered on and
  // synchronising the layer's stream), then kept until the next forward. After forward_device() on another
  // stream, synchronise that stream (or check_device_errors(stream)) before calling this.
  const DispatchPlan& last_plan() override;
  // Device bytes held: weights and workspace.
  size_t device_bytes() const;
  // Provenance; device = "cuda:<index> <name> sm_<major><minor>".
  Fingerprint fingerprint() const override;

 private:
  struct Workspace;
  void release() noexcept;  // workspace, cuBLAS handle and stream (the weights free themselves)
  void upload_weights();
  void ensure_workspace(int num_tokens);
  void gate(const float* x, int num_tokens, cudaStream_t stream);
  void experts(int max_rows, cudaStream_t stream);
  void shared(const float* x, int num_tokens, cudaStream_t stream);
  void enqueue_error_readback(cudaStream_t stream);
  void throw_if_device_error();

  MoELayerConfig config_;
  std::shared_ptr<const io::LayerWeights> weights_;
  int device_ = 0;
  int64_t hidden_ = 0;
  int num_ranked_ = 0;
  int last_tokens_ = 0;                 // rows of the last forward_device()
  DispatchPlan plan_;                   // last_plan()'s copy
  std::vector<int32_t> route_choices_;  // forward() with a recording state: the routes' experts, host copy
  bool plan_stale_ = true;
  bool has_shared_ = false;
  bool has_shared_gate_ = false;
  cudaStream_t stream_ = nullptr;
  void* cublas_ = nullptr;  // cublasHandle_t of the fast gate GEMMs (null with invariant gates)

  // Weights on the device.
  cuda::DeviceBuffer<float> gate_w_;         // [E, hidden]
  cuda::DeviceBuffer<float> bias_;           // [E] selection bias, or empty
  cuda::DeviceBuffer<float> shared_gate_w_;  // [1, hidden], or empty
  cuda::DeviceBuffer<std::byte> w1_, w3_, w2_, shared_w1_, shared_w3_, shared_w2_;
  cuda::DeviceBuffer<float> router_bias_;   // [E] (gpt-oss), or empty
  cuda::DeviceBuffer<float> b1_, b3_, b2_;  // the experts' biases [E][ff], [E][ff], [E][hidden], or empty
  cuda::ExpertWeightsView experts_view_{}, shared_view_{};

  std::unique_ptr<Workspace> ws_;
  cuda::RoutingStateTable table_;  // forward(): the batch's routing-state rows on the host
};

}  // namespace moe

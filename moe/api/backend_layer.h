// One MoE layer on a chosen backend (CPU MoELayer or CUDA CudaMoELayer) behind one interface, so that the C
// API and the Python module serve both with the same code.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "moe/io/layer_weights.h"
#include "moe/layer/fingerprint.h"
#include "moe/layer/moe_layer.h"
#include "moe/layer/moe_layer_config.h"
#include "router/causal_state.h"
#include "router/dispatch_plan.h"
#include "router/token_meta.h"

namespace moe::api {

// MoELayer's interface (moe/layer/moe_layer.h); every backend keeps its contract: same checks, same
// exceptions, y and the causal state untouched on a throw. Not reentrant.
class BackendLayer {
 public:
  virtual ~BackendLayer() = default;
  virtual void forward(const float* x, int num_tokens, std::span<const TokenMeta> meta, float* y,
                       CausalRoutingState* state, MoEStats* stats) = 0;
  virtual const MoELayerConfig& config() const = 0;
  virtual int64_t hidden() const = 0;
  virtual int num_experts() const = 0;
  virtual int top_k() const = 0;
  // The plan of the last forward (a device backend copies it back on first use after a forward).
  virtual const DispatchPlan& last_plan() = 0;
  virtual Fingerprint fingerprint() const = 0;
};

// The backend named by `device`: "" or "cpu" (MoELayer), "cuda" or "cuda:N" (CudaMoELayer on device N, 0 by
// default). Throws std::invalid_argument for another name or a build without CUDA ("this build has no CUDA
// backend"), std::runtime_error naming the reason when the device is not usable, and whatever the layer's
// constructor throws for the config.
std::unique_ptr<BackendLayer> make_backend_layer(const std::string& device, MoELayerConfig config,
                                                 std::shared_ptr<const io::LayerWeights> weights);

// Whether this build has the CUDA backend (it may still find no device at run time).
bool has_cuda_backend();

}  // namespace moe::api

#include "moe/api/backend_layer.h"

#include <cctype>
#include <stdexcept>
#include <utility>

#if MOE_API_WITH_CUDA
#include "moe/cuda/cuda_moe_layer.h"
#endif

namespace moe::api {
namespace {

template <class Layer>
class Backend final : public BackendLayer {
 public:
  template <class... Args>
  explicit Backend(Args&&... args) : layer_(std::forward<Args>(args)...) {}
  void forward(const float* x, int num_tokens, std::span<const TokenMeta> meta, float* y,
               CausalRoutingState* state, MoEStats* stats) override {
    plan_stale_ = true;
    layer_.forward(x, num_tokens, meta, y, state, stats);
  }
  const MoELayerConfig& config() const override { return layer_.config(); }
  int64_t hidden() const override { return layer_.hidden(); }
  int num_experts() const override { return layer_.num_experts(); }
  int top_k() const override { return layer_.top_k(); }
  const DispatchPlan& last_plan() override {
    if constexpr (std::is_same_v<Layer, MoELayer>) {
      return layer_.last_plan();
    } else {
      if (plan_stale_) {
        plan_ = layer_.last_plan();
        plan_stale_ = false;
      }
      return plan_;
    }
  }
  Fingerprint fingerprint() const override { return layer_.fingerprint(); }

 private:
  Layer layer_;
  DispatchPlan plan_;  // device backends: the last plan, copied back on demand
  bool plan_stale_ = true;
};

// "cuda" -> 0, "cuda:N" -> N; -1 when `device` is not a CUDA name.
int cuda_index(const std::string& device) {
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5 || device.size() > 9) return -1;
  int index = 0;
  for (size_t i = 5; i < device.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(device[i]))) return -1;
    index = index * 10 + (device[i] - '0');
  }
  return index;
}

}  // namespace

bool has_cuda_backend() {
  return MOE_API_WITH_CUDA != 0;
}

std::unique_ptr<BackendLayer> make_backend_layer(const std::string& device, MoELayerConfig config,
                                                 std::shared_ptr<const io::LayerWeights> weights) {
  if (device.empty() || device == "cpu")
    return std::make_unique<Backend<MoELayer>>(config, std::move(weights));
  const int index = cuda_index(device);
  if (index < 0) {
    throw std::invalid_argument("device must be \"cpu\", \"cuda\" or \"cuda:N\" (got \"" + device + "\")");
  }
#if MOE_API_WITH_CUDA
  return std::make_unique<Backend<CudaMoELayer>>(config, std::move(weights), index);
#else
  throw std::invalid_argument("device \"" + device +
                              "\": this build has no CUDA backend (MOE_ENABLE_CUDA=OFF)");
#endif
}

}  // namespace moe::api

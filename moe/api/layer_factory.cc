#include "moe/api/layer_factory.h"

#include <cctype>
#include <stdexcept>
#include <utility>

#include "moe/layer/moe_layer.h"

#if MOE_API_WITH_CUDA
#include "moe/cuda/cuda_moe_layer.h"
#endif

namespace moe::api {
namespace {

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

void check_device_name(const std::string& device) {
  if (device.empty() || device == "cpu") return;
  if (cuda_index(device) < 0) {
    throw std::invalid_argument("device must be \"cpu\", \"cuda\" or \"cuda:N\" (got \"" + device + "\")");
  }
  if (!has_cuda_backend()) {
    throw std::invalid_argument("device \"" + device +
                                "\": this build has no CUDA backend (MOE_ENABLE_CUDA=OFF)");
  }
}

std::unique_ptr<Layer> make_layer(const std::string& device, MoELayerConfig config,
                                  std::shared_ptr<const io::LayerWeights> weights) {
  check_device_name(device);
  if (device.empty() || device == "cpu")
    return std::make_unique<MoELayer>(std::move(config), std::move(weights));
#if MOE_API_WITH_CUDA
  return std::make_unique<CudaMoELayer>(std::move(config), std::move(weights), cuda_index(device));
#else
  throw std::logic_error("unreachable: check_device_name rejects CUDA names in this build");
#endif
}

}  // namespace moe::api

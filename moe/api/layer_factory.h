// A layer on the backend a device name chooses, for the C API and the Python module.
#pragma once

#include <memory>
#include <string>

#include "moe/io/layer_weights.h"
#include "moe/layer/layer.h"
#include "moe/layer/moe_layer_config.h"

namespace moe::api {

// Throws std::invalid_argument unless `device` is "" or "cpu", or (in a build with the CUDA backend) "cuda"
// or "cuda:N": "device must be ..." for another name, "this build has no CUDA backend" for a CUDA name
// without it.
void check_device_name(const std::string& device);

// The layer on `device` (check_device_name's names): MoELayer for "cpu", CudaMoELayer on device N for
// "cuda:N" ("cuda" = 0). Throws what check_device_name throws, std::runtime_error naming the reason when the
// device is not usable, and whatever the layer's constructor throws for the config.
std::unique_ptr<Layer> make_layer(const std::string& device, MoELayerConfig config,
                                  std::shared_ptr<const io::LayerWeights> weights);

// Whether this build has the CUDA backend (it may still find no device at run time).
bool has_cuda_backend();

}  // namespace moe::api

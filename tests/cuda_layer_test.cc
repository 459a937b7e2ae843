// CudaMoELayer's host-side behaviour that needs no GPU: configs are validated against the weights before
// the device is touched, and a machine without a usable device gets a clear error, not a crash.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "base/cuda/device.h"
#include "moe/cuda/cuda_moe_layer.h"
#include "tests/support/layer_fixtures.h"

namespace moe {
namespace {

TEST(CudaLayer, InvalidConfigIsRejectedBeforeTheDevice) {
  auto weights = testing::RandomWeights(testing::SmallShape(64, 96, 8));
  MoELayerConfig config = testing::SmallConfig("deterministic", 16, 2);  // weights have 8 experts
  EXPECT_THROW(CudaMoELayer(config, weights), std::invalid_argument);
  config = testing::SmallConfig("deterministic", 8, 9);  // top_k above the expert count
  EXPECT_THROW(CudaMoELayer(config, weights), std::invalid_argument);
}

TEST(CudaLayer, Bf16ComputeIsRefusedWithAClearError) {
  auto weights = testing::RandomWeights(testing::SmallShape(64, 96, 8));
  MoELayerConfig config = testing::SmallConfig("deterministic", 8, 2);
  config.compute = kernels::ComputePrecision::kBF16;
  try {
    CudaMoELayer layer(config, weights);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("compute precision 'bf16' is not implemented on the GPU"),
              std::string::npos)
        << e.what();
  }
}

TEST(CudaLayer, NoDeviceIsAClearError) {
  std::string why;
  if (cuda::device_available(&why)) GTEST_SKIP() << "a CUDA device is present; the no-device path needs none";
  auto weights = testing::RandomWeights(testing::SmallShape(64, 96, 8));
  try {
    CudaMoELayer layer(testing::SmallConfig("deterministic", 8, 2), weights);
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no usable CUDA device"), std::string::npos) << msg;
    EXPECT_NE(msg.find(why), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace moe

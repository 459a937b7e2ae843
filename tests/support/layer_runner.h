// How the backend harness (tests/layer_cases_test.cc) drives a layer: a LayerRunner takes a *global* batch
// and returns the whole output to every participant, so the same checks serve a single-process layer (the
// batch goes in as it is) and the expert-parallel one (each rank forwards its own slice of rows, then the
// ranks gather every row of y). A Backend names a runner factory and what the backend promises.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "moe/layer/layer.h"
#include "tests/support/layer_fixtures.h"

namespace moe::testing {

class LayerRunner {
 public:
  virtual ~LayerRunner() = default;
  // y for every row of b (in b's row order). state: the causal routing state of the global batch's requests.
  virtual std::vector<float> forward(const Batch& b, RoutingState* state = nullptr) = 0;
  // The layer; its last_plan() is the plan of the last global batch.
  virtual Layer& layer() = 0;
};

// A single-process layer (MoELayer, CudaMoELayer): the batch goes in as it is.
class SingleProcessRunner final : public LayerRunner {
 public:
  explicit SingleProcessRunner(std::unique_ptr<Layer> layer) : layer_(std::move(layer)) {}
  std::vector<float> forward(const Batch& b, RoutingState* state) override {
    std::vector<float> y(b.x.size());
    layer_->forward(b.x.data(), static_cast<int>(b.meta.size()), b.meta, y.data(), state);
    return y;
  }
  Layer& layer() override { return *layer_; }

 private:
  std::unique_ptr<Layer> layer_;
};

using RunnerFactory = std::function<std::unique_ptr<LayerRunner>(const MoELayerConfig&,
                                                                 std::shared_ptr<const io::LayerWeights>)>;

struct Backend {
  std::string name;                              // "cpu", "cuda", "ep" (gtest-safe)
  std::function<std::string()> why_unavailable;  // "" when the backend can run here
  RunnerFactory make;
  // With invariant kernels its outputs equal the single-process CPU layer's bit for bit (expert parallelism,
  // docs/determinism.md clause 8); otherwise they agree within the accuracy bound and the plans are equal.
  bool bitwise_equal_to_cpu = false;
  int mixes = 100;           // probe trials per invariance check (fewer where every forward is a collective)
  bool bf16_compute = true;  // runs MoELayerConfig::compute kBF16 (the CUDA layer refuses it)
};

}  // namespace moe::testing

// Internal to moe/api (not installed): expert-parallel layers for the C API and the Python module. This
// process is one rank; the layer owns its communicator (docs/expert-parallel.md, docs/embedding.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moe/io/layer_weights.h"
#include "moe/layer/layer.h"
#include "moe/layer/moe_layer_config.h"

namespace moe::api {

struct LayerOptions;  // moe/api/builders.h

// What moe_layer_config_set_expert_parallel / set_expert_placement (and moe.Layer's expert_parallel=,
// planning=, placement=) ask for.
struct ExpertParallelSpec {
  // "" (no expert parallelism), "single" (one process: a test of the API) or "mpi" (MPI_COMM_WORLD; MPI is
  // initialised here when the caller has not done it, and finalised at exit).
  std::string backend;
  std::string planning = "global";           // parallel::EpPlanning: "global" | "home"
  std::vector<int32_t> physical_to_logical;  // placement by slots (EPLB's phy2log); empty: contiguous blocks

  bool enabled() const { return !backend.empty(); }
  // Throws std::invalid_argument for an unknown backend (or "mpi" in a build without MPI) or planning.
  static void check(const std::string& backend, const std::string& planning);
};

// The expert-parallel layer over `weights` (the whole layer, or this rank's part). Collective.
std::unique_ptr<Layer> make_expert_parallel_layer(const ExpertParallelSpec& spec, MoELayerConfig config,
                                                  std::shared_ptr<const io::LayerWeights> weights);
// MoE layer `layer_index` of a checkpoint directory, each rank reading only its part (the options as
// moe_layer_create_pretrained takes them). Collective; a rank that cannot open the directory fails every
// rank.
std::unique_ptr<Layer> make_expert_parallel_layer(const LayerOptions& options,
                                                  const std::filesystem::path& dir, int layer_index);

// Where a layer made above sits: nullopt for any other layer.
struct ExpertParallelInfo {
  int rank = 0, world_size = 1;
  bool plans_locally = false;
  std::vector<int> experts;                         // the experts this rank holds, ascending
  std::shared_ptr<const io::LayerWeights> weights;  // this rank's part (or the whole layer)
};
std::optional<ExpertParallelInfo> expert_parallel_info(const Layer& layer);

}  // namespace moe::api

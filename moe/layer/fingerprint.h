// Provenance of a result: which config, weights, build, kernels, dispatch and threads produced it.
#pragma once

#include <cstdint>
#include <string>

namespace moe {

struct Fingerprint {
  uint64_t config_hash = 0;   // MoELayerConfig::config_hash()
  uint64_t weights_hash = 0;  // io::LayerWeights::content_hash()
  std::string version;        // project version
  std::string build;          // compiler, flags, build type
  std::string kernel;         // "invariant" | "fast" (experts), gate kernel
  std::string dispatch;       // scope/priority/overflow, e.g. "request/request/drop"
  std::string device;         // "cpu" or the GPU's name
  int num_threads = 0;
  int world_size = 1;  // ranks of an expert-parallel layer

  // One JSON object with every field (hashes as 16 hex digits).
  std::string to_json() const;
};

// Compiler, flags and build type of this library, fixed at build time.
std::string build_description();

}  // namespace moe

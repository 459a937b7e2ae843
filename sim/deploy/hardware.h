// GPU and link figures of the deployment model (sim/deploy/step_cost.h), by name. Each profile's figures and
// their sources are in docs/cli.md ("Deployment"); every one of them can be overridden by a setting.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moe::sim::deploy {

struct HardwareProfile {
  std::string name;
  // Dense tensor-core peaks of one GPU, TFLOP/s (0: the format has no tensor-core rate; the model then uses
  // bf16's).
  double fp8_tflops = 0, bf16_tflops = 0, fp4_tflops = 0;
  double hbm_gbps = 0;  // HBM bandwidth, GB/s (10^9 bytes per second)
  // Per-GPU link bandwidth in one direction, GB/s: NVLink (scale-up, within a node) and the GPU's RDMA NIC
  // (scale-out, across nodes).
  double nvlink_gbps = 0, rdma_gbps = 0;
  // Latency of one all-to-all phase: a fixed part (kernel launch and completion signalling) plus one hop of
  // each link class the phase uses, microseconds.
  double a2a_base_us = 0, nvlink_latency_us = 0, rdma_latency_us = 0;
};

// The named profiles: "h800" (NVLink 160 GB/s + 400 Gb/s InfiniBand, DeepEP's test machine), "h200", "b200".
// Throws UsageError naming the known ones for any other name.
const HardwareProfile& hardware_profile(std::string_view name);
const std::vector<std::string>& hardware_names();

}  // namespace moe::sim::deploy

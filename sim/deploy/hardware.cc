#include "sim/deploy/hardware.h"

#include "sim/errors.h"

namespace moe::sim::deploy {
namespace {

// The a2a latencies of every profile: NCCL's tuning model (src/graph/tuning.cc, NVIDIA/nccl 5067397): the
// base latency of a ring collective in the LL protocol (6.6 us) and the hardware latency of one NVLink hop
// (0.6 us) and one network hop (2.7 us) in it.
constexpr double kBaseUs = 6.6, kNvlinkUs = 0.6, kNetUs = 2.7;

std::vector<HardwareProfile> make_profiles() {
  std::vector<HardwareProfile> p;
  // H800 SXM5: H100's tensor cores (FP8 1979, BF16 989 dense TFLOP/s; NVIDIA's H100 datasheet gives twice
  // these "with sparsity"), HBM3 3.35 TB/s; NVLink as DeepEP measured it (~160 GB/s maximum, of 400 GB/s
  // bidirectional) and a ConnectX-7 400 Gb/s NIC per GPU (~50 GB/s; DeepEP's README, docs/legacy.md).
  p.push_back({"h800", 1979, 989, 0, 3350, 160, 50, kBaseUs, kNvlinkUs, kNetUs});
  // H200 SXM: the same tensor cores, HBM3e 4.8 TB/s, NVLink 900 GB/s bidirectional (450 one way); HGX H200
  // nodes carry a 400 Gb/s ConnectX-7 NIC per GPU (NVIDIA's H200 datasheet and DGX H200 specification).
  p.push_back({"h200", 1979, 989, 0, 4800, 450, 50, kBaseUs, kNvlinkUs, kNetUs});
  // B200 (HGX B200): FP8 4500, BF16 2250, FP4 9000 dense TFLOP/s, HBM3e 8 TB/s, NVLink 5 1.8 TB/s
  // bidirectional (900 one way); DGX B200 carries a 400 Gb/s ConnectX-7 NIC per GPU (NVIDIA's DGX B200
  // datasheet).
  p.push_back({"b200", 4500, 2250, 9000, 8000, 900, 50, kBaseUs, kNvlinkUs, kNetUs});
  return p;
}

const std::vector<HardwareProfile>& profiles() {
  static const std::vector<HardwareProfile> table = make_profiles();
  return table;
}

}  // namespace

const HardwareProfile& hardware_profile(std::string_view name) {
  for (const HardwareProfile& p : profiles()) {
    if (p.name == name) return p;
  }
  std::string known;
  for (const std::string& n : hardware_names()) known += (known.empty() ? "" : ", ") + n;
  throw UsageError("unknown hardware '" + std::string(name) + "' (known: " + known + ")");
}

const std::vector<std::string>& hardware_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const HardwareProfile& p : profiles()) n.push_back(p.name);
    return n;
  }();
  return names;
}

}  // namespace moe::sim::deploy

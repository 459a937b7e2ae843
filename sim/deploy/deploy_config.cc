#include "sim/deploy/deploy_config.h"

#include <cmath>
#include <utility>

#include "sim/errors.h"

namespace moe::sim::deploy {
namespace {

// One enum's spellings, in enum order.
template <typename Enum, size_t N>
Enum parse_named(std::string_view s, const std::pair<Enum, const char*> (&names)[N], std::string_view what) {
  std::string known;
  for (const auto& [value, name] : names) {
    if (s == name) return value;
    known += (known.empty() ? "" : ", ") + std::string(name);
  }
  throw UsageError("unknown " + std::string(what) + " '" + std::string(s) + "' (known: " + known + ")");
}

template <typename Enum, size_t N>
std::string_view name_of(Enum v, const std::pair<Enum, const char*> (&names)[N]) {
  for (const auto& [value, name] : names) {
    if (value == v) return name;
  }
  return "?";
}

constexpr std::pair<Placement, const char*> kPlacements[] = {{Placement::kContiguous, "contiguous"},
                                                             {Placement::kRoundRobin, "round-robin"},
                                                             {Placement::kEplb, "eplb"},
                                                             {Placement::kHierarchical, "hierarchical"},
                                                             {Placement::kGlobal, "global"}};
constexpr std::pair<TokenHomes, const char*> kHomes[] = {{TokenHomes::kRows, "rows"},
                                                         {TokenHomes::kRequests, "requests"}};
constexpr std::pair<A2aKind, const char*> kA2a[] = {{A2aKind::kLowLatency, "low-latency"},
                                                    {A2aKind::kNormal, "normal"}};
constexpr std::pair<Dtype, const char*> kDtypes[] = {
    {Dtype::kFp8, "fp8"}, {Dtype::kBf16, "bf16"}, {Dtype::kFp32, "fp32"}, {Dtype::kMxfp4, "mxfp4"}};

void check(bool ok, const std::string& what) {
  if (!ok) throw UsageError(what);
}

void check_positive(double v, const char* setting) {
  check(std::isfinite(v) && v > 0,
        std::string(setting) + " must be finite and > 0 (got " + std::to_string(v) + ")");
}

void check_non_negative(double v, const char* setting) {
  check(std::isfinite(v) && v >= 0,
        std::string(setting) + " must be finite and >= 0 (got " + std::to_string(v) + ")");
}

}  // namespace

std::string_view to_string(Placement p) {
  return name_of(p, kPlacements);
}
std::string_view to_string(TokenHomes h) {
  return name_of(h, kHomes);
}
std::string_view to_string(A2aKind a) {
  return name_of(a, kA2a);
}
std::string_view to_string(Dtype d) {
  return name_of(d, kDtypes);
}
Placement parse_placement(std::string_view s) {
  return parse_named(s, kPlacements, "placement");
}
TokenHomes parse_token_homes(std::string_view s) {
  return parse_named(s, kHomes, "token-homes");
}
A2aKind parse_a2a(std::string_view s) {
  return parse_named(s, kA2a, "a2a kind");
}
Dtype parse_dtype(std::string_view s, std::string_view what) {
  return parse_named(s, kDtypes, what);
}

ModelShape ModelShape::of_preset(std::string_view preset) {
  struct Row {
    const char* preset;
    ModelShape shape;
  };
  static const Row rows[] = {
      {"mixtral", {4096, 14336, 0, true, Dtype::kBf16}},
      {"qwen2-moe", {2048, 1408, 4, true, Dtype::kBf16}},
      {"qwen3-moe", {2048, 768, 0, true, Dtype::kBf16}},
      {"olmoe", {2048, 1024, 0, true, Dtype::kBf16}},
      {"deepseek-v2", {5120, 1536, 2, true, Dtype::kBf16}},
      {"deepseek-v3", {7168, 2048, 1, true, Dtype::kFp8}},
      {"glm4-moe", {5120, 1536, 1, true, Dtype::kBf16}},
      {"gpt-oss", {2880, 2880, 0, true, Dtype::kMxfp4}},
      {"llama4", {5120, 8192, 1, true, Dtype::kBf16}},
      {"switch", {768, 3072, 0, false, Dtype::kBf16}},
  };
  for (const Row& r : rows) {
    if (preset == r.preset) return r.shape;
  }
  return ModelShape{};
}

int64_t row_bytes(Dtype d, int hidden) {
  const int64_t h = hidden;
  switch (d) {
    case Dtype::kFp8:
      return h + 4 * ((h + 127) / 128);
    case Dtype::kBf16:
      return 2 * h;
    case Dtype::kFp32:
      return 4 * h;
    case Dtype::kMxfp4:
      return (h + 1) / 2 + (h + 31) / 32;
  }
  return 0;
}

double element_bytes(Dtype d) {
  switch (d) {
    case Dtype::kFp8:
      return 1.0;
    case Dtype::kBf16:
      return 2.0;
    case Dtype::kFp32:
      return 4.0;
    case Dtype::kMxfp4:
      return 4.25 / 8.0;
  }
  return 0.0;
}

void DeployConfig::validate(int num_experts, int num_groups) const {
  if (!enabled()) {
    check(ep_size == 0, "ep-size must be >= 0 (got " + std::to_string(ep_size) + ")");
    return;
  }
  const std::string P = std::to_string(ep_size);
  check(ep_size <= 65536, "ep-size must be at most 65536 (got " + P + ")");
  check(ranks_per_node >= 1, "ranks-per-node must be >= 1 (got " + std::to_string(ranks_per_node) + ")");
  check(ep_size <= ranks_per_node || ep_size % ranks_per_node == 0,
        "ep-size " + P + " is not a whole number of nodes of " + std::to_string(ranks_per_node) +
            " ranks (ranks-per-node)");
  check(redundant_experts >= 0,
        "redundant-experts must be >= 0 (got " + std::to_string(redundant_experts) + ")");
  const bool eplb = placement == Placement::kEplb || placement == Placement::kHierarchical ||
                    placement == Placement::kGlobal;
  if (!eplb) {
    check(redundant_experts == 0,
          "redundant-experts needs an EPLB placement (eplb, hierarchical or global); " +
              std::string(to_string(placement)) + " places each expert once");
  } else {
    const int physical = num_experts + redundant_experts;
    const int next = (physical + ep_size - 1) / ep_size * ep_size - num_experts;  // the next R that splits
    check(physical % ep_size == 0,
          "placement " + std::string(to_string(placement)) + ": " + std::to_string(num_experts) +
              " experts + " + std::to_string(redundant_experts) + " redundant = " + std::to_string(physical) +
              " physical experts do not split evenly over " + P +
              " ranks (ep-size; EPLB gives every rank as many; redundant-experts " + std::to_string(next) +
              " does)");
    if (placement == Placement::kHierarchical) {
      check(num_experts % num_groups == 0, "placement hierarchical: " + std::to_string(num_experts) +
                                               " experts do not split into " + std::to_string(num_groups) +
                                               " groups");
      check(num_groups % nodes() == 0, "placement hierarchical: the router's " + std::to_string(num_groups) +
                                           " groups do not split over " + std::to_string(nodes()) +
                                           " nodes (use global or eplb)");
    }
    check(loads != "warmup" || warmup_steps > 0,
          "placement " + std::string(to_string(placement)) +
              " balances measured loads: give --warmup-steps N (the first N steps' choices) or "
              "--placement-loads FILE");
  }
  check(warmup_steps >= 0, "warmup-steps must be >= 0 (got " + std::to_string(warmup_steps) + ")");
  check_non_negative(rank_capacity_factor, "rank-capacity-factor");
  check(
      model.hidden > 0 && model.intermediate > 0,
      "the deployment model needs the experts' shape: give --hidden and --expert-intermediate (or a --preset "
      "whose model is known)");
  check(model.shared_experts >= 0,
        "shared-experts must be >= 0 (got " + std::to_string(model.shared_experts) + ")");
  check(dispatch != Dtype::kMxfp4 && combine != Dtype::kMxfp4,
        "dispatch-dtype and combine-dtype are fp8, bf16 or fp32 (mxfp4 is a weight format)");
  const HardwareProfile& h = hardware;
  check_positive(h.bf16_tflops, "bf16-tflops");
  check_non_negative(h.fp8_tflops, "fp8-tflops");
  check_non_negative(h.fp4_tflops, "fp4-tflops");
  check_positive(h.hbm_gbps, "hbm-gbps");
  check_positive(h.nvlink_gbps, "nvlink-gbps");
  check_positive(h.rdma_gbps, "rdma-gbps");
  check_non_negative(h.a2a_base_us, "a2a-base-us");
  check_non_negative(h.nvlink_latency_us, "nvlink-latency-us");
  check_non_negative(h.rdma_latency_us, "rdma-latency-us");
}

}  // namespace moe::sim::deploy

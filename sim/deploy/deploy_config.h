// The deployment a run is accounted on (sim/deploy/accounting.h): expert-parallel ranks and nodes, where the
// experts live, what a dispatched row weighs, the model's expert shapes and the hardware's figures.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "sim/deploy/hardware.h"

namespace moe::sim::deploy {

// Where the routed experts live (sim/deploy/placement.h):
//   kContiguous   rank r holds experts [E r / P, E (r + 1) / P) (ExpertPlacement::contiguous)
//   kRoundRobin   expert e on rank e mod P
//   kEplb         DeepSeek's load balancer's published entry point (moe/parallel/eplb.h: hierarchical when
//                 the nodes divide the router's groups, else global), over E + R physical experts
//   kHierarchical, kGlobal  its two policies, chosen explicitly
enum class Placement { kContiguous, kRoundRobin, kEplb, kHierarchical, kGlobal };
// How a step's tokens are given to ranks (their home rank, which routes, dispatches and combines them):
//   kRows      contiguous blocks of the step's rows: rank h holds rows [T h / P, T (h + 1) / P)
//   (data-parallel
//              attention with an even split)
//   kRequests  a request's tokens live on rank (request id mod P)
enum class TokenHomes { kRows, kRequests };
// The all-to-all kernels' traffic (DeepEP's two kinds):
//   kLowLatency  every kept pair is one message from the token's home to the rank that computes it (the
//                low-latency kernels); same-node messages over NVLink unless intranode_rdma
//   kNormal      a token goes once to each rank of its own node that computes one of its pairs (NVLink), and
//                once over RDMA to each other node that does, to the rank of that node with its home's
//                local index, which forwards it over NVLink to the node's other ranks that need it (the
//                normal kernels' NVLink forwarding)
// Combine moves the same rows back, each of combine_bytes.
enum class A2aKind { kLowLatency, kNormal };
// Element formats: of the dispatched and combined rows, and of the expert weights.
enum class Dtype { kFp8, kBf16, kFp32, kMxfp4 };

std::string_view to_string(Placement p);
std::string_view to_string(TokenHomes h);
std::string_view to_string(A2aKind a);
std::string_view to_string(Dtype d);
// Parsers of the to_string spellings ("round-robin", "low-latency", "fp8", ...); throw UsageError naming the
// value and the accepted ones. `what` names the setting.
Placement parse_placement(std::string_view s);
TokenHomes parse_token_homes(std::string_view s);
A2aKind parse_a2a(std::string_view s);
Dtype parse_dtype(std::string_view s, std::string_view what);

// One routed expert's FFN and the shared experts beside it (every rank runs those on its own tokens).
struct ModelShape {
  int hidden = 0;          // model dimension H
  int intermediate = 0;    // one routed expert's intermediate size I
  int shared_experts = 0;  // shared experts, each of a routed expert's size (Qwen's 4x-wide one counts 4)
  bool gated = true;       // gate, up and down projections (SwiGLU); false: up and down only
  Dtype weights = Dtype::kBf16;
  // The published configuration of a router preset's model (config.json: hidden_size, moe_intermediate_size,
  // n_shared_experts, ...): mixtral 4096 / 14336, qwen2-moe (Qwen1.5-MoE-A2.7B) 2048 / 1408 / 4 shared,
  // qwen3-moe (Qwen3-30B-A3B) 2048 / 768, olmoe 2048 / 1024, deepseek-v2 5120 / 1536 / 2, deepseek-v3
  // 7168 / 2048 / 1 (FP8 weights), glm4-moe 5120 / 1536 / 1, gpt-oss (120b) 2880 / 2880 (MXFP4), llama4
  // (Scout) 5120 / 8192 / 1, switch (base-8) 768 / 3072 not gated. An unknown preset: all zero.
  static ModelShape of_preset(std::string_view preset);
  int matrices() const { return gated ? 3 : 2; }
};

// Bytes of one row of `hidden` elements in `d`: FP8 with one float32 scale per 128 elements (DeepEP's
// dispatch layout: hidden + 4 ceil(hidden / 128)); MXFP4 with one byte per 32 elements (4.25 bits each).
int64_t row_bytes(Dtype d, int hidden);
// Bytes per weight element (MXFP4: 4.25 / 8).
double element_bytes(Dtype d);

struct DeployConfig {
  int ep_size = 0;         // expert-parallel ranks P; 0: no deployment model
  int ranks_per_node = 8;  // GPUs of one NVLink domain (an HGX board); P < this: one node of P
  Placement placement = Placement::kContiguous;
  int redundant_experts = 0;  // R: physical experts beyond E (EPLB placements only)
  // Where EPLB's per-expert loads come from: "warmup" (the router's choices over the first warmup_steps
  // steps, which are then not accounted) or a file (sim/deploy/placement.h, read_loads).
  std::string loads = "warmup";
  int warmup_steps = 0;
  // > 0: each rank takes at most max(1, ceil(f T k / P)) of a step's kept pairs; the rest are dropped
  // (accounting.h: in the policy's priority order, choice-major).
  double rank_capacity_factor = 0;
  TokenHomes homes = TokenHomes::kRows;
  A2aKind a2a = A2aKind::kLowLatency;
  bool intranode_rdma = false;  // low-latency: same-node messages over RDMA too (DeepEP before 2025-06)
  Dtype dispatch = Dtype::kFp8;
  Dtype combine = Dtype::kBf16;
  ModelShape model;  // from the preset unless set
  std::string hardware_name = "h800";
  HardwareProfile hardware = hardware_profile("h800");  // the profile with every override applied
  // Output files: run's per-rank CSV and per-rank plot; sweep's plot of the modelled step against its x axis.
  std::string csv_path, svg_path;

  bool enabled() const { return ep_size > 0; }
  int nodes() const { return (ep_size + ranks_per_node - 1) / ranks_per_node; }
  // Throws UsageError naming the first problem for a router of `num_experts` experts in `num_groups` groups
  // (P, nodes, R, the model's shape, the hardware's figures).
  void validate(int num_experts, int num_groups) const;
};

}  // namespace moe::sim::deploy

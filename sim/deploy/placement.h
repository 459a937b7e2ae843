// The expert placement of a deployment: which ranks hold which experts (moe::parallel::ExpertPlacement, whose
// replica rule decides which copy computes each kept pair), from the configured policy and, for DeepSeek's
// load balancer (moe/parallel/eplb.h), per-expert loads.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "moe/parallel/expert_placement.h"
#include "sim/deploy/deploy_config.h"

namespace moe::sim::deploy {

// True for the placements that balance loads (eplb, hierarchical, global).
bool balances_loads(Placement p);

// The placement of `config` for a router of `num_experts` experts in `num_groups` groups: contiguous and
// round-robin ignore `loads`; the EPLB policies replicate and pack E + redundant_experts physical experts
// over the ep_size ranks (config.nodes() nodes) by `loads` (E finite values >= 0). Throws UsageError for a
// placement the policy refuses (its message).
parallel::ExpertPlacement make_placement(const DeployConfig& config, int num_experts, int num_groups,
                                         std::span<const float> loads);

// Per-expert loads recorded earlier (placement-loads FILE): a moe-sim JSON output (run, replay or sweep:
// the router's choices, routing.choices_per_expert, of its first result; else its expert_load), a JSON
// array of numbers, or text of numbers separated by commas, spaces or newlines ('#' starts a comment).
// Throws DataError naming the file for a missing file, no loads in it, a count other than `num_experts`, or
// a value that is not finite and >= 0.
std::vector<float> read_loads(const std::string& path, int num_experts);

}  // namespace moe::sim::deploy

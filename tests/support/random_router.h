// Random router rules for the top-k tests that compare two forms of the rule (router_topk_rule_test,
// router_topk_block_test): a config of the given shape with a random scoring (softmax, sigmoid, softmax over
// the top-k), renormalisation, scaling, ranking input (score or logit), group value (top-two sum or max) and
// (half the time) a small selection bias with exact ties, or none when the shape is not a valid router.
#pragma once

#include <optional>
#include <random>
#include <stdexcept>

#include "router/router_config.h"

namespace moe::testing {

inline std::optional<RouterConfig> RandomRouterRules(std::mt19937_64& rng, int num_experts, int num_groups,
                                                     int top_k, int topk_groups) {
  RouterConfig config;
  config.num_experts = num_experts;
  config.num_groups = num_groups;
  config.top_k = top_k;
  config.topk_groups = topk_groups;
  const Scoring scorings[] = {Scoring::kSoftmax, Scoring::kSigmoid, Scoring::kSoftmaxTopK};
  config.scoring = scorings[rng() % 3];
  config.renormalize = config.scoring == Scoring::kSoftmaxTopK || rng() % 3 != 0;
  config.rank_by_logit = rng() % 3 == 0;
  config.group_score = rng() % 3 == 0 ? GroupScore::kMax : GroupScore::kTopTwoSum;
  config.scaling_factor = rng() % 2 ? 1.0f : 2.5f;
  if (rng() % 2) {
    config.selection_bias.resize(config.num_experts);
    for (auto& b : config.selection_bias) b = 0.01f * static_cast<float>(static_cast<int>(rng() % 9) - 4);
  }
  try {
    config.validate();
  } catch (const std::invalid_argument&) {
    return std::nullopt;  // e.g. topk_groups too small for top_k experts
  }
  return config;
}

}  // namespace moe::testing

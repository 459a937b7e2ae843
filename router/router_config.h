// How a router turns logits into ranked experts and weights.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moe {

// kSoftmax     score = softmax over every available expert (Mixtral, Qwen, OLMoE, DeepSeek-V2)
// kSigmoid     score = sigmoid(logit) (DeepSeek-V3, GLM-4.5, Llama 4)
// kSoftmaxTopK the weights are a softmax over the k chosen logits alone (gpt-oss); ranking and the group
//              limit use the softmax scores (or the logits, with rank_by_logit), so it needs renormalize
enum class Scoring { kSoftmax, kSigmoid, kSoftmaxTopK };

// A group's value under the group limit.
//   kTopTwoSum  the sum of its two best select values, its best if it has one (DeepSeek-V3 noaux_tc)
//   kMax        its best select value (DeepSeek-V2 group_limited_greedy)
enum class GroupScore { kTopTwoSum, kMax };

// The scoring, selection and weighting rules of one router (docs/routing.md gives the formulas).
//
//   score[e]     = softmax(logits)[e]  or  sigmoid(logits[e])
//   select[e]    = score[e] + selection_bias[e]            (bias chooses, never weighs)
//                  or logit[e] + selection_bias[e] with rank_by_logit (gpt-oss, Llama 4: torch.topk of the
//                  logits, whose order the rounded scores may tie where the logits do not)
//   group limit  : experts form num_groups equal groups; a group's value is the sum of its two best
//                  select values (its best, if a group has one expert), or its best under GroupScore::kMax;
//                  only the topk_groups best groups (ties to the lower group id) may be chosen
//   ranking      : select descending, exact ties to the lower expert id; non-finite logits rank last
//   weight[j]    = score[chosen_j] * scaling_factor / (renormalize ? sum_{j<k} score[chosen_j] : 1)
//                  kSoftmaxTopK: exp(l[chosen_j] - m) / sum_{i<k} exp(l[chosen_i] - m) * scaling_factor,
//                  m = max_{i<k} l[chosen_i]
struct RouterConfig {
  int num_experts = 8;
  int top_k = 2;
  Scoring scoring = Scoring::kSoftmax;
  bool renormalize = true;
  float scaling_factor = 1.0f;
  int num_groups = 1;                 // 1 = no group limit
  int topk_groups = 1;                // groups kept when num_groups > 1
  std::vector<float> selection_bias;  // empty, or num_experts values
  bool rank_by_logit = false;         // rank (and limit groups) by logit + bias instead of score + bias
  GroupScore group_score = GroupScore::kTopTwoSum;

  // Throws std::invalid_argument naming the first bad field, e.g. "top_k (9) exceeds num_experts (8)".
  void validate() const;

  // Named presets, one per published family's router at its flagship size: "mixtral", "qwen2-moe",
  // "qwen3-moe", "olmoe", "deepseek-v2", "deepseek-v3", "glm4-moe", "gpt-oss", "llama4", "switch".
  // Throws std::invalid_argument for an unknown name (listing the known ones). A preset fixes scoring and
  // weighting; callers may then change num_experts/top_k (and must re-validate).
  static RouterConfig preset(std::string_view name);
  static const std::vector<std::string>& preset_names();
};

std::string_view to_string(Scoring s);
Scoring parse_scoring(std::string_view s);  // "softmax" | "sigmoid" | "softmax_topk"; throws naming the value
std::string_view to_string(GroupScore g);   // "top2_sum" | "max"

}  // namespace moe

// How a router turns logits into ranked experts and weights.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moe {

enum class Scoring { kSoftmax, kSigmoid };

// The scoring, selection and weighting rules of one router (docs/routing.md gives the formulas).
//
//   score[e]     = softmax(logits)[e]  or  sigmoid(logits[e])
//   select[e]    = score[e] + selection_bias[e]            (bias chooses, never weighs)
//   group limit  : experts form num_groups equal groups; a group's value is the sum of its two best
//                  select values (its best, if a group has one expert); only the topk_groups best groups
//                  (ties to the lower group id) may be chosen
//   ranking      : select descending, exact ties to the lower expert id; non-finite logits rank last
//   weight[j]    = score[chosen_j] * scaling_factor / (renormalize ? sum_{j<k} score[chosen_j] : 1)
struct RouterConfig {
  int num_experts = 8;
  int top_k = 2;
  Scoring scoring = Scoring::kSoftmax;
  bool renormalize = true;
  float scaling_factor = 1.0f;
  int num_groups = 1;                 // 1 = no group limit
  int topk_groups = 1;                // groups kept when num_groups > 1
  std::vector<float> selection_bias;  // empty, or num_experts values

  // Throws std::invalid_argument naming the first bad field, e.g. "top_k (9) exceeds num_experts (8)".
  void validate() const;

  // Named presets: "mixtral", "qwen2-moe", "deepseek-v3", "switch". Throws std::invalid_argument for an
  // unknown name (listing the known ones). A preset fixes scoring and weighting; callers may then change
  // num_experts/top_k (and must re-validate).
  static RouterConfig preset(std::string_view name);
  static const std::vector<std::string>& preset_names();
};

std::string_view to_string(Scoring s);
Scoring parse_scoring(std::string_view s);  // "softmax" | "sigmoid"; throws naming the bad value

}  // namespace moe

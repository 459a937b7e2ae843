#include "router/router_config.h"

#include <cmath>
#include <stdexcept>

namespace moe {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument("router config: " + msg);
}

// The largest expert count a router accepts; routing keeps per-token scratch of this size on the stack.
constexpr int kMaxExperts = 4096;

}  // namespace

void RouterConfig::validate() const {
  if (num_experts < 1 || num_experts > kMaxExperts) {
    fail("num_experts must be in [1, " + std::to_string(kMaxExperts) + "] (got " +
         std::to_string(num_experts) + ")");
  }
  if (top_k < 1) fail("top_k must be >= 1 (got " + std::to_string(top_k) + ")");
  if (top_k > num_experts) {
    fail("top_k (" + std::to_string(top_k) + ") exceeds num_experts (" + std::to_string(num_experts) + ")");
  }
  if (!std::isfinite(scaling_factor) || scaling_factor <= 0.0f) {
    fail("scaling_factor must be finite and > 0 (got " + std::to_string(scaling_factor) + ")");
  }
  if (num_groups < 1) fail("num_groups must be >= 1 (got " + std::to_string(num_groups) + ")");
  if (num_experts % num_groups != 0) {
    fail("num_experts (" + std::to_string(num_experts) + ") must be a multiple of num_groups (" +
         std::to_string(num_groups) + ")");
  }
  if (topk_groups < 1 || topk_groups > num_groups) {
    fail("topk_groups (" + std::to_string(topk_groups) +
         ") must be in [1, num_groups=" + std::to_string(num_groups) + "]");
  }
  if (num_groups > 1 && topk_groups * (num_experts / num_groups) < top_k) {
    fail("topk_groups (" + std::to_string(topk_groups) + ") groups of " +
         std::to_string(num_experts / num_groups) + " experts cannot hold top_k (" + std::to_string(top_k) +
         ") choices");
  }
  if (scoring == Scoring::kSoftmaxTopK && !renormalize) {
    fail("scoring softmax_topk normalises over the top_k chosen experts itself: renormalize must be true");
  }
  if (!selection_bias.empty()) {
    if (static_cast<int>(selection_bias.size()) != num_experts) {
      fail("selection_bias has " + std::to_string(selection_bias.size()) + " values but num_experts is " +
           std::to_string(num_experts));
    }
    for (size_t e = 0; e < selection_bias.size(); ++e) {
      if (!std::isfinite(selection_bias[e])) fail("selection_bias[" + std::to_string(e) + "] is not finite");
    }
  }
}

RouterConfig RouterConfig::preset(std::string_view name) {
  RouterConfig c;
  if (name == "mixtral") {
    // Mixtral-8x7B: softmax over the top-2 logits == softmax over all, renormalised over the top 2.
    c.num_experts = 8;
    c.top_k = 2;
    c.scoring = Scoring::kSoftmax;
    c.renormalize = true;
  } else if (name == "qwen2-moe") {
    // Qwen1.5-MoE-A2.7B / Qwen2-57B-A14B: softmax over all experts, top-4 of 60, norm_topk_prob = false.
    c.num_experts = 60;
    c.top_k = 4;
    c.scoring = Scoring::kSoftmax;
    c.renormalize = false;
  } else if (name == "deepseek-v3") {
    // DeepSeek-V3: sigmoid scores, e_score_correction_bias for selection, 8 groups with 4 kept (a group's
    // value is the sum of its two best biased scores), top-8 of 256, renormalised, times 2.5.
    c.num_experts = 256;
    c.top_k = 8;
    c.scoring = Scoring::kSigmoid;
    c.renormalize = true;
    c.scaling_factor = 2.5f;
    c.num_groups = 8;
    c.topk_groups = 4;
  } else if (name == "qwen3-moe") {
    // Qwen3-30B-A3B / Qwen3-235B-A22B: softmax over all experts, top-8 of 128, norm_topk_prob = true.
    c.num_experts = 128;
    c.top_k = 8;
    c.scoring = Scoring::kSoftmax;
    c.renormalize = true;
  } else if (name == "olmoe") {
    // OLMoE-1B-7B: softmax over 64 experts, top-8, norm_topk_prob = false.
    c.num_experts = 64;
    c.top_k = 8;
    c.scoring = Scoring::kSoftmax;
    c.renormalize = false;
  } else if (name == "deepseek-v2") {
    // DeepSeek-V2: softmax scores, topk_method group_limited_greedy (a group's value is its best score),
    // 8 groups with 3 kept, top-6 of 160, not renormalised, times routed_scaling_factor 16.
    c.num_experts = 160;
    c.top_k = 6;
    c.scoring = Scoring::kSoftmax;
    c.renormalize = false;
    c.scaling_factor = 16.0f;
    c.num_groups = 8;
    c.topk_groups = 3;
    c.group_score = GroupScore::kMax;
  } else if (name == "glm4-moe") {
    // GLM-4.5: DeepSeek-V3's router (sigmoid + e_score_correction_bias, renormalised, times 2.5) over 160
    // experts, top-8, one group.
    c.num_experts = 160;
    c.top_k = 8;
    c.scoring = Scoring::kSigmoid;
    c.renormalize = true;
    c.scaling_factor = 2.5f;
  } else if (name == "gpt-oss") {
    // gpt-oss-120b: top-4 of 128 by logit (the router has a bias, added by the layer), then a softmax over
    // the four chosen logits.
    c.num_experts = 128;
    c.top_k = 4;
    c.scoring = Scoring::kSoftmaxTopK;
    c.renormalize = true;
    c.rank_by_logit = true;
  } else if (name == "llama4") {
    // Llama 4 Scout: top-1 of 16 by logit, its sigmoid as the weight (which the layer applies to the
    // expert's input).
    c.num_experts = 16;
    c.top_k = 1;
    c.scoring = Scoring::kSigmoid;
    c.renormalize = false;
    c.rank_by_logit = true;
  } else if (name == "switch") {
    // Switch Transformer: top-1 of softmax, the gate probability as weight.
    c.num_experts = 8;
    c.top_k = 1;
    c.scoring = Scoring::kSoftmax;
    c.renormalize = false;
  } else {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown router preset '" + std::string(name) + "' (known: " + known + ")");
  }
  return c;
}

const std::vector<std::string>& RouterConfig::preset_names() {
  static const std::vector<std::string> names = {"mixtral",     "qwen2-moe",   "qwen3-moe", "olmoe",
                                                 "deepseek-v2", "deepseek-v3", "glm4-moe",  "gpt-oss",
                                                 "llama4",      "switch"};
  return names;
}

std::string_view to_string(Scoring s) {
  switch (s) {
    case Scoring::kSoftmax:
      return "softmax";
    case Scoring::kSigmoid:
      return "sigmoid";
    case Scoring::kSoftmaxTopK:
      return "softmax_topk";
  }
  return "?";
}

Scoring parse_scoring(std::string_view s) {
  if (s == "softmax") return Scoring::kSoftmax;
  if (s == "sigmoid") return Scoring::kSigmoid;
  if (s == "softmax_topk") return Scoring::kSoftmaxTopK;
  throw std::invalid_argument("unknown scoring '" + std::string(s) +
                              "' (known: softmax, sigmoid, softmax_topk)");
}

std::string_view to_string(GroupScore g) {
  return g == GroupScore::kTopTwoSum ? "top2_sum" : "max";
}

}  // namespace moe

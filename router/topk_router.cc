#include "router/topk_router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace moe {
namespace {

constexpr int kMaxExperts = 4096;

// Ranking order: selection value descending, exact ties to the lower expert id.
struct RankBefore {
  const float* select;
  bool operator()(int a, int b) const {
    if (select[a] != select[b]) return select[a] > select[b];
    return a < b;
  }
};

}  // namespace

TopKRouter::TopKRouter(RouterConfig config, int num_ranked) : config_(std::move(config)) {
  config_.validate();
  if (num_ranked == 0) num_ranked = config_.top_k;
  if (num_ranked < config_.top_k) {
    throw std::invalid_argument("router: num_ranked (" + std::to_string(num_ranked) + ") is below top_k (" +
                                std::to_string(config_.top_k) + ")");
  }
  num_ranked_ = std::min(num_ranked, config_.num_experts);
}

void TopKRouter::route(const float* logits, int num_tokens, TokenRoutes& out) const {
  const int E = config_.num_experts;
  const int k = config_.top_k;
  const int R = num_ranked_;
  if (num_tokens < 0) throw std::invalid_argument("router: num_tokens must be >= 0");
  if (num_tokens > 0 && logits == nullptr) throw std::invalid_argument("router: logits is null");
  out.resize(num_tokens, E, k, R);

  float score[kMaxExperts];
  float select[kMaxExperts];
  int ranked[kMaxExperts];
  const bool biased = !config_.selection_bias.empty();
  const int group_size = E / config_.num_groups;

  for (int t = 0; t < num_tokens; ++t) {
    const float* row = logits + static_cast<int64_t>(t) * E;
    // Available experts: finite logits. Scores of the others are 0 and they never rank.
    int num_available = 0;
    float max_logit = -std::numeric_limits<float>::infinity();
    for (int e = 0; e < E; ++e) {
      if (std::isfinite(row[e])) {
        ++num_available;
        max_logit = std::max(max_logit, row[e]);
      }
    }
    if (num_available == 0) {
      throw std::invalid_argument("router: token row " + std::to_string(t) +
                                  " has no finite logit (NaN or inf in every expert)");
    }
    if (config_.scoring == Scoring::kSoftmax) {
      float sum = 0.0f;
      for (int e = 0; e < E; ++e) {
        score[e] = std::isfinite(row[e]) ? std::exp(row[e] - max_logit) : 0.0f;
        sum += score[e];
      }
      for (int e = 0; e < E; ++e) score[e] /= sum;
    } else {
      for (int e = 0; e < E; ++e) score[e] = std::isfinite(row[e]) ? 1.0f / (1.0f + std::exp(-row[e])) : 0.0f;
    }

    // Candidates: available experts, restricted to the kept groups under a group limit.
    int num_candidates = 0;
    for (int e = 0; e < E; ++e) {
      select[e] = biased ? score[e] + config_.selection_bias[e] : score[e];
    }
    if (config_.num_groups > 1) {
      // Group value: sum of the group's two best available selection values (its best if it has one).
      float group_value[kMaxExperts];
      int group_rank[kMaxExperts];
      for (int g = 0; g < config_.num_groups; ++g) {
        float best = -std::numeric_limits<float>::infinity();
        float second = -std::numeric_limits<float>::infinity();
        for (int e = g * group_size; e < (g + 1) * group_size; ++e) {
          if (!std::isfinite(row[e])) continue;
          if (select[e] > best) {
            second = best;
            best = select[e];
          } else if (select[e] > second) {
            second = select[e];
          }
        }
        group_value[g] = std::isinf(second) ? best : best + second;
        group_rank[g] = g;
      }
      std::partial_sort(group_rank, group_rank + config_.topk_groups, group_rank + config_.num_groups,
                        RankBefore{group_value});
      for (int i = 0; i < config_.topk_groups; ++i) {
        const int g = group_rank[i];
        if (std::isinf(group_value[g])) continue;  // a kept group with nothing available
        for (int e = g * group_size; e < (g + 1) * group_size; ++e) {
          if (std::isfinite(row[e])) ranked[num_candidates++] = e;
        }
      }
      std::sort(ranked, ranked + num_candidates);  // expert order, so ties resolve to the lower id
    } else {
      for (int e = 0; e < E; ++e) {
        if (std::isfinite(row[e])) ranked[num_candidates++] = e;
      }
    }
    const int num_ranked = std::min(R, num_candidates);
    std::partial_sort(ranked, ranked + num_ranked, ranked + num_candidates, RankBefore{select});

    // Weights: the chosen scores, normalised over the available top-k choices, times the scaling factor.
    float denominator = 1.0f;
    if (config_.renormalize) {
      denominator = 0.0f;
      for (int j = 0; j < std::min(k, num_ranked); ++j) denominator += score[ranked[j]];
    }
    int32_t* experts = out.experts.data() + static_cast<int64_t>(t) * R;
    float* weights = out.weights.data() + static_cast<int64_t>(t) * R;
    for (int r = 0; r < R; ++r) {
      if (r < num_ranked) {
        experts[r] = ranked[r];
        // NOTES: sigmoid scores can underflow to 0 for logits below about -88; a zero denominator then
        // gives zero weights rather than NaN.
        weights[r] = denominator > 0.0f ? score[ranked[r]] / denominator * config_.scaling_factor : 0.0f;
      } else {
        experts[r] = -1;
        weights[r] = 0.0f;
      }
    }
    out.top1_score[t] = select[ranked[0]];
  }
}

}  // namespace moe

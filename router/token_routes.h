// The router's output: per token, experts in rank order and the weight each would carry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moe {

// Routes of num_tokens tokens. For token t and rank r < num_ranked:
//   expert(t, r)  the r-th ranked expert, or -1 where that rank falls on an expert whose logit was not
//                 finite (such a rank is unavailable: a pair routed there is dropped)
//   weight(t, r)  the weight the token gives that expert if a pair is placed there
// Ranks [0, top_k) are the token's choices; ranks [top_k, num_ranked) are reroute candidates.
// top1_score(t) is rank 0's selection score (Priority::kScore).
struct TokenRoutes {
  int num_tokens = 0;
  int num_experts = 0;
  int top_k = 0;
  int num_ranked = 0;
  std::vector<int32_t> experts;   // [num_tokens * num_ranked]
  std::vector<float> weights;     // [num_tokens * num_ranked]
  std::vector<float> top1_score;  // [num_tokens]

  int32_t expert(int64_t t, int r) const { return experts[t * num_ranked + r]; }
  float weight(int64_t t, int r) const { return weights[t * num_ranked + r]; }

  // Sets the shape; reuses capacity, so a warmed-up TokenRoutes does not allocate.
  void resize(int tokens, int experts_count, int k, int ranked) {
    num_tokens = tokens;
    num_experts = experts_count;
    top_k = k;
    num_ranked = ranked;
    experts.resize(static_cast<size_t>(tokens) * ranked);
    weights.resize(static_cast<size_t>(tokens) * ranked);
    top1_score.resize(tokens);
  }
};

}  // namespace moe

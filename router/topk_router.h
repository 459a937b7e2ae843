// Top-k routing of logits: scoring, selection bias, group limit, ranking and weights.
#pragma once

#include <cstdint>
#include <vector>

#include "router/router_config.h"
#include "router/token_routes.h"

namespace moe {

// Routes rows of logits by the rules of a RouterConfig (see router_config.h and docs/routing.md).
// Thread-compatible: route() is const and keeps its scratch in the caller's TokenRoutes, so one router may
// serve many threads, each with its own output.
class TopKRouter {
 public:
  // num_ranked: how many ranks to produce per token (>= top_k; top_k + reroute_depth when rerouting;
  // capped at num_experts). Throws std::invalid_argument for an invalid config or num_ranked.
  explicit TopKRouter(RouterConfig config, int num_ranked = 0);

  const RouterConfig& config() const { return config_; }
  int num_ranked() const { return num_ranked_; }

  // logits: row-major [num_tokens, num_experts]. Fills `out` (allocation-free once `out` has held a batch
  // this large). Throws std::invalid_argument naming the row for a row with no finite logit. Non-finite
  // logits (NaN, +-inf) rank last, in expert order, and map to expert -1 (unavailable).
  void route(const float* logits, int num_tokens, TokenRoutes& out) const;

 private:
  RouterConfig config_;
  int num_ranked_;
};

}  // namespace moe

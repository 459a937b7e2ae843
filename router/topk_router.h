// Top-k routing of logits: scoring, selection bias, group limit, ranking and weights.
#pragma once

#include <cstdint>
#include <vector>

#include "router/router_config.h"
#include "router/rules/topk_rule.h"
#include "router/token_routes.h"

namespace moe {

// The plain-value form of `config` for rules::route_row: validated, num_ranked as TopKRouter takes it (0 =
// top_k; below top_k is an error; capped at num_experts), bias pointing into config.selection_bias (which
// must outlive the result). Throws std::invalid_argument naming the problem. The GPU router builds its
// parameters with it too.
rules::TopKParams make_topk_params(const RouterConfig& config, int num_ranked);

// Routes rows of logits by the rules of a RouterConfig (see router_config.h and docs/routing.md): whole
// blocks of 16 rows through rules::BlockRouter (router/topk_block.h, one row per vector lane), the other rows
// one at a time through rules::route_row (router/rules/topk_rule.h); both give the same bits. Thread-
// compatible: route() is const and keeps its scratch on the stack and in the caller's TokenRoutes, so one
// router may serve many threads, each with its own output.
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
  // Rows [first_row, first_row + num_rows) of `out`, which already has its shape (TokenRoutes::resize with
  // this router's experts, top_k and num_ranked), from `logits` [num_rows, num_experts]: the same values
  // route() gives those rows. Writes nothing else, so threads may fill disjoint row ranges of one `out`.
  // Throws std::invalid_argument for a bad range or shape, or (naming the row of `out`) a row with no
  // finite logit.
  void route_rows(const float* logits, int first_row, int num_rows, TokenRoutes& out) const;

 private:
  RouterConfig config_;
  rules::TopKParams params_;  // selection_bias is set per call (from config_), so copies stay valid
  int num_ranked_;
};

}  // namespace moe

#include "router/topk_router.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "router/topk_block.h"

namespace moe {
namespace {

// The largest expert count and group count a router accepts (RouterConfig::validate); routing keeps per-token
// scratch of this size on the stack.
constexpr int kMaxExperts = 4096;

}  // namespace

rules::TopKParams make_topk_params(const RouterConfig& config, int num_ranked) {
  config.validate();
  if (num_ranked == 0) num_ranked = config.top_k;
  if (num_ranked < config.top_k) {
    throw std::invalid_argument("router: num_ranked (" + std::to_string(num_ranked) + ") is below top_k (" +
                                std::to_string(config.top_k) + ")");
  }
  rules::TopKParams p;
  p.num_experts = config.num_experts;
  p.top_k = config.top_k;
  p.num_ranked = std::min(num_ranked, config.num_experts);
  p.sigmoid = config.scoring == Scoring::kSigmoid;
  p.softmax_topk = config.scoring == Scoring::kSoftmaxTopK;
  p.rank_by_logit = config.rank_by_logit;
  p.group_max = config.group_score == GroupScore::kMax;
  p.renormalize = config.renormalize;
  p.scaling_factor = config.scaling_factor;
  p.num_groups = config.num_groups;
  p.topk_groups = config.topk_groups;
  p.selection_bias = config.selection_bias.empty() ? nullptr : config.selection_bias.data();
  return p;
}

TopKRouter::TopKRouter(RouterConfig config, int num_ranked)
    : config_(std::move(config)),
      params_(make_topk_params(config_, num_ranked)),
      num_ranked_(params_.num_ranked) {}

void TopKRouter::route(const float* logits, int num_tokens, TokenRoutes& out) const {
  if (num_tokens < 0) throw std::invalid_argument("router: num_tokens must be >= 0");
  out.resize(num_tokens, config_.num_experts, config_.top_k, num_ranked_);
  route_rows(logits, 0, num_tokens, out);
}

void TopKRouter::route_rows(const float* logits, int first_row, int num_rows, TokenRoutes& out) const {
  const int E = config_.num_experts;
  const int R = num_ranked_;
  if (num_rows < 0 || first_row < 0 || first_row > out.num_tokens - num_rows) {
    throw std::invalid_argument("router: rows [" + std::to_string(first_row) + ", +" +
                                std::to_string(num_rows) + ") outside the " + std::to_string(out.num_tokens) +
                                " tokens of the output");
  }
  if (out.num_experts != E || out.top_k != config_.top_k || out.num_ranked != R) {
    throw std::invalid_argument("router: the output's shape does not match the router");
  }
  if (num_rows > 0 && logits == nullptr) throw std::invalid_argument("router: logits is null");

  rules::TopKParams params = params_;
  params.selection_bias = config_.selection_bias.empty() ? nullptr : config_.selection_bias.data();
  float scores[kMaxExperts];
  float selects[kMaxExperts];
  int32_t list[kMaxExperts];
  const auto row_by_row = [&](int begin, int end) {
    for (int i = begin; i < end; ++i) {
      const int t = first_row + i;
      const float* row = logits + static_cast<int64_t>(i) * E;
      const rules::RowStats stats = rules::row_stats(params, row);
      if (stats.num_available == 0) {
        throw std::invalid_argument("router: token row " + std::to_string(t) +
                                    " has no finite logit (NaN or inf in every expert)");
      }
      const rules::StoredScores stored(params, row, stats, scores, selects, list);
      rules::route_row<kMaxExperts>(params, stats, stored, out.experts.data() + static_cast<int64_t>(t) * R,
                                    out.weights.data() + static_cast<int64_t>(t) * R, &out.top1_score[t]);
    }
  };
  // Whole blocks of rows in the row-parallel form (the same bits); a block with a row that has no finite
  // logit again row by row (which names the row), and the rows after the last whole block row by row.
  constexpr int kBlock = rules::BlockRouter::kLanes;
  int i = 0;
  if (num_rows >= kBlock && rules::BlockRouter::supports(params)) {
    rules::BlockRouter block(params);
    for (; i + kBlock <= num_rows; i += kBlock) {
      const int64_t t = first_row + i;
      if (!block.route(logits + static_cast<int64_t>(i) * E, out.experts.data() + t * R,
                       out.weights.data() + t * R, out.top1_score.data() + t)) {
        row_by_row(i, i + kBlock);
      }
    }
  }
  row_by_row(i, num_rows);
}

}  // namespace moe

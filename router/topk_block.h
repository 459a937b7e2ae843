// Top-k routing of a block of rows at once, one row per lane (host only): the rules of
// router/rules/topk_rule.h (docs/routing.md section 1) in a row-parallel form, for the many short rows of a
// simulation (E 8 to 256). Each lane runs, on its own row, the same float operations in the same order as
// rules::route_row over rules::StoredScores, so the outputs are the same bits
// (tests/router_topk_block_test.cc compares them row by row); only the work is laid out differently:
//   row statistics    maximum and count over the row (exact, any order), the softmax sum in expert order
//   scores / selects  score_row's expressions per expert, the select value -inf where unavailable
//   group limit       each group's two best select values, its rank counted against every other group
//   ranking           the candidates in ascending expert order through a sorted list of num_ranked entries
//                     per lane, compare-and-shift without a branch (a later expert never ranks before an
//                     equal earlier one, which is rank_before's tie rule)
//   weights           the renormalising sum over ranks j < min(top_k, ranked) in j order, then route_row's
//                     weight expression (softmax_topk: the maximum and the sum of exponentials over the
//                     chosen logits, gathered from the input rows, then route_row's expression)
#pragma once

#include <cstdint>

#include "router/rules/topk_rule.h"

namespace moe::rules {

class BlockRouter {
 public:
  static constexpr int kLanes = 16;  // rows per block

  // Whether this form handles `p` (num_experts <= kMaxBlockExperts, num_groups <= kMaxBlockGroups,
  // num_ranked <= kMaxBlockRanks); route_row handles every valid router.
  static bool supports(const TopKParams& p);
  static constexpr int kMaxBlockExperts = 512;
  static constexpr int kMaxBlockGroups = 64;
  static constexpr int kMaxBlockRanks = 16;

  // Allocates nothing (its scratch, ~70 KB, is part of the object: make it on the stack per call, so that
  // routing stays allocation-free and threads share nothing). `p` must be supported.
  explicit BlockRouter(const TopKParams& p) : p_(p) {}

  // Routes rows [0, kLanes) of `logits` (row-major, num_experts per row) into experts / weights (num_ranked
  // per row) and top1 (one per row): route_row's values. Returns false, writing nothing, when a row has no
  // finite logit (the caller routes the block row by row to report it).
  bool route(const float* logits, int32_t* experts, float* weights, float* top1);

 private:
  // The ranking over select_ into rank_e_ (and rank 0's select value into top_w_) with a list of kList >=
  // num_ranked entries.
  template <int kList>
  void rank_candidates(int E, const float* select);
  // The weights of the ranks in rank_e_ ([num_ranked][kLanes] into w_out): route_row's score expressions,
  // or its softmax_topk expressions on the logits (row-major input rows).
  void score_weights(float* w_out) const;
  void softmax_topk_weights(const float* logits, float* w_out) const;

  TopKParams p_;
  // [num_experts][kLanes]: the logits, then (in place) the select values, -inf where unavailable or in a
  // dropped group.
  float select_[kMaxBlockExperts * kLanes];
  float score_[kMaxBlockExperts * kLanes];   // [num_experts][kLanes]
  float top_w_[kLanes];                      // rank 0's select value per lane (the top-1 score)
  int32_t rank_e_[kMaxBlockRanks * kLanes];  // [num_ranked][kLanes] the ranked experts, best first; -1 empty
};

}  // namespace moe::rules

// Top-k routing of one token row (docs/routing.md section 1), one definition for the CPU router
// (router/topk_router.cc, which keeps the scores in arrays) and the GPU top-k kernel (router/cuda/topk.cu,
// one thread per token, which recomputes them). Both go through route_row(), so the ranking, the group limit
// and the weight formula are the same code; the one difference is the exponential: the host's libm exp
// against CUDA's expf (within 2 ulp), so a weight may differ in its last bits and an exact near-tie could in
// principle resolve differently.
//
//   available    expert e is available iff logit[e] is finite
//   score        softmax: exp(l[e] - max) / sum_e' exp(l[e'] - max) over available experts, in fp32, summed
//   in
//                expert order; sigmoid: 1 / (1 + exp(-l[e])); 0 for unavailable experts
//   select       score[e] + selection_bias[e] (bias chooses, never weighs)
//   group limit  experts form num_groups equal groups; a group's value is the sum of its two best available
//                select values (its best if it has one); the topk_groups best groups (ties to the lower
//                group) stay, a kept group with nothing available adds nothing; other experts are unavailable
//   ranking      select descending, exact ties to the lower expert id (rank_before)
//   weights      w_r = score[e_r] / D * scaling_factor, D = sum_{j < min(k, ranked)} score[e_j] when
//                renormalising, else 1; a zero D (underflowed sigmoid scores) gives zero weights, not NaN
#pragma once

#include <cmath>
#include <cstdint>

#include "base/host_device.h"

namespace moe::rules {

// A RouterConfig as plain values (bias as a pointer into the memory the code runs in).
struct TopKParams {
  int num_experts = 0;
  int top_k = 0;
  int num_ranked = 0;  // ranks written per token (top_k .. num_experts)
  bool sigmoid = false;
  bool renormalize = true;
  float scaling_factor = 1.0f;
  int num_groups = 1;
  int topk_groups = 1;
  const float* selection_bias = nullptr;  // [num_experts], or null
};

MOE_HD inline bool is_finite(float x) {
#if defined(__CUDA_ARCH__)
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}
MOE_HD inline bool is_inf(float x) {
#if defined(__CUDA_ARCH__)
  return isinf(x);
#else
  return std::isinf(x);
#endif
}
// NOTES: on the device this is CUDA's expf (max 2 ulp error); on the host std::exp.
MOE_HD inline float exp_f(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

// The ranking order: value descending, exact ties to the lower index. A strict total order on finite values,
// so every selection algorithm that respects it gives the same ranks.
MOE_HD inline bool rank_before(float va, int a, float vb, int b) {
  if (va != vb) return va > vb;
  return a < b;
}

// What a row's scores need: the number of finite logits, their maximum and the softmax denominator.
struct RowStats {
  int num_available = 0;
  float max_logit = 0.0f;
  float sum = 0.0f;
};

MOE_HD inline RowStats row_stats(const TopKParams& p, const float* logits) {
  RowStats s;
  s.max_logit = -INFINITY;
  for (int e = 0; e < p.num_experts; ++e) {
    if (is_finite(logits[e])) {
      ++s.num_available;
      s.max_logit = s.max_logit < logits[e] ? logits[e] : s.max_logit;
    }
  }
  if (!p.sigmoid && s.num_available > 0) {
    for (int e = 0; e < p.num_experts; ++e)
      s.sum += is_finite(logits[e]) ? exp_f(logits[e] - s.max_logit) : 0.0f;
  }
  return s;
}

// The score of expert e (recomputed on each call: the same operations give the same bits every time).
MOE_HD inline float expert_score(const TopKParams& p, const float* logits, const RowStats& s, int e) {
  const float x = logits[e];
  if (!is_finite(x)) return 0.0f;
  if (p.sigmoid) return 1.0f / (1.0f + exp_f(-x));
  return exp_f(x - s.max_logit) / s.sum;
}

// Scores recomputed on demand: no per-expert storage (the device form).
struct RecomputedScores {
  const TopKParams* p;
  const float* logits;
  RowStats stats;

  MOE_HD bool available(int e) const { return is_finite(logits[e]); }
  MOE_HD float score(int e) const { return expert_score(*p, logits, stats, e); }
  MOE_HD float select(int e) const { return p->selection_bias ? score(e) + p->selection_bias[e] : score(e); }
};

// Scores computed once into caller arrays of num_experts floats (the host form): the same values, bit for
// bit, as RecomputedScores on the same machine.
struct StoredScores {
  const float* logits;
  float* scores;
  float* selects;

  StoredScores(const TopKParams& p, const float* row, const RowStats& stats, float* score_buf,
               float* select_buf)
      : logits(row), scores(score_buf), selects(select_buf) {
    for (int e = 0; e < p.num_experts; ++e) {
      scores[e] = expert_score(p, row, stats, e);
      selects[e] = p.selection_bias ? scores[e] + p.selection_bias[e] : scores[e];
    }
  }
  bool available(int e) const { return is_finite(logits[e]); }
  float score(int e) const { return scores[e]; }
  float select(int e) const { return selects[e]; }
};

// Routes one row: out_e / out_w [num_ranked] receive the ranked experts and their weights (-1 / 0 past the
// available candidates), *top1 rank 0's select value. Returns false (outputs -1 / 0) when the row has no
// finite logit: the caller reports that row. kMaxGroups bounds num_groups (the caller validates it).
// Selection keeps the best num_ranked candidates sorted in out_e (their select values in out_w meanwhile),
// inserting each candidate in ascending expert order: O(num_experts) comparisons plus the insertions.
template <int kMaxGroups, class Scores>
MOE_HD inline bool route_row(const TopKParams& p, const RowStats& stats, const Scores& s, int32_t* out_e,
                             float* out_w, float* top1) {
  const int E = p.num_experts, R = p.num_ranked;
  if (stats.num_available == 0) {
    for (int r = 0; r < R; ++r) {
      out_e[r] = -1;
      out_w[r] = 0.0f;
    }
    *top1 = 0.0f;
    return false;
  }

  // Group limit: which groups stay.
  const int group_size = E / p.num_groups;
  bool kept[kMaxGroups];
  if (p.num_groups > 1) {
    float value[kMaxGroups];
    for (int g = 0; g < p.num_groups; ++g) {
      float best = -INFINITY, second = -INFINITY;
      for (int e = g * group_size; e < (g + 1) * group_size; ++e) {
        if (!s.available(e)) continue;
        const float v = s.select(e);
        if (v > best) {
          second = best;
          best = v;
        } else if (v > second) {
          second = v;
        }
      }
      value[g] = is_inf(second) ? best : best + second;
      kept[g] = false;
    }
    bool taken[kMaxGroups];
    for (int g = 0; g < p.num_groups; ++g) taken[g] = false;
    for (int i = 0; i < p.topk_groups; ++i) {
      int pick = -1;
      for (int g = 0; g < p.num_groups; ++g) {
        if (!taken[g] && (pick < 0 || rank_before(value[g], g, value[pick], pick))) pick = g;
      }
      taken[pick] = true;
      kept[pick] = !is_inf(value[pick]);  // a kept group with nothing available adds none
    }
  }

  // Ranks: the best R candidates in rank order.
  int n = 0;
  for (int e = 0; e < E; ++e) {
    if (!s.available(e) || (p.num_groups > 1 && !kept[e / group_size])) continue;
    const float v = s.select(e);
    if (n == R && !rank_before(v, e, out_w[R - 1], out_e[R - 1])) continue;
    int i = n < R ? n++ : R - 1;
    for (; i > 0 && rank_before(v, e, out_w[i - 1], out_e[i - 1]); --i) {
      out_e[i] = out_e[i - 1];
      out_w[i] = out_w[i - 1];
    }
    out_e[i] = e;
    out_w[i] = v;
  }
  *top1 = n > 0 ? out_w[0] : 0.0f;

  float denominator = 1.0f;
  if (p.renormalize) {
    denominator = 0.0f;
    const int m = p.top_k < n ? p.top_k : n;
    for (int j = 0; j < m; ++j) denominator += s.score(out_e[j]);
  }
  for (int r = 0; r < R; ++r) {
    if (r < n) {
      out_w[r] = denominator > 0.0f ? s.score(out_e[r]) / denominator * p.scaling_factor : 0.0f;
    } else {
      out_e[r] = -1;
      out_w[r] = 0.0f;
    }
  }
  return true;
}

}  // namespace moe::rules

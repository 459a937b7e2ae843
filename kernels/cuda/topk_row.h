// Top-k routing of one row: the rules of router/topk_router.cc as a host/device function. The GPU kernel
// runs it one thread per token; host unit tests run it against TopKRouter bit for bit (on the host, exp is
// the same libm function TopKRouter calls).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define MOE_TOPK_HD __host__ __device__
#else
#define MOE_TOPK_HD
#endif

namespace moe::cuda {

// A RouterConfig as plain values (bias as a pointer into the memory the code runs in).
struct TopKParams {
  int num_experts = 0;
  int top_k = 0;
  int num_ranked = 0;  // ranks written per token (top_k .. num_experts)
  bool sigmoid = false;
  bool renormalize = true;
  float scaling_factor = 1.0f;
  int num_groups = 1;  // <= kTopKMaxGroups
  int topk_groups = 1;
  const float* selection_bias = nullptr;  // [num_experts], or null
};

constexpr int kTopKMaxGroups = 64;

namespace topk_detail {

MOE_TOPK_HD inline bool is_finite(float x) {
#if defined(__CUDA_ARCH__)
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}
MOE_TOPK_HD inline bool is_inf(float x) {
#if defined(__CUDA_ARCH__)
  return isinf(x);
#else
  return std::isinf(x);
#endif
}
// NOTES: on the device this is CUDA's expf (max 2 ulp error); on the host std::exp, as TopKRouter.
MOE_TOPK_HD inline float exp_f(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

// RankBefore of topk_router.cc: value descending, ties to the lower index.
MOE_TOPK_HD inline bool before(float va, int a, float vb, int b) {
  if (va != vb) return va > vb;
  return a < b;
}

struct Row {
  const float* logits;
  const TopKParams* p;
  float max_logit;
  float sum;  // softmax denominator

  MOE_TOPK_HD bool available(int e) const { return is_finite(logits[e]); }
  // score[e] of topk_router.cc, recomputed (the same operations give the same bits every time).
  MOE_TOPK_HD float score(int e) const {
    const float x = logits[e];
    if (!is_finite(x)) return 0.0f;
    if (p->sigmoid) return 1.0f / (1.0f + exp_f(-x));
    return exp_f(x - max_logit) / sum;
  }
  MOE_TOPK_HD float select(int e) const {
    return p->selection_bias ? score(e) + p->selection_bias[e] : score(e);
  }
};

}  // namespace topk_detail

// Routes one row of logits [num_experts]: experts/weights [num_ranked], *top1 = rank 0's selection value.
// Returns false (outputs -1 / 0) when the row has no finite logit. Scratch-free: scores are recomputed
// rather than stored, so the function needs no per-expert arrays (only kTopKMaxGroups group values).
MOE_TOPK_HD inline bool topk_route_row(const TopKParams& p, const float* logits, int32_t* out_e, float* out_w,
                                       float* top1) {
  using namespace topk_detail;
  const int E = p.num_experts, R = p.num_ranked;
  Row row{logits, &p, -INFINITY, 0.0f};
  int num_available = 0;
  for (int e = 0; e < E; ++e) {
    if (row.available(e)) {
      ++num_available;
      const float x = logits[e];
      row.max_logit = row.max_logit < x ? x : row.max_logit;  // std::max(max_logit, x)
    }
  }
  if (num_available == 0) {
    for (int r = 0; r < R; ++r) {
      out_e[r] = -1;
      out_w[r] = 0.0f;
    }
    *top1 = 0.0f;
    return false;
  }
  if (!p.sigmoid) {
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) sum += row.available(e) ? exp_f(logits[e] - row.max_logit) : 0.0f;
    row.sum = sum;
  }

  // Group limit: the kept groups as a bit mask.
  const int group_size = E / p.num_groups;
  uint64_t kept_groups = ~uint64_t{0};
  if (p.num_groups > 1) {
    float value[kTopKMaxGroups];
    for (int g = 0; g < p.num_groups; ++g) {
      float best = -INFINITY, second = -INFINITY;
      for (int e = g * group_size; e < (g + 1) * group_size; ++e) {
        if (!row.available(e)) continue;
        const float v = row.select(e);
        if (v > best) {
          second = best;
          best = v;
        } else if (v > second) {
          second = v;
        }
      }
      value[g] = is_inf(second) ? best : best + second;
    }
    kept_groups = 0;
    uint64_t taken = 0;
    for (int i = 0; i < p.topk_groups; ++i) {
      int pick = -1;
      for (int g = 0; g < p.num_groups; ++g) {
        if (taken >> g & 1) continue;
        if (pick < 0 || before(value[g], g, value[pick], pick)) pick = g;
      }
      taken |= uint64_t{1} << pick;
      if (!is_inf(value[pick]))
        kept_groups |= uint64_t{1} << pick;  // a kept group with nothing available adds none
    }
  }

  // Ranks: repeatedly the best candidate strictly after the previous one in (select desc, id asc) order.
  int num_ranked = 0;
  float prev_v = 0.0f;
  int prev_e = -1;
  for (int r = 0; r < R; ++r) {
    int pick = -1;
    float pick_v = 0.0f;
    for (int e = 0; e < E; ++e) {
      if (!row.available(e) || !(kept_groups >> (e / group_size) & 1)) continue;
      const float v = row.select(e);
      if (prev_e >= 0 && !before(prev_v, prev_e, v, e)) continue;
      if (pick < 0 || before(v, e, pick_v, pick)) {
        pick = e;
        pick_v = v;
      }
    }
    if (pick < 0) break;
    out_e[r] = pick;
    prev_e = pick;
    prev_v = pick_v;
    ++num_ranked;
  }
  float denominator = 1.0f;
  if (p.renormalize) {
    denominator = 0.0f;
    const int n = p.top_k < num_ranked ? p.top_k : num_ranked;
    for (int j = 0; j < n; ++j) denominator += row.score(out_e[j]);
  }
  for (int r = 0; r < R; ++r) {
    if (r < num_ranked) {
      // NOTES: as TopKRouter, a zero denominator (underflowed sigmoid scores) gives zero weights, not NaN.
      out_w[r] = denominator > 0.0f ? row.score(out_e[r]) / denominator * p.scaling_factor : 0.0f;
    } else {
      out_e[r] = -1;
      out_w[r] = 0.0f;
    }
  }
  *top1 = row.select(out_e[0]);
  return true;
}

}  // namespace moe::cuda

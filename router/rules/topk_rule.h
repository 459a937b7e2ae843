// Top-k routing of one token row (docs/routing.md section 1), one definition for the CPU router
// (router/topk_router.cc, which keeps the scores in arrays) and the GPU top-k kernel (router/cuda/topk.cu,
// one thread per token, which recomputes them). Both go through route_row(), so the ranking, the group limit
// and the weight formula are the same code, and the exponential is this header's exp_f (IEEE float
// operations, explicit fused multiply-adds and bit operations only, every compiler told not to contract), so
// the CPU router, its vectorised score loop and the GPU kernel compute the same bits.
//
//   available    expert e is available iff logit[e] is finite
//   score        softmax: exp(l[e] - max) / sum_e' exp(l[e'] - max) over available experts, in fp32, summed
//                in expert order; sigmoid: sigmoid_f(l[e]); 0 for unavailable experts (exp = exp_f)
//   select       score[e] + selection_bias[e] (bias chooses, never weighs); with rank_by_logit
//                l[e] + selection_bias[e] (the bias term only when there is a bias)
//   group limit  experts form num_groups equal groups; a group's value is the sum of its two best available
//                select values (its best if it has one), or its best with group_max; the topk_groups best
//                groups (ties to the lower group) stay, a kept group with nothing available adds nothing;
//                other experts are unavailable
//   ranking      select descending, exact ties to the lower expert id (rank_before)
//   weights      w_r = score[e_r] / D * scaling_factor, D = sum_{j < min(k, ranked)} score[e_j] when
//                renormalising, else 1; a zero D (underflowed sigmoid scores) gives zero weights, not NaN;
//                softmax_topk: w_r = exp_f(l[e_r] - m) / D * scaling_factor, m = max_{j < min(k, ranked)}
//                l[e_j], D = sum_{j < min(k, ranked)} exp_f(l[e_j] - m) in j order (a softmax over the
//                chosen logits: gpt-oss), the same D for reroute candidates r >= k
#pragma once

#include <cmath>
#include <cstdint>

#include "base/float_bits.h"
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
  bool rank_by_logit = false;             // select = logit (+ bias) instead of score (+ bias)
  bool group_max = false;                 // a group's value is its best select value, not its best two's sum
  bool softmax_topk = false;              // weights: softmax over the chosen logits (renormalize ignored)
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
MOE_HD inline float fma_f(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return fmaf(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
// e^x in fp32, one branch-free definition (no table, no libm), so that a loop over a row vectorises and the
// GPU computes the same bits from the same operations:
//   clamp x to [-104, 89] (beyond them the result is 0 / +inf anyway; NaN passes through),
//   n = nearest integer to x log2(e) (one fused add of 1.5 * 2^23), r = x - n ln2 in two Cody-Waite steps
//   (the first exact), e^r on |r| <= ln2/2 by Cephes' degree-7 polynomial 1 + r + r^2 P5(r) (Horner, fused),
//   times 2^n as two powers of two 2^(n>>1) 2^(n - (n>>1)), each a normal float, so a subnormal result is
//   rounded once and 2^128 e^r overflows to +inf as it should.
// Accuracy (tests/router_exp_test.cc, against float64 over the whole float range): at most 1 ulp for normal
// results, within 1 ulp of the correctly rounded subnormal; exp(+inf) = +inf, exp(-inf) = 0, NaN -> NaN.
MOE_HD inline float exp_f(float x) {
  constexpr float kLog2e = 1.44269502f;         // 0x1.715476p+0
  constexpr float kShift = 12582912.0f;         // 0x1.8p23: t = kShift + n holds n in its low mantissa bits
  constexpr uint32_t kShiftBits = 0x4b400000u;  // float_bits(kShift)
  constexpr float kLn2Hi = 0.693145751953125f;  // 0x1.62e4p-1: n * kLn2Hi is exact for |n| <= 2^8
  constexpr float kLn2Lo = 1.428606765330187e-06f;
  const float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  const float t = fma_f(xc, kLog2e, kShift);
  const float n = t - kShift;
  float r = fma_f(-n, kLn2Hi, xc);
  r = fma_f(-n, kLn2Lo, r);
  float p = 1.9875691500e-4f;
  p = fma_f(p, r, 1.3981999507e-3f);
  p = fma_f(p, r, 8.3334519073e-3f);
  p = fma_f(p, r, 4.1665795894e-2f);
  p = fma_f(p, r, 1.6666665459e-1f);
  p = fma_f(p, r, 5.0000001201e-1f);
  const float y = fma_f(p, r * r, r) + 1.0f;
  // n in [-150, 128] (junk for NaN, whose result is NaN whatever the scale).
  const int32_t ni = static_cast<int32_t>(float_bits(t) - kShiftBits);
  const int32_t n1 = ni >> 1;
  const int32_t n2 = ni - n1;
  const float s1 = float_from_bits(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = float_from_bits(static_cast<uint32_t>(n2 + 127) << 23);
  return y * s1 * s2;
}

// 1 / (1 + e^-x), branch-free: with e = exp_f(-|x|) in (0, 1], 1 / (1 + e) for x > 0 and e / (1 + e)
// otherwise (so the subnormal results of very negative x are kept, not flushed). At most 3 ulp from float64
// (tests/router_exp_test.cc); sigmoid(+inf) = 1, sigmoid(-inf) = 0, NaN -> NaN.
MOE_HD inline float sigmoid_f(float x) {
  const float e = exp_f(x > 0.0f ? -x : x);
  return (x > 0.0f ? 1.0f : e) / (1.0f + e);
}

// The ranking order: value descending, exact ties to the lower index. A strict total order on finite values,
// so every selection algorithm that respects it gives the same ranks.
MOE_HD inline bool rank_before(float va, int a, float vb, int b) {
  if (va != vb) return va > vb;
  return a < b;
}

#if !defined(__CUDACC__)
// Eight float / int lanes (host only; what the host loops below compute lane by lane, in one vector).
typedef float FloatLanes __attribute__((vector_size(32)));
typedef int32_t IntLanes __attribute__((vector_size(32)));
#endif

// What a row's scores need: the number of finite logits, their maximum and the softmax denominator.
struct RowStats {
  int num_available = 0;
  float max_logit = 0.0f;
  float sum = 0.0f;
};

// The maximum is taken over kLanes interleaved partial maxima (independent chains, so the host loop is not
// bound by one compare's latency per expert). Max is exact, so any order gives the same value, up to the
// sign of a zero maximum, which no score depends on (exp(x - (+0)) == exp(x - (-0))).
MOE_HD inline RowStats row_stats(const TopKParams& p, const float* logits) {
  constexpr int kLanes = 8;
  RowStats s;
  float lane_max[kLanes];
  int lane_count[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    lane_max[l] = -INFINITY;
    lane_count[l] = 0;
  }
  int e = 0;
#if defined(__CUDACC__)
  for (; e + kLanes <= p.num_experts; e += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float x = logits[e + l];
      const bool finite = is_finite(x);
      lane_count[l] += finite ? 1 : 0;
      lane_max[l] = finite && lane_max[l] < x ? x : lane_max[l];
    }
  }
#else
  {  // the same lanes in one vector (GCC/Clang vector extensions: the compiler does not find it itself)
    FloatLanes vmax;
    IntLanes vcount;
    for (int l = 0; l < kLanes; ++l) {
      vmax[l] = -INFINITY;
      vcount[l] = 0;
    }
    for (; e + kLanes <= p.num_experts; e += kLanes) {
      FloatLanes x;
      __builtin_memcpy(&x, logits + e, sizeof x);
      IntLanes bits;
      __builtin_memcpy(&bits, &x, sizeof bits);
      const IntLanes finite = (bits & 0x7f800000) != 0x7f800000;  // -1 where finite
      vcount -= finite;
      vmax = (finite & (vmax < x)) ? x : vmax;
    }
    for (int l = 0; l < kLanes; ++l) {
      lane_max[l] = vmax[l];
      lane_count[l] = vcount[l];
    }
  }
#endif
  for (int l = 0; e < p.num_experts; ++e, ++l) {
    const float x = logits[e];
    const bool finite = is_finite(x);
    lane_count[l] += finite ? 1 : 0;
    lane_max[l] = finite && lane_max[l] < x ? x : lane_max[l];
  }
  s.max_logit = -INFINITY;
  for (int l = 0; l < kLanes; ++l) {
    s.num_available += lane_count[l];
    s.max_logit = s.max_logit < lane_max[l] ? lane_max[l] : s.max_logit;
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
  if (p.sigmoid) return sigmoid_f(x);
  return exp_f(x - s.max_logit) / s.sum;
}

// expert_score for every expert of a row into scores[num_experts]: the same bits, as one loop without
// branches that the compiler vectorises (the host's form; select values are then scores + bias).
inline void score_row(const TopKParams& p, const float* logits, const RowStats& s, float* scores) {
  const int E = p.num_experts;
  if (p.sigmoid) {
    for (int e = 0; e < E; ++e) {
      const float x = logits[e];
      const float v = sigmoid_f(x);
      scores[e] = is_finite(x) ? v : 0.0f;
    }
  } else {
    const float max = s.max_logit, sum = s.sum;
    for (int e = 0; e < E; ++e) {
      const float x = logits[e];
      const float v = exp_f(x - max) / sum;
      scores[e] = is_finite(x) ? v : 0.0f;
    }
  }
}

// The two best values among v (*best >= *second; -inf where fewer): folds one value in, as route_row's group
// limit does, without a branch.
MOE_HD inline void fold_top2(float v, float& best, float& second) {
  const float hi = v > best ? v : best;
  const float lo = v > best ? best : v;
  second = lo > second ? lo : second;
  best = hi;
}

// Scores recomputed on demand: no per-expert storage (the device form).
struct RecomputedScores {
  const TopKParams* p;
  const float* logits;
  RowStats stats;

  MOE_HD bool available(int e) const { return is_finite(logits[e]); }
  MOE_HD float logit(int e) const { return logits[e]; }
  MOE_HD float score(int e) const { return expert_score(*p, logits, stats, e); }
  MOE_HD float select(int e) const {
    const float v = p->rank_by_logit ? logits[e] : score(e);
    return p->selection_bias ? v + p->selection_bias[e] : v;
  }
  // The two best select values of the available experts in [first, first + count).
  MOE_HD void top2(int first, int count, float& best, float& second) const {
    best = second = -INFINITY;
    for (int e = first; e < first + count; ++e) {
      if (available(e)) fold_top2(select(e), best, second);
    }
  }
  // f(e, select(e)) for every available expert of the kept groups (all groups when num_groups is 1), in
  // ascending expert order.
  template <class F>
  MOE_HD void for_each_candidate(const bool* kept, int num_groups, int span, int, F& f) const {
    for (int g = 0; g < num_groups; ++g) {
      if (num_groups > 1 && !kept[g]) continue;
      for (int e = g * span; e < (g + 1) * span; ++e) {
        if (available(e)) f(e, select(e));
      }
    }
  }
};

// Scores computed once into caller arrays of num_experts floats (the host form): the same values, bit for
// bit, as RecomputedScores. The select array holds -inf for unavailable experts (select values of
// available experts are finite: scores in [0, 1], the bias finite), so its loops need no availability test
// and run in kLanes independent lanes that the compiler vectorises.
struct StoredScores {
  static constexpr int kLanes = 8;
  const float* logits;
  float* scores;
  float* selects;
  int32_t* list;

  // Buffers of num_experts values each.
  StoredScores(const TopKParams& p, const float* row, const RowStats& stats, float* score_buf,
               float* select_buf, int32_t* list_buf)
      : logits(row), scores(score_buf), selects(select_buf), list(list_buf) {
    score_row(p, row, stats, scores);
    const int E = p.num_experts;
    const float* base = p.rank_by_logit ? row : scores;
    if (p.selection_bias) {
      for (int e = 0; e < E; ++e) {
        const float v = base[e] + p.selection_bias[e];
        selects[e] = is_finite(row[e]) ? v : -INFINITY;
      }
    } else {
      for (int e = 0; e < E; ++e) selects[e] = is_finite(row[e]) ? base[e] : -INFINITY;
    }
  }
  bool available(int e) const { return is_finite(logits[e]); }
  float logit(int e) const { return logits[e]; }
  float score(int e) const { return scores[e]; }
  float select(int e) const { return selects[e]; }
  // The two largest values of a multiset do not depend on the order they are folded in, so lanes give
  // RecomputedScores::top2's values.
  void top2(int first, int count, float& best, float& second) const {
    const float* v = selects + first;
    if (count < 2 * kLanes) {  // small groups: folded in order
      best = second = -INFINITY;
      for (int i = 0; i < count; ++i) fold_top2(v[i], best, second);
      return;
    }
    float b[kLanes], s2[kLanes];
    for (int l = 0; l < kLanes; ++l) b[l] = s2[l] = -INFINITY;
    int i = 0;
#if defined(__CUDACC__)
    for (; i + kLanes <= count; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) fold_top2(v[i + l], b[l], s2[l]);
    }
#else
    FloatLanes vb, vs;
    __builtin_memcpy(&vb, b, sizeof vb);
    vs = vb;
    for (; i + kLanes <= count; i += kLanes) {  // fold_top2 in every lane
      FloatLanes x;
      __builtin_memcpy(&x, v + i, sizeof x);
      const FloatLanes lo = x > vb ? vb : x;
      vs = lo > vs ? lo : vs;
      vb = x > vb ? x : vb;
    }
    __builtin_memcpy(b, &vb, sizeof vb);
    __builtin_memcpy(s2, &vs, sizeof vs);
#endif
    for (; i < count; ++i) fold_top2(v[i], b[0], s2[0]);
    best = second = -INFINITY;
    for (int l = 0; l < kLanes; ++l) {
      fold_top2(b[l], best, second);
      fold_top2(s2[l], best, second);
    }
  }
  // The candidates (experts of the kept groups, all experts without groups: groups of `span`) dealt to
  // kLanes lanes; each lane's best is a different candidate, so at least kLanes candidates reach the
  // smallest lane best, and for ranks <= kLanes every one of the best `ranks` candidates does (-inf when a
  // lane holds no available candidate, or for more ranks: no floor).
  float rank_floor(const bool* kept, int num_groups, int span, int ranks) const {
    if (ranks > kLanes || span % kLanes != 0) return -INFINITY;
    float m[kLanes];
    for (int l = 0; l < kLanes; ++l) m[l] = -INFINITY;
    for (int g = 0; g < num_groups; ++g) {
      if (num_groups > 1 && !kept[g]) continue;
      const float* v = selects + g * span;
#if defined(__CUDACC__)
      for (int i = 0; i < span; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) m[l] = v[i + l] > m[l] ? v[i + l] : m[l];
      }
#else
      FloatLanes vm;
      __builtin_memcpy(&vm, m, sizeof vm);
      for (int i = 0; i < span; i += kLanes) {
        FloatLanes x;
        __builtin_memcpy(&x, v + i, sizeof x);
        vm = x > vm ? x : vm;
      }
      __builtin_memcpy(m, &vm, sizeof vm);
#endif
    }
    float floor = m[0];
    for (int l = 1; l < kLanes; ++l) floor = m[l] < floor ? m[l] : floor;
    return floor;
  }
  // RecomputedScores::for_each_candidate, less the candidates below rank_floor: at least `ranks` candidates
  // of larger select values rank before each of them. The rest are gathered without a branch.
  template <class F>
  void for_each_candidate(const bool* kept, int num_groups, int span, int ranks, F& f) const {
    const float floor = rank_floor(kept, num_groups, span, ranks);
    int n = 0;
    for (int g = 0; g < num_groups; ++g) {
      if (num_groups > 1 && !kept[g]) continue;
      for (int e = g * span; e < (g + 1) * span; ++e) {
        list[n] = e;
        n += static_cast<int>(selects[e] >= floor) & static_cast<int>(selects[e] > -INFINITY);
      }
    }
    for (int i = 0; i < n; ++i) f(list[i], selects[list[i]]);
  }
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
      float best, second;
      s.top2(g * group_size, group_size, best, second);
      value[g] = p.group_max || is_inf(second) ? best : best + second;
      kept[g] = false;
    }
    // The topk_groups first groups in rank_before order (a strict total order: no value is NaN) stay; a kept
    // group with nothing available adds none. Up to 16 groups by counting each group's rank without a
    // branch, else by repeated selection: the same groups.
    if (p.num_groups <= 16) {
      for (int g = 0; g < p.num_groups; ++g) {
        int rank = 0;
        for (int h = 0; h < p.num_groups; ++h) {
          rank += static_cast<int>(value[h] > value[g]) | (static_cast<int>(value[h] == value[g]) & (h < g));
        }
        kept[g] = rank < p.topk_groups && !is_inf(value[g]);
      }
    } else {
      bool taken[kMaxGroups];
      for (int g = 0; g < p.num_groups; ++g) taken[g] = false;
      for (int i = 0; i < p.topk_groups; ++i) {
        int pick = -1;
        for (int g = 0; g < p.num_groups; ++g) {
          if (!taken[g] && (pick < 0 || rank_before(value[g], g, value[pick], pick))) pick = g;
        }
        taken[pick] = true;
        kept[pick] = !is_inf(value[pick]);
      }
    }
  }

  // Ranks: the best R candidates in rank order.
  // Candidates in ascending expert order, group by group (a dropped group's experts are skipped whole); a
  // Scores form may leave out candidates that at least R others rank before (no rank changes).
  int n = 0;
  const int num_groups = p.num_groups > 1 ? p.num_groups : 1;
  const int span = p.num_groups > 1 ? group_size : E;
  const auto consider = [&](int e, float v) {
    if (n == R && !rank_before(v, e, out_w[R - 1], out_e[R - 1])) return;
    int i = n < R ? n++ : R - 1;
    for (; i > 0 && rank_before(v, e, out_w[i - 1], out_e[i - 1]); --i) {
      out_e[i] = out_e[i - 1];
      out_w[i] = out_w[i - 1];
    }
    out_e[i] = e;
    out_w[i] = v;
  };
  s.for_each_candidate(kept, num_groups, span, R, consider);
  *top1 = n > 0 ? out_w[0] : 0.0f;

  const int chosen = p.top_k < n ? p.top_k : n;
  if (p.softmax_topk) {
    float max_logit = -INFINITY;  // of the chosen: finite, so every exponent below is <= 0 for them
    for (int j = 0; j < chosen; ++j)
      max_logit = s.logit(out_e[j]) > max_logit ? s.logit(out_e[j]) : max_logit;
    float denominator = 0.0f;
    for (int j = 0; j < chosen; ++j) denominator += exp_f(s.logit(out_e[j]) - max_logit);
    for (int r = 0; r < R; ++r) {
      if (r < n) {
        out_w[r] = exp_f(s.logit(out_e[r]) - max_logit) / denominator * p.scaling_factor;
      } else {
        out_e[r] = -1;
        out_w[r] = 0.0f;
      }
    }
    return true;
  }
  float denominator = 1.0f;
  if (p.renormalize) {
    denominator = 0.0f;
    for (int j = 0; j < chosen; ++j) denominator += s.score(out_e[j]);
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

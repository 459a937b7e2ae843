#include "router/topk_block.h"

#include <cmath>

#if defined(__AVX512F__)
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports the _mm512_undefined_ps() inside its own shuffle intrinsics as maybe uninitialised when they
// are inlined (the instructions overwrite every lane); nothing in this file reads an uninitialised value.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif
#if defined(__GNUC__) && !defined(__clang__)
// Without AVX-512 (MOE_NATIVE=OFF, -march=x86-64-v3) GCC notes that the 64-byte lane vectors the helpers
// below pass and return would be passed differently by a compiler with AVX-512; they are internal to this
// file (no ABI boundary), so the note is not an error here.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace moe::rules {
namespace {

constexpr int L = BlockRouter::kLanes;
typedef float FloatVec __attribute__((vector_size(4 * L)));
typedef int32_t IntVec __attribute__((vector_size(4 * L)));

// out[e * L + l] = rows[l * E + e] for the L rows of E values: 16 x 16 tiles transposed in registers where
// AVX-512 is there, the rest one value at a time (a plain copy either way).
void transpose_rows(const float* rows, int E, float* out) {
  int e0 = 0;
#if defined(__AVX512F__)
  for (; e0 + L <= E; e0 += L) {
    __m512 r[L], t[L];
    for (int l = 0; l < L; ++l) r[l] = _mm512_loadu_ps(rows + static_cast<int64_t>(l) * E + e0);
    for (int i = 0; i < L; i += 2) {  // 2 x 2 blocks of single values
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < L; i += 4) {  // 4 x 4 blocks
      r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < L; i += 8) {  // 128-bit lanes, pairs of 4 x 4 blocks
      for (int j = 0; j < 4; ++j) {
        t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
        t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
      }
    }
    for (int j = 0; j < 8; ++j) {
      r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
      r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
    }
    for (int i = 0; i < L; ++i) _mm512_storeu_ps(out + static_cast<int64_t>(e0 + i) * L, r[i]);
  }
  if (e0 < E) {  // the last E mod 16 experts (all of them below 16): one gather per expert
    const __m512i row_start = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(E));
    for (int e = e0; e < E; ++e) {
      const __m512i index = _mm512_add_epi32(row_start, _mm512_set1_epi32(e));
      _mm512_storeu_ps(out + static_cast<int64_t>(e) * L, _mm512_i32gather_ps(index, rows, 4));
    }
    return;
  }
#endif
  for (int l = 0; l < L; ++l) {
    for (int e = e0; e < E; ++e) out[e * L + l] = rows[static_cast<int64_t>(l) * E + e];
  }
}

IntVec lane_ids() {
  IntVec v;
  for (int l = 0; l < L; ++l) v[l] = l;
  return v;
}

// base[max(e, 0) * L + lane] lane by lane: a lane's value of its own expert e in a [expert][lane] array.
FloatVec gather_lanes(const float* base, IntVec e, IntVec lane) {
  const IntVec index = (e < 0 ? IntVec{} : e) * L + lane;
#if defined(__AVX512F__)
  __m512i i;
  __builtin_memcpy(&i, &index, sizeof i);
  const __m512 g = _mm512_i32gather_ps(i, base, 4);
  FloatVec v;
  __builtin_memcpy(&v, &g, sizeof v);
  return v;
#else
  FloatVec v;
  for (int l = 0; l < L; ++l) v[l] = base[index[l]];
  return v;
#endif
}

// Whether any lane of m is nonzero.
bool any_lane(IntVec m) {
#if defined(__AVX512F__)
  __m512i v;
  __builtin_memcpy(&v, &m, sizeof v);
  return _mm512_test_epi32_mask(v, v) != 0;
#else
  bool any = false;
  for (int l = 0; l < L; ++l) any |= m[l] != 0;
  return any;
#endif
}

// -1 in the lanes of v that hold +-inf (is_inf lane by lane).
IntVec inf_lanes(FloatVec v) {
  IntVec bits;
  __builtin_memcpy(&bits, &v, sizeof bits);
  return (bits & 0x7fffffff) == 0x7f800000;
}

// The sorted list's length for R ranks: a few fixed sizes, so that the list lives in registers. A longer
// list holds the same first R entries (the best R candidates, in order).
int list_size(int R) {
  return R <= 2 ? 2 : (R <= 4 ? 4 : (R <= 8 ? 8 : 16));
}

}  // namespace

bool BlockRouter::supports(const TopKParams& p) {
  return p.num_experts <= kMaxBlockExperts && p.num_groups <= kMaxBlockGroups &&
         p.num_ranked <= kMaxBlockRanks;
}

template <int kList>
void BlockRouter::rank_candidates(int E, const float* select) {
  FloatVec w[kList];
  IntVec idx[kList];
  for (int r = 0; r < kList; ++r) {
    for (int l = 0; l < L; ++l) {
      w[r][l] = -INFINITY;
      idx[r][l] = -1;
    }
  }
  for (int e = 0; e < E; ++e) {
    FloatVec c;
    __builtin_memcpy(&c, select + static_cast<int64_t>(e) * L, sizeof c);
    // A candidate no lane ranks above its list's last entry changes nothing (the lists are sorted): skip
    // the insertion. Once the lists fill, most candidates are such.
    if (!any_lane(c > w[kList - 1])) continue;
    const IntVec ev = IntVec{} + e;
    for (int r = kList - 1; r > 0; --r) {
      const IntVec above = c > w[r];
      const IntVec above_prev = c > w[r - 1];
      const FloatVec wn = above_prev ? w[r - 1] : c;
      const IntVec en = above_prev ? idx[r - 1] : ev;
      w[r] = above ? wn : w[r];
      idx[r] = above ? en : idx[r];
    }
    const IntVec above = c > w[0];
    w[0] = above ? c : w[0];
    idx[0] = above ? ev : idx[0];
  }
  __builtin_memcpy(top_w_, &w[0], sizeof w[0]);
  const int R = p_.num_ranked;
  for (int r = 0; r < R; ++r) __builtin_memcpy(rank_e_ + r * L, &idx[r], sizeof idx[r]);
}

bool BlockRouter::route(const float* logits, int32_t* experts, float* weights, float* top1) {
  const int E = p_.num_experts, R = p_.num_ranked;
  float* x = select_;
  transpose_rows(logits, E, x);

  // Row statistics: count and maximum of the finite logits (row_stats' values), in lane vectors (registers:
  // arrays here were kept in memory, each expert's update waiting on the previous one's store; is_finite
  // lane by lane: the exponent bits not all ones); the softmax sum in expert order (row_stats' sum, term by
  // term).
  IntVec count_v = IntVec{};
  FloatVec max_v = FloatVec{} - INFINITY;
  for (int e = 0; e < E; ++e) {
    FloatVec v;
    __builtin_memcpy(&v, x + static_cast<int64_t>(e) * L, sizeof v);
    IntVec bits;
    __builtin_memcpy(&bits, &v, sizeof bits);
    const IntVec finite = (bits & 0x7f800000) != 0x7f800000;  // -1 where finite
    count_v -= finite;
    max_v = (finite & (max_v < v)) ? v : max_v;
  }
  if (any_lane(count_v == 0)) return false;
  float max[L], sum[L];
  for (int l = 0; l < L; ++l) {
    max[l] = max_v[l];
    sum[l] = 0.0f;
  }

  float* score = score_;
  float* select = select_;
  if (p_.sigmoid) {
    for (int e = 0; e < E; ++e) {
      for (int l = 0; l < L; ++l) {
        const float v = x[e * L + l];
        const float s = sigmoid_f(v);
        score[e * L + l] = is_finite(v) ? s : 0.0f;
      }
    }
  } else {
    for (int e = 0; e < E; ++e) {
      for (int l = 0; l < L; ++l) {
        const float v = x[e * L + l];
        const float t = exp_f(v - max[l]);
        sum[l] += is_finite(v) ? t : 0.0f;
      }
    }
    for (int e = 0; e < E; ++e) {
      for (int l = 0; l < L; ++l) {
        const float v = x[e * L + l];
        const float s = exp_f(v - max[l]) / sum[l];
        score[e * L + l] = is_finite(v) ? s : 0.0f;
      }
    }
  }
  const float* base = p_.rank_by_logit ? x : score;  // x is select: each element is read before written
  for (int e = 0; e < E; ++e) {
    const float bias = p_.selection_bias ? p_.selection_bias[e] : 0.0f;
    for (int l = 0; l < L; ++l) {
      const float v = p_.selection_bias ? base[e * L + l] + bias : base[e * L + l];
      select[e * L + l] = is_finite(x[e * L + l]) ? v : -INFINITY;
    }
  }

  // Group limit: a group's value from its two best select values, its rank counted against every other
  // group (route_row's rule for any group count: rank_before is a strict total order); the experts of a
  // group that does not stay become -inf candidates, which the ranking never takes.
  if (p_.num_groups > 1) {
    const int G = p_.num_groups, span = E / G;
    FloatVec value[kMaxBlockGroups];
    for (int g = 0; g < G; ++g) {
      FloatVec best = FloatVec{} - INFINITY, second = best;
      for (int e = g * span; e < (g + 1) * span; ++e) {  // fold_top2, lane by lane
        FloatVec v;
        __builtin_memcpy(&v, select + static_cast<int64_t>(e) * L, sizeof v);
        const IntVec above = v > best;
        const FloatVec lo = above ? best : v;
        second = lo > second ? lo : second;
        best = above ? v : best;
      }
      value[g] = p_.group_max ? best : (inf_lanes(second) ? best : best + second);
    }
    for (int g = 0; g < G; ++g) {
      IntVec rank = IntVec{};
      for (int h = 0; h < G; ++h) {
        const IntVec before = h < g ? (value[h] >= value[g]) : (value[h] > value[g]);
        rank -= before;  // -1 where true
      }
      const IntVec dropped = (rank >= p_.topk_groups) | inf_lanes(value[g]);
      if (!any_lane(dropped)) continue;
      const FloatVec minus_inf = FloatVec{} - INFINITY;
      for (int e = g * span; e < (g + 1) * span; ++e) {
        FloatVec v;
        __builtin_memcpy(&v, select + static_cast<int64_t>(e) * L, sizeof v);
        v = dropped ? minus_inf : v;
        __builtin_memcpy(select + static_cast<int64_t>(e) * L, &v, sizeof v);
      }
    }
  }

  // Ranking: candidates in ascending expert order into a descending list per lane. A candidate enters at
  // rank r when it is strictly above the entry there (an equal entry is an earlier expert, which ranks
  // before it); the entries from r on shift down one, the last falls off. -inf never enters.
  switch (list_size(R)) {
    case 2:
      rank_candidates<2>(E, select);
      break;
    case 4:
      rank_candidates<4>(E, select);
      break;
    case 8:
      rank_candidates<8>(E, select);
      break;
    default:
      rank_candidates<16>(E, select);
      break;
  }
  const int32_t* idx = rank_e_;

  // Weights: route_row's expressions, lane-parallel (each lane its own row's operations in route_row's
  // order). Empty ranks are the last ones, so summing j < top_k with 0 for an empty rank adds exactly what
  // summing j < min(top_k, ranked) does (den >= +0, den + 0 == den).
  float w_out[kMaxBlockRanks * L];
  if (p_.softmax_topk) {
    softmax_topk_weights(logits, w_out);
  } else {
    score_weights(w_out);
  }
  {
    IntVec e0;
    FloatVec t0;
    __builtin_memcpy(&e0, idx, sizeof e0);
    __builtin_memcpy(&t0, top_w_, sizeof t0);
    const FloatVec t = e0 >= 0 ? t0 : FloatVec{};
    __builtin_memcpy(top1, &t, sizeof t);
  }
  for (int l = 0; l < L; ++l) {
    for (int r = 0; r < R; ++r) {
      experts[static_cast<int64_t>(l) * R + r] = idx[r * L + l];
      weights[static_cast<int64_t>(l) * R + r] = w_out[r * L + l];
    }
  }
  return true;
}

void BlockRouter::score_weights(float* w_out) const {
  const int R = p_.num_ranked;
  const int32_t* idx = rank_e_;
  const float* score = score_;
  const IntVec lane = lane_ids();
  FloatVec denominator = FloatVec{} + 1.0f;
  if (p_.renormalize) {
    denominator = FloatVec{};
    for (int j = 0; j < p_.top_k; ++j) {
      IntVec e;
      __builtin_memcpy(&e, idx + j * L, sizeof e);
      denominator += e >= 0 ? gather_lanes(score, e, lane) : FloatVec{};
    }
  }
  for (int r = 0; r < R; ++r) {
    IntVec e;
    __builtin_memcpy(&e, idx + r * L, sizeof e);
    const FloatVec s = gather_lanes(score, e, lane);
    const FloatVec w = denominator > 0.0f ? s / denominator * p_.scaling_factor : FloatVec{};
    const FloatVec out = e < 0 ? FloatVec{} : w;
    __builtin_memcpy(w_out + r * L, &out, sizeof out);
  }
}

void BlockRouter::softmax_topk_weights(const float* logits, float* w_out) const {
  // route_row's softmax_topk expressions lane by lane; a lane's logits are its row of the input, [l][e].
  const int E = p_.num_experts, R = p_.num_ranked;
  const int32_t* idx = rank_e_;
  const IntVec row_start = lane_ids() * E;
  auto logit_of = [&](IntVec e) {  // the lane's logit of its expert e (e >= 0)
    return gather_lanes(logits, IntVec{}, row_start + (e < 0 ? IntVec{} : e));
  };
  FloatVec max = FloatVec{} - INFINITY;
  for (int j = 0; j < p_.top_k && j < R; ++j) {
    IntVec e;
    __builtin_memcpy(&e, idx + j * L, sizeof e);
    const FloatVec v = logit_of(e);
    max = ((e >= 0) & (v > max)) ? v : max;
  }
  FloatVec denominator = FloatVec{};
  for (int j = 0; j < p_.top_k && j < R; ++j) {
    IntVec e;
    __builtin_memcpy(&e, idx + j * L, sizeof e);
    const FloatVec v = logit_of(e);
    FloatVec t;
    for (int l = 0; l < L; ++l) t[l] = exp_f(v[l] - max[l]);
    denominator += e >= 0 ? t : FloatVec{};
  }
  for (int r = 0; r < R; ++r) {
    IntVec e;
    __builtin_memcpy(&e, idx + r * L, sizeof e);
    const FloatVec v = logit_of(e);
    FloatVec w;
    for (int l = 0; l < L; ++l) w[l] = exp_f(v[l] - max[l]) / denominator[l] * p_.scaling_factor;
    const FloatVec out = e < 0 ? FloatVec{} : w;
    __builtin_memcpy(w_out + r * L, &out, sizeof out);
  }
}

}  // namespace moe::rules

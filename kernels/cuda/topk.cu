#include "kernels/cuda/topk.h"

#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_buffer.h"

namespace moe::cuda {
namespace {

constexpr int kMaxGroups = 64;
constexpr int kThreads = 128;

struct Row {
  const float* logits;
  const TopKParams& p;
  float max_logit;
  float sum;  // softmax denominator

  __device__ bool available(int e) const { return isfinite(logits[e]); }
  // score[e] of topk_router.cc, recomputed (the same operations give the same bits every time).
  __device__ float score(int e) const {
    const float x = logits[e];
    if (!isfinite(x)) return 0.0f;
    if (p.sigmoid) return 1.0f / (1.0f + expf(-x));
    return expf(x - max_logit) / sum;
  }
  __device__ float select(int e) const {
    return p.selection_bias ? score(e) + p.selection_bias[e] : score(e);
  }
};

// RankBefore of topk_router.cc: value descending, ties to the lower index.
__device__ bool before(float va, int a, float vb, int b) {
  if (va != vb) return va > vb;
  return a < b;
}

__global__ void reset_error(int32_t* error_row) {
  *error_row = INT32_MAX;
}

__global__ void __launch_bounds__(kThreads) topk_kernel(TopKParams p, const float* __restrict__ logits, int num_tokens,
                                                        int32_t* __restrict__ experts, float* __restrict__ weights,
                                                        float* __restrict__ top1_score, int32_t* error_row) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_tokens) return;
  const int E = p.num_experts, R = p.num_ranked;
  Row row{logits + static_cast<int64_t>(t) * E, p, -INFINITY, 0.0f};
  int num_available = 0;
  for (int e = 0; e < E; ++e) {
    if (row.available(e)) {
      ++num_available;
      const float x = row.logits[e];
      row.max_logit = row.max_logit < x ? x : row.max_logit;  // std::max(max_logit, x)
    }
  }
  int32_t* out_e = experts + static_cast<int64_t>(t) * R;
  float* out_w = weights + static_cast<int64_t>(t) * R;
  if (num_available == 0) {
    atomicMin(error_row, t);
    for (int r = 0; r < R; ++r) {
      out_e[r] = -1;
      out_w[r] = 0.0f;
    }
    top1_score[t] = 0.0f;
    return;
  }
  if (!p.sigmoid) {
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) sum += row.available(e) ? expf(row.logits[e] - row.max_logit) : 0.0f;
    row.sum = sum;
  }

  // Group limit: kept groups as a bit mask.
  uint64_t kept_groups = ~uint64_t{0};
  if (p.num_groups > 1) {
    const int group_size = E / p.num_groups;
    float value[kMaxGroups];
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
      value[g] = isinf(second) ? best : best + second;
    }
    kept_groups = 0;
    for (int i = 0; i < p.topk_groups; ++i) {
      int pick = -1;
      for (int g = 0; g < p.num_groups; ++g) {
        if (kept_groups >> g & 1) continue;
        if (pick < 0 || before(value[g], g, value[pick], pick)) pick = g;
      }
      if (!isinf(value[pick])) kept_groups |= uint64_t{1} << pick;  // a kept group with nothing available adds none
    }
  }
  const int group_size = E / p.num_groups;
  auto candidate = [&](int e) { return row.available(e) && (kept_groups >> (e / group_size) & 1); };

  // Ranks: repeatedly the best candidate strictly after the previous one in (select desc, id asc) order.
  int num_ranked = 0;
  float prev_v = 0.0f;
  int prev_e = -1;
  for (int r = 0; r < R; ++r) {
    int pick = -1;
    float pick_v = 0.0f;
    for (int e = 0; e < E; ++e) {
      if (!candidate(e)) continue;
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
      out_w[r] = denominator > 0.0f ? row.score(out_e[r]) / denominator * p.scaling_factor : 0.0f;
    } else {
      out_e[r] = -1;
      out_w[r] = 0.0f;
    }
  }
  top1_score[t] = row.select(out_e[0]);
}

}  // namespace

TopKParams topk_params(const RouterConfig& config, int num_ranked, const float* device_bias) {
  config.validate();
  if (num_ranked == 0) num_ranked = config.top_k;
  if (num_ranked < config.top_k) {
    throw std::invalid_argument("gpu router: num_ranked (" + std::to_string(num_ranked) + ") is below top_k (" +
                                std::to_string(config.top_k) + ")");
  }
  if (config.num_groups > kMaxGroups) {
    throw std::invalid_argument("gpu router: num_groups (" + std::to_string(config.num_groups) +
                                ") exceeds the kernel's limit of " + std::to_string(kMaxGroups));
  }
  if (!config.selection_bias.empty() && device_bias == nullptr) {
    throw std::invalid_argument("gpu router: the config has a selection bias but no device copy was given");
  }
  TopKParams p;
  p.num_experts = config.num_experts;
  p.top_k = config.top_k;
  p.num_ranked = num_ranked < config.num_experts ? num_ranked : config.num_experts;
  p.sigmoid = config.scoring == Scoring::kSigmoid;
  p.renormalize = config.renormalize;
  p.scaling_factor = config.scaling_factor;
  p.num_groups = config.num_groups;
  p.topk_groups = config.topk_groups;
  p.selection_bias = config.selection_bias.empty() ? nullptr : device_bias;
  return p;
}

void topk_route(const TopKParams& params, const float* logits, int num_tokens, int32_t* experts, float* weights,
                float* top1_score, int32_t* error_row, cudaStream_t stream) {
  if (num_tokens < 0) throw std::invalid_argument("gpu router: num_tokens must be >= 0");
  reset_error<<<1, 1, 0, stream>>>(error_row);
  CUDA_CHECK(cudaGetLastError());
  if (num_tokens == 0) return;
  const int blocks = (num_tokens + kThreads - 1) / kThreads;
  topk_kernel<<<blocks, kThreads, 0, stream>>>(params, logits, num_tokens, experts, weights, top1_score, error_row);
  CUDA_CHECK(cudaGetLastError());
}

void topk_route_from_host(const RouterConfig& config, int num_ranked, const float* logits, int num_tokens,
                          TokenRoutes& out, cudaStream_t stream) {
  DeviceBuffer<float> bias(config.selection_bias.size());
  bias.upload(config.selection_bias);
  const TopKParams p = topk_params(config, num_ranked, bias.data());
  const size_t T = static_cast<size_t>(num_tokens);
  DeviceBuffer<float> d_logits(T * p.num_experts), d_weights(T * p.num_ranked), d_top1(T);
  DeviceBuffer<int32_t> d_experts(T * p.num_ranked), d_error(1);
  d_logits.upload(logits, T * p.num_experts);
  topk_route(p, d_logits.data(), num_tokens, d_experts.data(), d_weights.data(), d_top1.data(), d_error.data(),
             stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  int32_t error_row = 0;
  d_error.download(&error_row, 1);
  if (error_row != INT32_MAX) {
    throw std::invalid_argument("router: token row " + std::to_string(error_row) +
                                " has no finite logit (NaN or inf in every expert)");
  }
  out.resize(num_tokens, p.num_experts, p.top_k, p.num_ranked);
  d_experts.download(out.experts.data(), out.experts.size());
  d_weights.download(out.weights.data(), out.weights.size());
  d_top1.download(out.top1_score.data(), T);
}

}  // namespace moe::cuda

#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "base/cuda/check.h"
#include "base/cuda/device_buffer.h"
#include "router/cuda/topk.h"

namespace moe::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void reset_error(int32_t* error_row) {
  *error_row = INT32_MAX;
}

__global__ void __launch_bounds__(kThreads)
    topk_kernel(TopKParams p, const float* __restrict__ logits, int num_tokens, int32_t* __restrict__ experts,
                float* __restrict__ weights, float* __restrict__ top1_score, int32_t* error_row) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_tokens) return;
  const int64_t R = p.num_ranked;
  const float* row = logits + static_cast<int64_t>(t) * p.num_experts;
  const rules::RowStats stats = rules::row_stats(p, row);
  if (!rules::route_row<kTopKMaxGroups>(p, stats, rules::RecomputedScores{&p, row, stats}, experts + t * R,
                                        weights + t * R, top1_score + t)) {
    atomicMin(error_row, t);  // integer minimum: the same row whatever the thread order
  }
}

}  // namespace

TopKParams topk_params(const RouterConfig& config, int num_ranked, const float* device_bias) {
  TopKParams p = make_topk_params(config, num_ranked);
  if (config.num_groups > kTopKMaxGroups) {
    throw std::invalid_argument("gpu router: num_groups (" + std::to_string(config.num_groups) +
                                ") exceeds the kernel's limit of " + std::to_string(kTopKMaxGroups));
  }
  if (!config.selection_bias.empty() && device_bias == nullptr) {
    throw std::invalid_argument("gpu router: the config has a selection bias but no device copy was given");
  }
  p.selection_bias = config.selection_bias.empty() ? nullptr : device_bias;
  return p;
}

void topk_route(const TopKParams& params, const float* logits, int num_tokens, int32_t* experts,
                float* weights, float* top1_score, int32_t* error_row, cudaStream_t stream) {
  if (num_tokens < 0) throw std::invalid_argument("gpu router: num_tokens must be >= 0");
  reset_error<<<1, 1, 0, stream>>>(error_row);
  CUDA_CHECK(cudaGetLastError());
  if (num_tokens == 0) return;
  const int blocks = (num_tokens + kThreads - 1) / kThreads;
  topk_kernel<<<blocks, kThreads, 0, stream>>>(params, logits, num_tokens, experts, weights, top1_score,
                                               error_row);
  CUDA_CHECK(cudaGetLastError());
}

void throw_if_topk_error(int32_t row) {
  if (row == INT32_MAX) return;
  throw std::invalid_argument("router: token row " + std::to_string(row) +
                              " has no finite logit (NaN or inf in every expert)");
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
  topk_route(p, d_logits.data(), num_tokens, d_experts.data(), d_weights.data(), d_top1.data(),
             d_error.data(), stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  int32_t error_row = 0;
  d_error.download(&error_row, 1);
  throw_if_topk_error(error_row);
  out.resize(num_tokens, p.num_experts, p.top_k, p.num_ranked);
  d_experts.download(out.experts.data(), out.experts.size());
  d_weights.download(out.weights.data(), out.weights.size());
  d_top1.download(out.top1_score.data(), T);
}

}  // namespace moe::cuda

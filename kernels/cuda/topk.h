// Top-k gating on the GPU: the rules of router/topk_router.cc (topk_row.h), one thread per token.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/topk_row.h"
#include "router/router_config.h"
#include "router/token_routes.h"

namespace moe::cuda {

// Validates `config` (as TopKRouter does) and the GPU kernel's limit of 64 expert groups; num_ranked as in
// TopKRouter (0 = top_k; capped at num_experts). `device_bias` must hold config.selection_bias on the device
// when that is non-empty (else it is ignored). Throws std::invalid_argument.
TopKParams topk_params(const RouterConfig& config, int num_ranked, const float* device_bias);

// Routes num_tokens rows of logits [num_tokens, num_experts] (device) on `stream`, writing TokenRoutes'
// arrays (device): experts/weights [num_tokens * num_ranked], top1_score [num_tokens]. Same float operations
// in the same order as TopKRouter; the one difference is expf (CUDA's, within 2 ulp) against the host libm's
// exp, so a weight may differ in its last bits, and an exact near-tie between two experts could in principle
// resolve differently. A row with no finite logit is an error: *error_row (device int32) receives the lowest
// such row, or stays INT32_MAX (this launcher resets it first). Asynchronous; the host sees the error when it
// reads error_row.
void topk_route(const TopKParams& params, const float* logits, int num_tokens, int32_t* experts,
                float* weights, float* top1_score, int32_t* error_row, cudaStream_t stream);

// Throws std::invalid_argument naming `row` in TopKRouter's words ("router: token row R has no finite logit
// ..."), for callers that read error_row back; returns when row is INT32_MAX (no error).
void throw_if_topk_error(int32_t row);

// Test convenience: host logits in, host TokenRoutes out; copies, routes, synchronises and throws
// std::invalid_argument naming the row (as TopKRouter) for a row with no finite logit.
void topk_route_from_host(const RouterConfig& config, int num_ranked, const float* logits, int num_tokens,
                          TokenRoutes& out, cudaStream_t stream);

}  // namespace moe::cuda

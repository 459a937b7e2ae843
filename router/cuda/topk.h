// Top-k gating on the GPU: the top-k rule (router/rules/topk_rule.h, route_row with scores recomputed on the
// device), one thread per token.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "router/router_config.h"
#include "router/rules/topk_rule.h"
#include "router/token_routes.h"
#include "router/topk_router.h"

namespace moe::cuda {

// The kernel's limit on expert groups (per-thread group values in registers or local memory).
constexpr int kTopKMaxGroups = 64;

using rules::TopKParams;

// make_topk_params (router/topk_router.h: validation, num_ranked as TopKRouter takes it) with the bias
// pointer set to `device_bias`, which must hold config.selection_bias on the device when that is non-empty
// (else it is ignored), and the kernel's group limit checked. Throws std::invalid_argument.
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

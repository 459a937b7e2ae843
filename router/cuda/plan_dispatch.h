// Dispatch planning on the GPU: the CPU planner's plan (router/dispatch_planner.h), computed on a stream.
//
// Flat launcher in the DeepEP style: plain device pointers, explicit counts, a trailing stream. The
// algorithm is plan_core.h (sorts, scans and per-pool threads; see there), identical to the OpenMP build
// that the unit tests compare with the CPU planner.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "router/cuda/plan_types.h"

namespace moe::cuda {

// Device workspace bytes plan_dispatch needs for batches of up to shape.max_tokens (validates the shape).
// It holds the planner's arrays and an arena for the temporary storage of the sorts and scans.
size_t plan_workspace_bytes(const PlanShape& shape);

// Plans in.num_tokens tokens on `stream`. Every pointer is device memory (sizes in plan_types.h).
// Asynchronous: no host synchronisation and no allocation, so it may be captured in a CUDA graph.
// Data errors (duplicate (request_id, position), non-contiguous causal positions) are written to
// *out.error on the device; the caller reads it back when it synchronises. The causal table is written
// only when there is no error.
// Throws std::invalid_argument for an invalid shape, num_tokens > max_tokens or a short workspace, and
// std::runtime_error (with file:line) for a CUDA error at launch.
void plan_dispatch(const PlanShape& shape, const PlanInputs& in, const PlanOutputs& out, void* workspace,
                   size_t workspace_bytes, cudaStream_t stream);

// Test and tool convenience: `host_in`/`host_out` in host memory; allocates device buffers, copies in,
// plans on `stream`, copies out and synchronises `stream`. Not for a hot path.
void plan_dispatch_from_host(const PlanShape& shape, const PlanInputs& host_in, const PlanOutputs& host_out,
                             cudaStream_t stream);

}  // namespace moe::cuda

// The dispatch planner's algorithm (plan_core.h) on the CPU through Thrust's OpenMP backend.
//
// Same arrays and the same results as the CUDA launcher (plan_dispatch.h), with every pointer in host
// memory. It exists so that the data-parallel algorithm the GPU runs is tested against the CPU
// DispatchPlanner on machines without a GPU; it is not meant as a fast CPU planner.
#pragma once

#include <cstddef>

#include "router/cuda/plan_host.h"
#include "router/cuda/plan_types.h"

namespace moe::cuda {

// Bytes of host workspace plan_dispatch_omp needs for `shape` (validates the shape).
size_t plan_workspace_bytes_omp(const PlanShape& shape);

// Plans in.num_tokens tokens (<= shape.max_tokens). Errors in the data (duplicate tokens, causal positions)
// are reported in out.error as on the GPU; the causal state table is written only when out.error->code is
// kPlanOk. Throws std::invalid_argument for an invalid shape, too many tokens or a small workspace.
void plan_dispatch_omp(const PlanShape& shape, const PlanInputs& in, const PlanOutputs& out, void* workspace,
                       size_t workspace_bytes);

// The OpenMP backend as a runner for ArrayPlanner (allocates its workspace per call: a test tool).
ArrayPlanRunner omp_plan_runner();

}  // namespace moe::cuda

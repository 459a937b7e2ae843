// Compiled with THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP (see kernels/cuda/CMakeLists.txt).
#include "router/cuda/plan_omp.h"

#include <thrust/system/omp/execution_policy.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "router/cuda/plan_core.h"

namespace moe::cuda {

size_t plan_workspace_bytes_omp(const PlanShape& shape) {
  shape.validate();
  return PlanWorkspaceLayout(shape).bytes;
}

void plan_dispatch_omp(const PlanShape& shape, const PlanInputs& in, const PlanOutputs& out, void* workspace,
                       size_t workspace_bytes) {
  shape.validate();
  check_plan_args(shape, in, out);
  if (workspace_bytes < PlanWorkspaceLayout(shape).bytes) {
    throw std::invalid_argument("gpu planner: workspace of " + std::to_string(workspace_bytes) +
                                " bytes is below plan_workspace_bytes_omp()");
  }
  const auto& exec = thrust::omp::par;
  detail::run_plan(exec, detail::ThrustSorter<std::decay_t<decltype(exec)>>{exec}, shape, in, out, workspace);
}

ArrayPlanRunner omp_plan_runner() {
  return [](const PlanShape& shape, const PlanInputs& in, const PlanOutputs& out) {
    std::vector<std::byte> workspace(plan_workspace_bytes_omp(shape));
    plan_dispatch_omp(shape, in, out, workspace.data(), workspace.size());
  };
}

}  // namespace moe::cuda

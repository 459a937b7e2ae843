// The GPU planner (plan_dispatch) against the CPU DispatchPlanner: every field equal, weights bitwise.
// Also: the planned forward path captures into a CUDA graph and replays to the same plan.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "base/cuda/check.h"
#include "base/cuda/device_buffer.h"
#include "router/cuda/plan_dispatch.h"
#include "router/cuda/plan_host.h"
#include "router/dispatch_planner.h"
#include "tests/cuda_gpu_test_util.h"
#include "tests/cuda_plan_test_util.h"

namespace moe::cuda {
namespace {

ArrayPlanRunner GpuRunner() {
  return [](const PlanShape& shape, const PlanInputs& in, const PlanOutputs& out) {
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    plan_dispatch_from_host(shape, in, out, stream);
    CUDA_CHECK(cudaStreamDestroy(stream));
  };
}

TEST(CudaPlanGpu, EqualsCpuPlannerOnRandomBatches) {
  MOE_REQUIRE_GPU();
  std::mt19937_64 rng(11);
  const int token_counts[] = {0, 1, 5, 64, 300, 2048};
  const int shapes[][2] = {{1, 1}, {8, 2}, {16, 4}, {64, 6}, {256, 8}};
  int n = 0;
  for (int scope = 0; scope < 5; ++scope) {
    for (int priority = 0; priority < 4; ++priority) {
      for (int overflow = 0; overflow < 2; ++overflow) {
        for (const auto& shape : shapes) {
          for (int T : token_counts) {
            DispatchPolicy policy;
            policy.scope = static_cast<CapacityScope>(scope);
            policy.priority = static_cast<Priority>(priority);
            policy.overflow = static_cast<Overflow>(overflow);
            policy.capacity_factor = 0.5 + 0.25 * static_cast<double>(rng() % 5);
            policy.reroute_depth = 1 + static_cast<int>(rng() % 3);
            policy.seed = rng();
            policy.renormalize_survivors = rng() % 2 == 0;
            const int E = shape[0], k = shape[1];
            DispatchPlanner cpu(E, k, policy);
            ArrayPlanner gpu(E, k, policy, GpuRunner());
            TokenRoutes routes = testing::RandomRoutes(rng, T, E, k, cpu.num_ranked_needed(), 0.7, 0.1);
            std::vector<TokenMeta> meta =
                testing::RandomMeta(rng, T, 1 + static_cast<int>(rng() % (T / 3 + 1)), nullptr);
            DispatchPlan want, got;
            cpu.plan(routes, meta, nullptr, want);
            gpu.plan(routes, meta, nullptr, got);
            testing::ExpectSamePlan(want, got, testing::Describe(policy, E, k, T, n++));
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST(CudaPlanGpu, CausalStateAcrossCalls) {
  MOE_REQUIRE_GPU();
  std::mt19937_64 rng(5);
  DispatchPolicy policy;
  policy.scope = CapacityScope::kCausal;
  policy.overflow = Overflow::kReroute;
  policy.capacity_factor = 0.75;
  const int E = 16, k = 2;
  DispatchPlanner cpu(E, k, policy);
  ArrayPlanner gpu(E, k, policy, GpuRunner());
  RoutingState cpu_state(E), gpu_state(E);
  std::vector<uint64_t> ids = {3, 1000000007ull, 42};
  std::vector<uint32_t> next(3, 0);
  for (int call = 0; call < 6; ++call) {
    std::vector<TokenMeta> meta = testing::RandomMeta(rng, call < 3 ? 50 : 3, 3, &ids, &next);
    if (call >= 3) {
      meta.clear();
      for (int r = 0; r < 3; ++r) meta.push_back(TokenMeta{ids[r], next[r]});
    }
    TokenRoutes routes =
        testing::RandomRoutes(rng, static_cast<int>(meta.size()), E, k, cpu.num_ranked_needed(), 0.8, 0.0);
    DispatchPlan want, got;
    cpu.plan(routes, meta, &cpu_state, want);
    gpu.plan(routes, meta, &gpu_state, got);
    testing::ExpectSamePlan(want, got, "call " + std::to_string(call));
    for (int r = 0; r < 3; ++r) {
      ASSERT_NE(gpu_state.find(ids[r]), nullptr);
      EXPECT_EQ(cpu_state.find(ids[r])->slots_held, gpu_state.find(ids[r])->slots_held);
      next[r] = cpu_state.find(ids[r])->next_position;
      EXPECT_EQ(next[r], gpu_state.find(ids[r])->next_position);
    }
  }
}

TEST(CudaPlanGpu, RejectsWhatTheCpuRejects) {
  MOE_REQUIRE_GPU();
  std::mt19937_64 rng(3);
  const int E = 8, k = 2;
  TokenRoutes routes = testing::RandomRoutes(rng, 4, E, k, k, 0.0, 0.0);
  {
    const DispatchPolicy policy = DispatchPolicy::mode("stable");
    const std::vector<TokenMeta> meta = {{1, 0}, {2, 0}, {1, 0}, {2, 1}};
    ArrayPlanner gpu(E, k, policy, GpuRunner());
    DispatchPlan plan;
    EXPECT_THROW(gpu.plan(routes, meta, nullptr, plan), std::invalid_argument);
  }
  {
    DispatchPolicy policy;
    policy.scope = CapacityScope::kCausal;
    ArrayPlanner gpu(E, k, policy, GpuRunner());
    RoutingState state(E);
    DispatchPlan plan;
    gpu.plan(routes, std::vector<TokenMeta>{{9, 0}, {9, 1}, {4, 0}, {4, 1}}, &state, plan);
    const std::vector<int32_t> held = state.find(9)->slots_held;
    EXPECT_THROW(gpu.plan(routes, std::vector<TokenMeta>{{9, 2}, {9, 3}, {4, 1}, {4, 2}}, &state, plan),
                 std::invalid_argument);
    EXPECT_EQ(state.find(9)->next_position, 2u);  // untouched by the failed call
    EXPECT_EQ(state.find(9)->slots_held, held);
  }
}

// plan_dispatch neither synchronises nor allocates: it must capture into a graph, and replays must give the
// plan of a direct call, bit for bit.
TEST(CudaPlanGpu, CapturesIntoAGraph) {
  MOE_REQUIRE_GPU();
  std::mt19937_64 rng(8);
  const int T = 4096, E = 64, k = 4;
  DispatchPolicy policy = DispatchPolicy::mode("stable");
  policy.overflow = Overflow::kReroute;
  PlanShape shape{T, E, k, k + 1, policy};
  TokenRoutes routes = testing::RandomRoutes(rng, T, E, k, k + 1, 0.8, 0.05);
  std::vector<TokenMeta> meta = testing::RandomMeta(rng, T, 40, nullptr);

  DeviceBuffer<int32_t> experts(routes.experts.size());
  DeviceBuffer<float> weights(routes.weights.size()), top1(T);
  DeviceBuffer<TokenMeta> d_meta(T);
  experts.upload(routes.experts);
  weights.upload(routes.weights);
  top1.upload(routes.top1_score);
  d_meta.upload(meta);
  PlanInputs in;
  in.num_tokens = T;
  in.route_experts = experts.data();
  in.route_weights = weights.data();
  in.top1_score = top1.data();
  in.meta = d_meta.data();
  const size_t P = static_cast<size_t>(T) * k;
  auto make_outputs = [&](std::vector<DeviceBuffer<std::byte>>& keep) {
    auto buf = [&](size_t bytes) {
      keep.emplace_back(bytes);
      return static_cast<void*>(keep.back().data());
    };
    PlanOutputs o;
    o.pair_expert = static_cast<int32_t*>(buf(P * 4));
    o.pair_slot = static_cast<int32_t*>(buf(P * 4));
    o.pair_weight = static_cast<float*>(buf(P * 4));
    o.pair_status = static_cast<PairStatus*>(buf(P));
    o.expert_load = static_cast<int32_t*>(buf(E * 4));
    o.expert_capacity = static_cast<int64_t*>(buf(E * 8));
    o.expert_offsets = static_cast<int32_t*>(buf((E + 1) * 4));
    o.slot_pairs = static_cast<int32_t*>(buf(P * 4));
    o.counts = static_cast<int64_t*>(buf(32));
    o.error = static_cast<PlanError*>(buf(sizeof(PlanError)));
    return o;
  };
  std::vector<DeviceBuffer<std::byte>> keep_a, keep_b;
  keep_a.reserve(16);
  keep_b.reserve(16);
  const PlanOutputs direct = make_outputs(keep_a), graphed = make_outputs(keep_b);
  DeviceBuffer<std::byte> workspace(plan_workspace_bytes(shape));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  plan_dispatch(shape, in, direct, workspace.data(), workspace.size(), stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));

  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  plan_dispatch(shape, in, graphed, workspace.data(), workspace.size(), stream);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  for (size_t i = 0; i < keep_a.size(); ++i) {
    const std::vector<std::byte> a = keep_a[i].download(), b = keep_b[i].download();
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size())) << "output buffer " << i;
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace moe::cuda

// The whole GPU MoE path with no host round trip between steps: top-k gating -> planning -> gather ->
// invariant SwiGLU experts -> combine, all on one stream from device arrays, against the CPU router and
// planner with a float64 expert reference. Checks the launchers compose (shapes, layouts, workspaces) and
// that the GPU plan from GPU routes equals the CPU plan from CPU routes (experts and slots exactly).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "router/cuda/plan_dispatch.h"
#include "router/cuda/topk.h"
#include "router/topk_router.h"
#include "tests/cuda_ffn_test_util.h"
#include "tests/cuda_gpu_test_util.h"

namespace moe::cuda {
namespace {

TEST(CudaMoePipelineGpu, RoutePlanFfnCombineOnOneStream) {
  MOE_REQUIRE_GPU();
  std::mt19937_64 rng(31);
  const int T = 333, d = 96, f = 160;
  RouterConfig config = RouterConfig::preset("mixtral");
  const int E = config.num_experts, k = config.top_k;
  auto ex = testing::RandomExperts(rng, E, d, f, kernels::DType::kBF16);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T) * d), logits(static_cast<size_t>(T) * E);
  for (float& v : x) v = normal(rng);
  for (float& v : logits) v = normal(rng);
  std::vector<TokenMeta> meta(T);
  for (int t = 0; t < T; ++t) meta[t] = TokenMeta{static_cast<uint64_t>(t % 5), static_cast<uint32_t>(t / 5)};
  const DispatchPolicy policy = DispatchPolicy::mode("stable");

  // CPU reference: router, planner, float64 experts.
  TopKRouter router(config);
  TokenRoutes routes;
  router.route(logits.data(), T, routes);
  DispatchPlanner planner(E, k, policy);
  DispatchPlan want;
  planner.plan(routes, meta, nullptr, want);
  const std::vector<double> ref = testing::ReferenceMoe(*ex, x, want);

  // GPU: everything on one stream from device arrays.
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const TopKParams params = topk_params(config, 0, nullptr);
  const size_t P = static_cast<size_t>(T) * k;
  DeviceBuffer<float> d_logits(logits.size()), d_x(x.size()), weights(P), top1(T), pair_weight(P);
  DeviceBuffer<int32_t> experts(P), error_row(1), pair_expert(P), pair_slot(P), load(E), offsets(E + 1),
      slot_pairs(P);
  DeviceBuffer<TokenMeta> d_meta(T);
  DeviceBuffer<PairStatus> status(P);
  DeviceBuffer<int64_t> capacity(E), counts(4);
  DeviceBuffer<PlanError> error(1);
  d_logits.upload(logits);
  d_x.upload(x);
  d_meta.upload(meta);
  topk_route(params, d_logits.data(), T, experts.data(), weights.data(), top1.data(), error_row.data(),
             stream);

  const PlanShape shape{T, E, k, params.num_ranked, policy};
  PlanInputs in;
  in.num_tokens = T;
  in.route_experts = experts.data();
  in.route_weights = weights.data();
  in.top1_score = top1.data();
  in.meta = d_meta.data();
  const PlanOutputs out{pair_expert.data(), pair_slot.data(), pair_weight.data(), status.data(),
                        load.data(),        capacity.data(),  offsets.data(),     slot_pairs.data(),
                        counts.data(),      error.data()};
  DeviceBuffer<std::byte> plan_ws(plan_workspace_bytes(shape));
  plan_dispatch(shape, in, out, plan_ws.data(), plan_ws.size(), stream);

  const int max_rows = static_cast<int>(P);
  DeviceBuffer<float> x_rows(P * d), y_rows(P * d), y(static_cast<size_t>(T) * d);
  DeviceBuffer<std::byte> ffn_ws(expert_ffn_invariant_workspace_bytes(E, max_rows, f));
  gather_rows(d_x.data(), d, slot_pairs.data(), offsets.data(), E, k, max_rows, x_rows.data(), stream);
  expert_ffn_invariant(ex->view(), x_rows.data(), offsets.data(), max_rows, y_rows.data(), ffn_ws.data(),
                       ffn_ws.size(), stream);
  combine_rows(y_rows.data(), d, pair_expert.data(), pair_slot.data(), pair_weight.data(), offsets.data(), T,
               k, y.data(), stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));

  PlanError err;
  error.download(&err, 1);
  ASSERT_EQ(err.code, kPlanOk);
  EXPECT_EQ(pair_expert.download(), want.pair_expert);
  EXPECT_EQ(pair_slot.download(), want.pair_slot);
  EXPECT_EQ(offsets.download(), want.expert_offsets);
  const std::vector<float> got = y.download();
  double max_err = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_err = std::max(max_err, std::fabs(static_cast<double>(got[i]) - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  EXPECT_LT(max_err / scale, 1e-5);  // router weights may differ from the CPU's by a few ulp (expf)
  std::printf("[ info ] pipeline relative error %.3g\n", max_err / scale);
}

}  // namespace
}  // namespace moe::cuda

// Shared pieces of the expert FFN GPU tests: random experts, plans, the float64 reference, and one helper
// that runs gather -> expert FFN -> combine on the device.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "base/cuda/check.h"
#include "base/cuda/device_buffer.h"
#include "kernels/bf16.h"
#include "kernels/cuda/expert_ffn.h"
#include "router/dispatch_planner.h"

namespace moe::cuda::testing {

// Host experts (float values, already representable in the storage type) and their device copies.
struct Experts {
  int E = 0, hidden = 0, ffn = 0;
  kernels::DType type = kernels::DType::kF32;
  std::vector<float> w1, w3, w2;  // [E][ffn][hidden], [E][ffn][hidden], [E][hidden][ffn]
  DeviceBuffer<std::byte> d_w1, d_w3, d_w2;

  ExpertWeightsView view() const {
    return ExpertWeightsView{type, E, hidden, ffn, d_w1.data(), d_w3.data(), d_w2.data()};
  }
};

inline std::unique_ptr<Experts> RandomExperts(std::mt19937_64& rng, int E, int hidden, int ffn,
                                              kernels::DType type) {
  auto ex = std::make_unique<Experts>();
  ex->E = E;
  ex->hidden = hidden;
  ex->ffn = ffn;
  ex->type = type;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& w, size_t n, float scale, DeviceBuffer<std::byte>& d) {
    w.resize(n);
    for (float& v : w) {
      v = normal(rng) * scale;
      if (type == kernels::DType::kBF16) v = kernels::round_to_bf16(v);
    }
    if (type == kernels::DType::kF32) {
      d = DeviceBuffer<std::byte>(n * 4);
      CUDA_CHECK(cudaMemcpy(d.data(), w.data(), n * 4, cudaMemcpyHostToDevice));
    } else {
      std::vector<uint16_t> bits(n);
      for (size_t i = 0; i < n; ++i) bits[i] = kernels::f32_to_bf16(w[i]);
      d = DeviceBuffer<std::byte>(n * 2);
      CUDA_CHECK(cudaMemcpy(d.data(), bits.data(), n * 2, cudaMemcpyHostToDevice));
    }
  };
  const size_t n1 = static_cast<size_t>(E) * ffn * hidden;
  fill(ex->w1, n1, 1.0f / std::sqrt(static_cast<float>(hidden)), ex->d_w1);
  fill(ex->w3, n1, 1.0f / std::sqrt(static_cast<float>(hidden)), ex->d_w3);
  fill(ex->w2, n1, 1.0f / std::sqrt(static_cast<float>(ffn)), ex->d_w2);
  return ex;
}

// y = sum_j w_j * FFN_{e_j}(x) in float64, dropped pairs adding nothing.
inline std::vector<double> ReferenceMoe(const Experts& ex, const std::vector<float>& x,
                                        const DispatchPlan& plan) {
  const int d = ex.hidden, f = ex.ffn, k = plan.top_k;
  std::vector<double> y(static_cast<size_t>(plan.num_tokens) * d, 0.0), h(f);
  for (int t = 0; t < plan.num_tokens; ++t) {
    for (int j = 0; j < k; ++j) {
      const int64_t p = static_cast<int64_t>(t) * k + j;
      const int e = plan.pair_expert[p];
      if (e < 0) continue;
      const float* xt = x.data() + static_cast<size_t>(t) * d;
      for (int i = 0; i < f; ++i) {
        double g = 0, u = 0;
        const float* w1 = ex.w1.data() + (static_cast<size_t>(e) * f + i) * d;
        const float* w3 = ex.w3.data() + (static_cast<size_t>(e) * f + i) * d;
        for (int c = 0; c < d; ++c) {
          g += static_cast<double>(w1[c]) * xt[c];
          u += static_cast<double>(w3[c]) * xt[c];
        }
        h[i] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int o = 0; o < d; ++o) {
        const float* w2 = ex.w2.data() + (static_cast<size_t>(e) * d + o) * f;
        double acc = 0;
        for (int i = 0; i < f; ++i) acc += static_cast<double>(w2[i]) * h[i];
        y[static_cast<size_t>(t) * d + o] += static_cast<double>(plan.pair_weight[p]) * acc;
      }
    }
  }
  return y;
}

enum class Kind { kInvariant, kFast };

// gather -> expert FFN (kind) -> combine on the device, for a CPU plan; returns y [T, hidden].
// `extra_rows` pads max_rows (and so the launch grid), which must not change invariant results.
inline std::vector<float> RunMoe(Kind kind, const Experts& ex, const std::vector<float>& x,
                                 const DispatchPlan& plan, int extra_rows = 0) {
  const int T = plan.num_tokens, k = plan.top_k, d = ex.hidden, E = ex.E;
  const int max_rows = T * k + extra_rows;
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer<float> d_x(x.size()), x_rows(static_cast<size_t>(max_rows) * d + 1),
      y_rows(static_cast<size_t>(max_rows) * d + 1), y(static_cast<size_t>(T) * d + 1),
      pw(plan.pair_weight.size());
  DeviceBuffer<int32_t> pe(plan.pair_expert.size()), ps(plan.pair_slot.size()), off(E + 1),
      sp(plan.slot_pairs.size() + 1);
  d_x.upload(x);
  pw.upload(plan.pair_weight);
  pe.upload(plan.pair_expert);
  ps.upload(plan.pair_slot);
  off.upload(plan.expert_offsets);
  sp.upload(plan.slot_pairs);
  gather_rows(d_x.data(), d, sp.data(), off.data(), E, k, max_rows, x_rows.data(), stream);
  if (kind == Kind::kInvariant) {
    DeviceBuffer<std::byte> ws(expert_ffn_invariant_workspace_bytes(E, max_rows, ex.ffn));
    expert_ffn_invariant(ex.view(), x_rows.data(), off.data(), max_rows, y_rows.data(), ws.data(), ws.size(),
                         stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
  } else {
    CublasExpertFfn fast(ex.view(), max_rows);
    fast.forward(x_rows.data(), off.data(), y_rows.data(), stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  combine_rows(y_rows.data(), d, pe.data(), ps.data(), pw.data(), off.data(), T, k, y.data(), stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> out(static_cast<size_t>(T) * d);
  y.download(out.data(), out.size());
  CUDA_CHECK(cudaStreamDestroy(stream));
  return out;
}

// Random routes with distinct experts per token and positive weights.
inline TokenRoutes RandomFfnRoutes(std::mt19937_64& rng, int T, int E, int k) {
  TokenRoutes routes;
  routes.resize(T, E, k, k);
  std::vector<int> ids(E);
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  for (int t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) ids[e] = e;
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int j = 0; j < k; ++j) {
      routes.experts[static_cast<size_t>(t) * k + j] = ids[j];
      routes.weights[static_cast<size_t>(t) * k + j] = u(rng);
    }
    routes.top1_score[t] = routes.weights[static_cast<size_t>(t) * k];
  }
  return routes;
}

// The routes (and metadata) of the given rows, in that order.
inline TokenRoutes SliceRoutes(const TokenRoutes& all, const std::vector<int>& rows) {
  TokenRoutes out;
  out.resize(static_cast<int>(rows.size()), all.num_experts, all.top_k, all.num_ranked);
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int r = 0; r < all.num_ranked; ++r) {
      out.experts[i * all.num_ranked + r] = all.expert(rows[i], r);
      out.weights[i * all.num_ranked + r] = all.weight(rows[i], r);
    }
    out.top1_score[i] = all.top1_score[rows[i]];
  }
  return out;
}

inline DispatchPlan PlanFor(const TokenRoutes& routes, const DispatchPolicy& policy) {
  std::vector<TokenMeta> meta(routes.num_tokens);
  for (int t = 0; t < routes.num_tokens; ++t) meta[t] = TokenMeta{static_cast<uint64_t>(t), 0};
  DispatchPlanner planner(routes.num_experts, routes.top_k, policy);
  DispatchPlan plan;
  planner.plan(routes, meta, nullptr, plan);
  return plan;
}

}  // namespace moe::cuda::testing

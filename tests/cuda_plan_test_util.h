// Random batches and plan comparison shared by the planner tests (OpenMP backend and GPU).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "router/dispatch_plan.h"
#include "router/dispatch_policy.h"
#include "router/token_meta.h"
#include "router/token_routes.h"

namespace moe::cuda::testing {

struct Batch {
  TokenRoutes routes;
  std::vector<TokenMeta> meta;
};

// Routes with a hot expert (skew) so capacities overflow; ranks are distinct experts, with unavailable
// ranks (-1) as a suffix on some rows; top-1 scores drawn from few values so score ties occur.
inline TokenRoutes RandomRoutes(std::mt19937_64& rng, int T, int E, int k, int R, double skew,
                                double unavailable) {
  TokenRoutes routes;
  routes.resize(T, E, k, R);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int> experts(E);
  for (int t = 0; t < T; ++t) {
    std::iota(experts.begin(), experts.end(), 0);
    std::shuffle(experts.begin(), experts.end(), rng);
    // Skew: move low ids (hot experts) towards the front with probability `skew`.
    for (int r = 0; r < E; ++r) {
      if (u(rng) < skew) {
        auto it = std::min_element(experts.begin() + r, experts.end());
        std::iter_swap(experts.begin() + r, it);
      }
    }
    int available = R;
    if (u(rng) < unavailable) available = static_cast<int>(rng() % (R + 1));
    if (available == 0 && u(rng) < 0.5) available = 1;
    for (int r = 0; r < R; ++r) {
      const bool ok = r < available;
      routes.experts[t * R + r] = ok ? experts[r] : -1;
      routes.weights[t * R + r] = ok ? static_cast<float>(u(rng)) / static_cast<float>(r + 1) : 0.0f;
    }
    const int level = static_cast<int>(rng() % 7);
    const float scores[7] = {0.5f, 0.25f, 0.0f, -0.0f, 0.125f, -0.5f, 1.0f};
    routes.top1_score[t] = u(rng) < 0.5 ? scores[level] : static_cast<float>(u(rng));
  }
  return routes;
}

// Distinct (request_id, position) with contiguous positions from `start[r]`, rows shuffled.
inline std::vector<TokenMeta> RandomMeta(std::mt19937_64& rng, int T, int num_requests,
                                         std::vector<uint64_t>* ids_out,
                                         const std::vector<uint32_t>* start = nullptr) {
  std::vector<uint64_t> ids;
  while (static_cast<int>(ids.size()) < num_requests) {
    const uint64_t id = (rng() % 4 == 0) ? rng() : rng() % 1000;  // some huge, some small ids
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  if (ids_out) {
    if (ids_out->empty()) {
      *ids_out = ids;
    } else {
      ids = *ids_out;
    }
  }
  std::vector<uint32_t> next(num_requests, 0);
  if (start) next = *start;
  std::vector<TokenMeta> meta(T);
  for (int t = 0; t < T; ++t) {
    const int r = static_cast<int>(rng() % num_requests);
    meta[t] = TokenMeta{ids[r], next[r]++};
  }
  std::shuffle(meta.begin(), meta.end(), rng);
  // Shuffling breaks causal order within a request only in row order, which every scope allows.
  return meta;
}

inline void ExpectSamePlan(const DispatchPlan& cpu, const DispatchPlan& gpu, const std::string& what) {
  ASSERT_EQ(cpu.num_tokens, gpu.num_tokens) << what;
  ASSERT_EQ(cpu.top_k, gpu.top_k) << what;
  ASSERT_EQ(cpu.num_experts, gpu.num_experts) << what;
  EXPECT_EQ(cpu.batch_capacity, gpu.batch_capacity) << what;
  EXPECT_EQ(cpu.pair_expert, gpu.pair_expert) << what;
  EXPECT_EQ(cpu.pair_slot, gpu.pair_slot) << what;
  ASSERT_EQ(cpu.pair_weight.size(), gpu.pair_weight.size()) << what;
  EXPECT_EQ(
      0, std::memcmp(cpu.pair_weight.data(), gpu.pair_weight.data(), cpu.pair_weight.size() * sizeof(float)))
      << what << ": weights differ bitwise";
  EXPECT_EQ(cpu.pair_status, gpu.pair_status) << what;
  EXPECT_EQ(cpu.expert_load, gpu.expert_load) << what;
  EXPECT_EQ(cpu.expert_capacity, gpu.expert_capacity) << what;
  EXPECT_EQ(cpu.expert_offsets, gpu.expert_offsets) << what;
  EXPECT_EQ(cpu.slot_pairs, gpu.slot_pairs) << what;
  EXPECT_EQ(cpu.num_kept, gpu.num_kept) << what;
  EXPECT_EQ(cpu.num_rerouted, gpu.num_rerouted) << what;
  EXPECT_EQ(cpu.num_dropped, gpu.num_dropped) << what;
  EXPECT_EQ(cpu.num_tokens_fully_dropped, gpu.num_tokens_fully_dropped) << what;
}

inline std::string Describe(const DispatchPolicy& p, int E, int k, int T, int seed) {
  return std::string(to_string(p.scope)) + "/" + std::string(to_string(p.priority)) + "/" +
         std::string(to_string(p.overflow)) + " depth " + std::to_string(p.reroute_depth) + " cf " +
         std::to_string(p.capacity_factor) + " " + std::string(to_string(p.rounding)) + " min " +
         std::to_string(p.min_capacity) + (p.renormalize_survivors ? " renorm" : "") + " E " +
         std::to_string(E) + " k " + std::to_string(k) + " T " + std::to_string(T) + " case " +
         std::to_string(seed);
}

}  // namespace moe::cuda::testing

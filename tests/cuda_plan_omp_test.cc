// The GPU planner's algorithm (router/cuda/plan_core.h), run on Thrust's OpenMP backend, against the CPU
// DispatchPlanner: every field of the plan must be equal (weights bitwise) for random batches over every
// scope x priority x overflow, skewed routing that forces overflow, shuffled rows and unavailable ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "router/cuda/plan_bits.h"
#include "router/cuda/plan_host.h"
#include "router/cuda/plan_omp.h"
#include "router/dispatch_planner.h"
#include "router/rules/sort_keys.h"
#include "tests/cuda_plan_test_util.h"
#include "tests/support/serving_planner.h"

namespace moe::cuda {
namespace {

using testing::Describe;
using testing::ExpectSamePlan;
using testing::RandomMeta;
using testing::RandomRoutes;

struct ShapeCase {
  int E, k;
};

TEST(CudaPlanOmp, EqualsCpuPlannerOnRandomBatches) {
  const CapacityScope scopes[] = {CapacityScope::kBatch, CapacityScope::kRequest, CapacityScope::kCausal,
                                  CapacityScope::kSequence, CapacityScope::kNone};
  const Priority priorities[] = {Priority::kArrival, Priority::kRequest, Priority::kScore, Priority::kRandom};
  const Overflow overflows[] = {Overflow::kDrop, Overflow::kReroute};
  const ShapeCase shapes[] = {{1, 1}, {4, 2}, {8, 2}, {16, 4}, {64, 6}, {256, 8}};
  const int token_counts[] = {0, 1, 2, 7, 33, 130, 400};
  std::mt19937_64 rng(20261129);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int batches = 0;
  int64_t rerouted = 0, dropped = 0;
  for (CapacityScope scope : scopes) {
    for (Priority priority : priorities) {
      for (Overflow overflow : overflows) {
        for (const ShapeCase& shape : shapes) {
          for (int T : token_counts) {
            for (int rep = 0; rep < 3; ++rep) {
              DispatchPolicy policy;
              policy.scope = scope;
              policy.priority = priority;
              policy.overflow = overflow;
              const double cfs[] = {0.5, 1.0, 1.1, 1.25, 2.0};
              policy.capacity_factor = cfs[rng() % 5];
              policy.rounding = rng() % 2 ? CapacityRounding::kCeil : CapacityRounding::kFloor;
              policy.min_capacity = rng() % 4 == 0 ? static_cast<int>(rng() % 3) : 0;
              policy.reroute_depth = 1 + static_cast<int>(rng() % 3);
              policy.seed = rng();
              policy.renormalize_survivors = rng() % 2 == 0;
              const int E = shape.E, k = shape.k;
              DispatchPlanner cpu(E, k, policy);
              ArrayPlanner gpu(E, k, policy, omp_plan_runner());
              const int R =
                  cpu.num_ranked_needed() + static_cast<int>(rng() % 2 && cpu.num_ranked_needed() < E);
              const double skew = rep == 0 ? 0.0 : (rep == 1 ? 0.6 : 0.95);
              testing::Batch b;
              b.routes = RandomRoutes(rng, T, E, k, R, skew, 0.15);
              const int num_requests = 1 + static_cast<int>(rng() % std::max(1, T / 2 + 1));
              b.meta = RandomMeta(rng, T, num_requests, nullptr);
              const std::string what = Describe(policy, E, k, T, batches);
              DispatchPlan want, got;
              cpu.plan(b.routes, b.meta, nullptr, want);
              gpu.plan(b.routes, b.meta, nullptr, got);
              ExpectSamePlan(want, got, what);
              if (::testing::Test::HasFailure()) return;
              ++batches;
              rerouted += want.num_rerouted;
              dropped += want.num_dropped;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(batches, 4000);
  EXPECT_GT(rerouted, 1000);  // the cases exercise overflow, not just the easy path
  EXPECT_GT(dropped, 1000);
}

// Many more small batches with heavy overflow, where rerouting and pool boundaries matter most.
TEST(CudaPlanOmp, EqualsCpuPlannerUnderHeavyOverflow) {
  std::mt19937_64 rng(7);
  for (int n = 0; n < 1500; ++n) {
    DispatchPolicy policy;
    policy.scope = static_cast<CapacityScope>(rng() % 5);
    policy.priority = static_cast<Priority>(rng() % 4);
    policy.overflow = rng() % 3 ? Overflow::kReroute : Overflow::kDrop;
    policy.capacity_factor = 0.25 + 0.25 * static_cast<double>(rng() % 6);
    policy.reroute_depth = 1 + static_cast<int>(rng() % 4);
    policy.seed = rng();
    policy.renormalize_survivors = rng() % 2 == 0;
    const int E = 2 + static_cast<int>(rng() % 12);
    const int k = 1 + static_cast<int>(rng() % std::min(E, 4));
    const int T = static_cast<int>(rng() % 60);
    DispatchPlanner cpu(E, k, policy);
    ArrayPlanner gpu(E, k, policy, omp_plan_runner());
    const int R = cpu.num_ranked_needed();
    TokenRoutes routes = RandomRoutes(rng, T, E, k, R, 0.9, 0.3);
    std::vector<TokenMeta> meta = RandomMeta(rng, T, 1 + static_cast<int>(rng() % 6), nullptr);
    if (n % 3 == 0) {
      // Rows already in (request_id, position) order: the CPU planner's no-sort path.
      std::sort(meta.begin(), meta.end(), [](const TokenMeta& a, const TokenMeta& b) {
        return a.request_id != b.request_id ? a.request_id < b.request_id : a.position < b.position;
      });
    }
    DispatchPlan want, got;
    cpu.plan(routes, meta, nullptr, want);
    gpu.plan(routes, meta, nullptr, got);
    ExpectSamePlan(want, got, Describe(policy, E, k, T, n));
    if (::testing::Test::HasFailure()) return;
  }
}

// Large batches: wider sort keys (more pools, more pairs) than the small cases reach.
TEST(CudaPlanOmp, EqualsCpuPlannerOnLargeBatches) {
  std::mt19937_64 rng(41);
  for (int n = 0; n < 20; ++n) {
    DispatchPolicy policy;
    policy.scope = static_cast<CapacityScope>(n % 5);
    policy.priority = static_cast<Priority>((n / 4) % 4);
    policy.overflow = n % 3 ? Overflow::kReroute : Overflow::kDrop;
    policy.reroute_depth = 2;
    policy.seed = rng();
    const int E = 256, k = 8, T = n % 2 ? 5000 : 2048;
    DispatchPlanner cpu(E, k, policy);
    ArrayPlanner gpu(E, k, policy, omp_plan_runner());
    TokenRoutes routes = RandomRoutes(rng, T, E, k, cpu.num_ranked_needed(), 0.7, 0.02);
    std::vector<TokenMeta> meta = RandomMeta(rng, T, n % 2 ? 3000 : 17, nullptr);
    DispatchPlan want, got;
    cpu.plan(routes, meta, nullptr, want);
    gpu.plan(routes, meta, nullptr, got);
    ExpectSamePlan(want, got, Describe(policy, E, k, T, n));
    if (::testing::Test::HasFailure()) return;
  }
}

// Causal scope across calls: prompts chunked into several forward passes, then decode steps, with the
// routing state carried by both planners; plans and states must agree after every call.
TEST(CudaPlanOmp, CausalStateAcrossCalls) {
  std::mt19937_64 rng(99);
  for (int scenario = 0; scenario < 40; ++scenario) {
    DispatchPolicy policy;
    policy.scope = CapacityScope::kCausal;
    policy.priority = static_cast<Priority>(rng() % 4);
    policy.overflow = rng() % 2 ? Overflow::kReroute : Overflow::kDrop;
    policy.capacity_factor = 0.5 + 0.25 * static_cast<double>(rng() % 4);
    policy.rounding = rng() % 2 ? CapacityRounding::kCeil : CapacityRounding::kFloor;
    policy.reroute_depth = 1 + static_cast<int>(rng() % 3);
    const int E = 4 + static_cast<int>(rng() % 13), k = 1 + static_cast<int>(rng() % 3);
    DispatchPlanner cpu(E, k, policy);
    ArrayPlanner gpu(E, k, policy, omp_plan_runner());
    RoutingState cpu_state(E), gpu_state(E);
    const int num_requests = 1 + static_cast<int>(rng() % 5);
    std::vector<uint64_t> ids;
    std::vector<uint32_t> next(num_requests, 0);
    for (int call = 0; call < 8; ++call) {
      if (ids.empty()) RandomMeta(rng, 0, num_requests, &ids);
      for (int r = 0; r < num_requests; ++r) {
        const auto* known = cpu_state.find(ids[r]);
        next[r] = known ? known->next_position : 0;
      }
      const int T = call < 3 ? static_cast<int>(rng() % 40) : num_requests;  // prefill chunks, then decode
      std::vector<TokenMeta> meta;
      if (call < 3) {
        meta = RandomMeta(rng, T, num_requests, &ids, &next);
      } else {
        for (int r = 0; r < num_requests; ++r) meta.push_back(TokenMeta{ids[r], next[r]});
        std::shuffle(meta.begin(), meta.end(), rng);
      }
      TokenRoutes routes =
          RandomRoutes(rng, static_cast<int>(meta.size()), E, k, cpu.num_ranked_needed(), 0.8, 0.1);
      DispatchPlan want, got;
      cpu.plan(routes, meta, &cpu_state, want);
      gpu.plan(routes, meta, &gpu_state, got);
      const std::string what = "scenario " + std::to_string(scenario) + " call " + std::to_string(call);
      ExpectSamePlan(want, got, what);
      ASSERT_EQ(cpu_state.num_requests(), gpu_state.num_requests()) << what;
      for (uint64_t id : ids) {
        const auto* a = cpu_state.find(id);
        const auto* b = gpu_state.find(id);
        ASSERT_EQ(a == nullptr, b == nullptr) << what;
        if (!a) continue;
        EXPECT_EQ(a->next_position, b->next_position) << what;
        EXPECT_EQ(a->slots_held, b->slots_held) << what;
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// Sequence scope under a serving engine's schedule: requests admitted with their prompt lengths (or a
// conversation's turn ends), prompts
// prefilled in chunks of random size, then decoded a row a step, co-batched in shuffled row order, finished
// requests released and new ones admitted. Both planners carry their own state; plans and every state field
// must agree after every call.
TEST(CudaPlanOmp, SequenceStateAcrossCalls) {
  std::mt19937_64 rng(1201);
  int calls = 0, conversations = 0;
  int64_t dropped = 0, rerouted = 0;
  for (int scenario = 0; scenario < 100; ++scenario) {
    DispatchPolicy policy = DispatchPolicy::mode("stable");
    if (scenario % 4 == 3) policy.priority = static_cast<Priority>(rng() % 4);  // sequence ignores it
    policy.overflow = rng() % 2 ? Overflow::kReroute : Overflow::kDrop;
    policy.capacity_factor = 0.5 + 0.25 * static_cast<double>(rng() % 6);
    policy.rounding = rng() % 2 ? CapacityRounding::kCeil : CapacityRounding::kFloor;
    policy.min_capacity = rng() % 4 == 0 ? static_cast<int>(rng() % 3) : 0;
    policy.reroute_depth = 1 + static_cast<int>(rng() % 3);
    policy.renormalize_survivors = rng() % 2 == 0;
    const uint32_t lookaheads[] = {0, 3, 16, 64};  // prefix scope (the stable mode); sequence scope below
    policy.lookahead = lookaheads[rng() % 4];
    if (scenario % 5 == 4) policy.scope = CapacityScope::kSequence;
    const int E = 2 + static_cast<int>(rng() % 15);
    const int k = 1 + static_cast<int>(rng() % std::min(E, 4));
    DispatchPlanner cpu(E, k, policy);
    ArrayPlanner gpu(E, k, policy, omp_plan_runner());
    RoutingState cpu_state(E, k), gpu_state(E, k);
    struct Live {
      uint64_t id;
      uint32_t prompt, next, end;
    };
    std::vector<Live> live;
    uint64_t next_id = rng() % 1000;
    for (int call = 0; call < 24; ++call) {
      for (int n = static_cast<int>(rng() % 3); n > 0; --n) {
        // One turn, or (half the time) a conversation's turn: earlier turns' prompts and answers, then the
        // new message (router/rules/turn_rules.h), whose chunks mix prompt and answer rows.
        std::vector<uint32_t> ends = {1 + static_cast<uint32_t>(rng() % 40)};
        for (int turn = rng() % 2 ? static_cast<int>(rng() % 3) : 0; turn > 0; --turn) {
          ends.push_back(ends.back() + 1 + static_cast<uint32_t>(rng() % 12));
          ends.push_back(ends.back() + 1 + static_cast<uint32_t>(rng() % 30));
        }
        conversations += ends.size() > 1;
        const uint32_t prompt = ends.back();
        live.push_back({next_id, prompt, 0, prompt + static_cast<uint32_t>(rng() % 5)});
        cpu_state.admit(next_id, ends);
        gpu_state.admit(next_id, ends);
        next_id += 1 + rng() % 3;
      }
      std::vector<TokenMeta> meta;
      for (Live& r : live) {
        const uint32_t n = r.next < r.prompt ? std::min(r.prompt - r.next, static_cast<uint32_t>(rng() % 20))
                                             : static_cast<uint32_t>(rng() % 2);
        for (uint32_t i = 0; i < n; ++i) meta.push_back(TokenMeta{r.id, r.next++});
      }
      std::shuffle(meta.begin(), meta.end(), rng);
      TokenRoutes routes =
          RandomRoutes(rng, static_cast<int>(meta.size()), E, k, cpu.num_ranked_needed(), 0.8, 0.1);
      DispatchPlan want, got;
      cpu.plan(routes, meta, &cpu_state, want);
      gpu.plan(routes, meta, &gpu_state, got);
      const std::string what = "scenario " + std::to_string(scenario) + " call " + std::to_string(call) +
                               " " + Describe(policy, E, k, static_cast<int>(meta.size()), calls);
      ExpectSamePlan(want, got, what);
      ASSERT_EQ(cpu_state.num_requests(), gpu_state.num_requests()) << what;
      for (const Live& r : live) {
        const auto* a = cpu_state.find(r.id);
        const auto* b = gpu_state.find(r.id);
        ASSERT_TRUE(a && b) << what;
        EXPECT_EQ(a->prompt_length, b->prompt_length) << what;
        EXPECT_EQ(a->next_position, b->next_position) << what;
        EXPECT_EQ(a->slots_held, b->slots_held) << what;
        EXPECT_EQ(a->higher_choices, b->higher_choices) << what;
      }
      if (::testing::Test::HasFailure()) return;
      ++calls;
      dropped += want.num_dropped;
      rerouted += want.num_rerouted;
      for (size_t i = 0; i < live.size();) {
        if (live[i].next >= live[i].end) {
          cpu_state.release(live[i].id);
          gpu_state.release(live[i].id);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
    }
  }
  EXPECT_GE(calls, 2000);
  EXPECT_GT(dropped, 1000);  // capacity binds
  EXPECT_GT(rerouted, 100);
  EXPECT_GT(conversations, 200);
}

TEST(CudaPlanOmp, RejectsWhatTheCpuRejects) {
  std::mt19937_64 rng(3);
  const int E = 8, k = 2;
  TokenRoutes routes = RandomRoutes(rng, 4, E, k, k, 0.0, 0.0);
  // Duplicate (request, position) under request priority.
  {
    DispatchPolicy policy = DispatchPolicy::mode("stable");
    std::vector<TokenMeta> meta = {{1, 0}, {2, 0}, {1, 0}, {2, 1}};
    DispatchPlanner cpu(E, k, policy);
    ArrayPlanner gpu(E, k, policy, omp_plan_runner());
    DispatchPlan plan;
    EXPECT_THROW(cpu.plan(routes, meta, nullptr, plan), std::invalid_argument);
    EXPECT_THROW(gpu.plan(routes, meta, nullptr, plan), std::invalid_argument);
  }
  // Causal positions with a gap; the state must stay untouched.
  {
    DispatchPolicy policy;
    policy.scope = CapacityScope::kCausal;
    std::vector<TokenMeta> meta = {{5, 0}, {5, 1}, {6, 0}, {6, 2}};
    DispatchPlanner cpu(E, k, policy);
    ArrayPlanner gpu(E, k, policy, omp_plan_runner());
    RoutingState cpu_state(E), gpu_state(E);
    DispatchPlan plan;
    EXPECT_THROW(cpu.plan(routes, meta, &cpu_state, plan), std::invalid_argument);
    EXPECT_THROW(gpu.plan(routes, meta, &gpu_state, plan), std::invalid_argument);
    EXPECT_EQ(cpu_state.num_requests(), 0u);
    EXPECT_EQ(gpu_state.num_requests(), 0u);
  }
  // Causal batch that does not continue from the state's next position.
  {
    DispatchPolicy policy;
    policy.scope = CapacityScope::kCausal;
    DispatchPlanner cpu(E, k, policy);
    ArrayPlanner gpu(E, k, policy, omp_plan_runner());
    RoutingState cpu_state(E), gpu_state(E);
    DispatchPlan a, b;
    std::vector<TokenMeta> first = {{9, 0}, {9, 1}, {4, 0}, {4, 1}};
    cpu.plan(routes, first, &cpu_state, a);
    gpu.plan(routes, first, &gpu_state, b);
    ExpectSamePlan(a, b, "first chunk");
    std::vector<TokenMeta> again = {{9, 2}, {9, 3}, {4, 1}, {4, 2}};
    EXPECT_THROW(cpu.plan(routes, again, &cpu_state, a), std::invalid_argument);
    EXPECT_THROW(gpu.plan(routes, again, &gpu_state, b), std::invalid_argument);
    EXPECT_EQ(cpu_state.find(9)->next_position, 2u);
    EXPECT_EQ(gpu_state.find(9)->next_position, 2u);
  }
  // Sequence scope: a request not admitted, and a chunk that skips positions; the same message, no state
  // change.
  {
    const DispatchPolicy policy = DispatchPolicy::mode("stable");
    DispatchPlanner cpu(E, k, policy);
    ArrayPlanner gpu(E, k, policy, omp_plan_runner());
    RoutingState cpu_state(E, k), gpu_state(E, k);
    for (RoutingState* s : {&cpu_state, &gpu_state}) {
      s->admit(3, 6);
      s->admit(8, 2);
    }
    auto message = [&](auto& planner, RoutingState& state, const std::vector<TokenMeta>& meta) {
      DispatchPlan plan;
      try {
        planner.plan(routes, meta, &state, plan);
      } catch (const std::invalid_argument& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    const std::vector<TokenMeta> stranger = {{3, 0}, {3, 1}, {5, 0}, {8, 0}};
    const std::string not_admitted = message(cpu, cpu_state, stranger);
    EXPECT_NE(not_admitted.find("request 5"), std::string::npos) << not_admitted;
    EXPECT_NE(not_admitted.find("admitted"), std::string::npos) << not_admitted;
    EXPECT_EQ(message(gpu, gpu_state, stranger), not_admitted);
    const std::vector<TokenMeta> gap = {{3, 0}, {3, 2}, {8, 0}, {8, 1}};
    const std::string skipped = message(cpu, cpu_state, gap);
    EXPECT_NE(skipped.find("contiguous"), std::string::npos) << skipped;
    EXPECT_EQ(message(gpu, gpu_state, gap), skipped);
    for (RoutingState* s : {&cpu_state, &gpu_state}) {
      EXPECT_EQ(s->find(3)->next_position, 0u);
      EXPECT_EQ(s->find(3)->higher_choices, std::vector<int32_t>(static_cast<size_t>(k) * E, 0));
    }
  }
}

// The sort-key helpers the planner builds its keys from.
TEST(CudaPlanOmp, SortKeyHelpers) {
  // descending_key: higher floats sort first; +0 and -0 share a key.
  const float values[] = {-1e30f, -2.0f, -0.5f, -0.0f, 0.0f, 1e-30f, 0.5f, 2.0f, 1e30f};
  for (size_t i = 1; i < std::size(values); ++i)
    EXPECT_LE(rules::descending_key(values[i]), rules::descending_key(values[i - 1]));
  EXPECT_EQ(rules::descending_key(-0.0f), rules::descending_key(0.0f));
  EXPECT_EQ(bits_below(1), 0);
  EXPECT_EQ(bits_below(2), 1);
  EXPECT_EQ(bits_below(256), 8);
  EXPECT_EQ(bits_below(257), 9);
}

TEST(CudaPlanOmp, ShapeValidationNamesTheField) {
  PlanShape shape{16, 8, 9, 9, DispatchPolicy{}};
  try {
    shape.validate();
    FAIL() << "expected a throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("top_k (9)"), std::string::npos) << e.what();
  }
  PlanShape reroute{16, 8, 2, 2, DispatchPolicy{}};
  reroute.policy.overflow = Overflow::kReroute;
  EXPECT_THROW(reroute.validate(), std::invalid_argument);  // num_ranked below top_k + depth
  reroute.num_ranked = 3;
  EXPECT_NO_THROW(reroute.validate());
  EXPECT_GT(plan_workspace_bytes_omp(reroute), 0u);

  // Missing arrays are named before anything runs.
  PlanShape score{4, 8, 2, 2, DispatchPolicy{}};
  score.policy.priority = Priority::kScore;
  std::vector<int32_t> ints(64, 0);
  std::vector<float> floats(64, 0.0f);
  std::vector<TokenMeta> meta(4);
  std::vector<PairStatus> status(8);
  int64_t counts[4];
  int64_t capacity[8];
  PlanError error;
  PlanInputs in;
  in.num_tokens = 4;
  in.route_experts = ints.data();
  in.route_weights = floats.data();
  in.meta = meta.data();
  PlanOutputs out{ints.data(), ints.data(), floats.data(), status.data(), ints.data(),
                  capacity,    ints.data(), ints.data(),   counts,        &error};
  try {
    check_plan_args(score, in, out);
    FAIL() << "expected a throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("top1_score"), std::string::npos) << e.what();
  }
  in.num_tokens = 5;
  EXPECT_THROW(check_plan_args(score, in, out), std::invalid_argument);  // above max_tokens
}

// The serving engine's whole lifecycle on the GPU planner's algorithm (docs/determinism.md clause 2b): 2000
// served probes (the engine model of sim/serving: cached prefixes from other requests, preemption and
// recompute, speculative drafts partly rejected, strangers, shuffled rows; prefix scope with lookahead 0-64)
// planned by the OpenMP twin equal the CPU planner's probe alone.
TEST(CudaPlanOmp, ServedProbesEqualTheCpuPlannersProbeAlone) {
  const moe::testing::ServingTally t = moe::testing::ServeProbes(
      DispatchPolicy::mode("stable"), 2000, 91, {}, true, [](const DispatchPolicy& p) {
        return ArrayPlanner(moe::testing::kServingExperts, moe::testing::kServingTopK, p, omp_plan_runner());
      });
  EXPECT_EQ(t.mismatched, 0) << "trial " << t.first_mismatch << ": " << t.first_mismatch_trial;
  EXPECT_GT(t.probe_drops, 0);
  EXPECT_GT(t.cached, t.trials / 2);
  EXPECT_GT(t.preempted, t.trials / 10);
  EXPECT_GT(t.speculated, t.trials / 10);
}

}  // namespace
}  // namespace moe::cuda

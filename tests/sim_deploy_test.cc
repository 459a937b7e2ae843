// The deployment model (sim/deploy/): the step-time formulas by hand, row sizes, placements and loads files,
// and the accounting of planned steps - each pair's rank by the placement's replica rule (against its closed
// form, ExpertPlacement::rows_per_rank), the link classes of both all-to-all kinds, the rank capacity in the
// policy's order, the warm-up - on plans made by the planner from hand-written routes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "moe/parallel/eplb.h"
#include "router/dispatch_planner.h"
#include "sim/deploy/accounting.h"
#include "sim/deploy/deploy_config.h"
#include "sim/deploy/placement.h"
#include "sim/deploy/step_cost.h"
#include "sim/errors.h"
#include "sim/experiment.h"
#include "sim/rng.h"
#include "sim/sim_config.h"

namespace moe::sim::deploy {
namespace {

// A deployment of P ranks, G per node, on a toy model, its figures round numbers.
DeployConfig config(int P, int G) {
  DeployConfig c;
  c.ep_size = P;
  c.ranks_per_node = G;
  c.model = ModelShape{128, 64, 0, true, Dtype::kBf16};
  c.hardware = HardwareProfile{"test", 0, 100, 0, 1000, 100, 10, 5, 1, 2};
  c.hardware_name = "test";
  return c;
}

// A planned step: tokens' experts (k per token, in rank order), dropless.
struct Step {
  std::vector<TokenMeta> rows;
  TokenRoutes routes;
  DispatchPlan plan;
};

Step planned(const std::vector<std::vector<int>>& experts, int E,
             DispatchPolicy policy = DispatchPolicy::mode("greedy")) {
  Step s;
  const int T = static_cast<int>(experts.size()), k = static_cast<int>(experts[0].size());
  s.routes.resize(T, E, k, k);
  for (int t = 0; t < T; ++t) {
    s.rows.push_back(TokenMeta{static_cast<uint64_t>(t), 0});
    for (int j = 0; j < k; ++j) {
      s.routes.experts[static_cast<size_t>(t) * k + j] = experts[t][j];
      s.routes.weights[static_cast<size_t>(t) * k + j] = 1.0f / k;
    }
    s.routes.top1_score[t] = static_cast<float>(t);
  }
  DispatchPlanner planner(E, k, policy);
  planner.plan(s.routes, s.rows, nullptr, s.plan);
  return s;
}

DispatchPolicy dropless() {
  DispatchPolicy p = DispatchPolicy::mode("greedy");
  p.scope = CapacityScope::kNone;
  return p;
}

TEST(SimDeploy, RowBytes) {
  EXPECT_EQ(row_bytes(Dtype::kFp8, 7168), 7168 + 56 * 4);  // DeepEP's FP8 row: 1 scale per 128
  EXPECT_EQ(row_bytes(Dtype::kBf16, 7168), 14336);
  EXPECT_EQ(row_bytes(Dtype::kFp32, 10), 40);
  EXPECT_EQ(row_bytes(Dtype::kFp8, 129), 129 + 8);
  EXPECT_DOUBLE_EQ(element_bytes(Dtype::kMxfp4), 4.25 / 8);
}

TEST(SimDeploy, A2aSecondsByHand) {
  const HardwareProfile hw = config(2, 1).hardware;  // NVLink 100 GB/s, RDMA 10 GB/s, base 5, hops 1 / 2 us
  EXPECT_EQ(a2a_seconds(LinkRows{}, 1000, hw), 0.0);
  // 1000 rows of 1000 bytes over NVLink: 1e6 / 1e11 = 10 us, + 1 us hop + 5 us base.
  EXPECT_NEAR(a2a_seconds(LinkRows{1000, 10, 0, 0}, 1000, hw), 16e-6, 1e-12);
  // The received side counts as much as the sent one.
  EXPECT_NEAR(a2a_seconds(LinkRows{10, 1000, 0, 0}, 1000, hw), 16e-6, 1e-12);
  // RDMA at the same time: 100 rows -> 1e5 / 1e10 = 10 us + 2 us; the classes overlap (max), then the base.
  EXPECT_NEAR(a2a_seconds(LinkRows{1000, 0, 100, 0}, 1000, hw), 5e-6 + 12e-6, 1e-12);
  EXPECT_NEAR(a2a_seconds(LinkRows{0, 0, 0, 1000}, 1000, hw), 5e-6 + 102e-6, 1e-12);
}

TEST(SimDeploy, GemmRoofline) {
  const DeployConfig c = config(1, 1);
  // H 128, I 64, gated: 3 matrices of 8192 elements, bf16 weights: 49152 bytes per expert.
  // 1 row on 1 expert: flops 2*3*8192 = 49152 at 1e14/s -> 0.49 ns; bytes 49152 + 1*(256+256) at 1e12/s.
  EXPECT_NEAR(gemm_seconds(RankWork{1, 1, 0}, c.model, 256, 256, c.hardware), (49152.0 + 512) / 1e12, 1e-18);
  // 1e6 rows on one expert: compute-bound, 2*3*8192*1e6 / 1e14.
  EXPECT_NEAR(gemm_seconds(RankWork{1000000, 1, 0}, c.model, 0, 0, c.hardware), 49152e6 / 1e14, 1e-15);
  EXPECT_EQ(gemm_seconds(RankWork{0, 0, 5}, c.model, 256, 256, c.hardware), 0.0);  // no shared experts
  ModelShape shared = c.model;
  shared.shared_experts = 2;
  // 10 home tokens through 2 shared experts: 20 rows, 2 experts' weights read.
  EXPECT_NEAR(gemm_seconds(RankWork{0, 0, 10}, shared, 0, 0, c.hardware), 2 * 49152.0 / 1e12, 1e-18);
  ModelShape plain = c.model;
  plain.gated = false;
  EXPECT_NEAR(gemm_seconds(RankWork{1000000, 1, 0}, plain, 0, 0, c.hardware), 2 * 2 * 8192e6 / 1e14, 1e-15);
  // FP8 weights run at the FP8 rate where the GPU has one.
  HardwareProfile hw = c.hardware;
  hw.fp8_tflops = 200;
  EXPECT_DOUBLE_EQ(gemm_flops_per_second(Dtype::kFp8, hw), 200e12);
  EXPECT_DOUBLE_EQ(gemm_flops_per_second(Dtype::kBf16, hw), 100e12);
  EXPECT_DOUBLE_EQ(gemm_flops_per_second(Dtype::kMxfp4, hw), 200e12);
}

TEST(SimDeploy, PresetShapesAndProfiles) {
  const ModelShape v3 = ModelShape::of_preset("deepseek-v3");
  EXPECT_EQ(v3.hidden, 7168);
  EXPECT_EQ(v3.intermediate, 2048);
  EXPECT_EQ(v3.shared_experts, 1);
  EXPECT_EQ(v3.weights, Dtype::kFp8);
  EXPECT_EQ(ModelShape::of_preset("unknown").hidden, 0);
  EXPECT_EQ(hardware_profile("h800").rdma_gbps, 50);
  EXPECT_EQ(hardware_profile("h800").nvlink_gbps, 160);
  EXPECT_THROW(hardware_profile("a100"), UsageError);
}

TEST(SimDeploy, ValidateNamesTheProblem) {
  auto message = [](const DeployConfig& c, int E, int groups) {
    try {
      c.validate(E, groups);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  DeployConfig c = config(12, 8);
  EXPECT_NE(message(c, 16, 1).find("not a whole number of nodes"), std::string::npos);
  c = config(4, 8);
  c.redundant_experts = 4;
  EXPECT_NE(message(c, 16, 1).find("needs an EPLB placement"), std::string::npos);
  c.placement = Placement::kGlobal;
  c.redundant_experts = 3;
  EXPECT_NE(message(c, 16, 1).find("19 physical experts do not split evenly over 4 ranks"),
            std::string::npos);
  c.redundant_experts = 4;
  EXPECT_NE(message(c, 16, 1).find("--warmup-steps"), std::string::npos);
  c.warmup_steps = 2;
  EXPECT_EQ(message(c, 16, 1), "no error");
  c.model.hidden = 0;
  EXPECT_NE(message(c, 16, 1).find("--hidden"), std::string::npos);
}

TEST(SimDeploy, Placements) {
  DeployConfig c = config(4, 2);
  const auto contiguous = make_placement(c, 8, 1, {});
  EXPECT_EQ(contiguous.replicas(3), std::vector<int>{1});
  c.placement = Placement::kRoundRobin;
  const auto rr = make_placement(c, 8, 1, {});
  EXPECT_EQ(rr.replicas(5), std::vector<int>{1});
  EXPECT_EQ(rr.replicas(3), std::vector<int>{3});
  c.placement = Placement::kGlobal;
  c.redundant_experts = 4;
  const std::vector<float> load = {90, 10, 10, 10, 10, 10, 10, 10};
  const auto g = make_placement(c, 8, 1, load);
  const auto expected =
      parallel::ExpertPlacement::from_replication(parallel::eplb::rebalance_global(load, 12, 4));
  EXPECT_EQ(g.hash(), expected.hash());
  EXPECT_GT(g.num_replicas(0), 1);
  c.placement = Placement::kHierarchical;  // 2 nodes over 1 group: the policy refuses, by name
  EXPECT_THROW(make_placement(c, 8, 1, load), UsageError);
}

TEST(SimDeploy, ReadsLoads) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "sim_deploy_test_loads";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  EXPECT_EQ(read_loads(write("a.json", R"({"version":"x","routing":{"choices_per_expert":[3,1,2]}})"), 3),
            (std::vector<float>{3, 1, 2}));
  EXPECT_EQ(read_loads(write("b.json", R"({"points":[{"expert_load":[1,2,3]}]})"), 3),
            (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(read_loads(write("c.json", "[4, 5, 6]"), 3), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(read_loads(write("d.txt", "# loads\n1, 2\n3.5 # last\n"), 3), (std::vector<float>{1, 2, 3.5}));
  auto message = [&](const std::string& path, int E) {
    try {
      read_loads(path, E);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(write("e.txt", "1 2"), 3).find("has 2 loads, the router has 3 experts"),
            std::string::npos);
  EXPECT_NE(message(write("f.txt", "1 -2 3"), 3).find("expert 1's load -2"), std::string::npos);
  EXPECT_NE(message(write("g.txt", "1 x 3"), 3).find("expected a number"), std::string::npos);
  EXPECT_NE(message(write("h.json", "{\"a\": 1}"), 3).find("no per-expert loads"), std::string::npos);
  EXPECT_NE(message((dir / "missing").string(), 3).find("cannot open loads file"), std::string::npos);
  EXPECT_NE(message(write("i.txt", "# none\n"), 3).find("no loads"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(SimDeploy, LinkClassesOfBothKinds) {
  // 4 ranks, 2 per node, 16 experts contiguous (rank r: 4r .. 4r + 3), one token per rank. Token 0 goes to
  // rank 1 (its node), and to rank 2 and twice to rank 3 (the other node); the others stay home.
  DeployConfig c = config(4, 2);
  c.validate(16, 1);
  const Step s = planned({{4, 8, 12, 13}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}, 16, dropless());
  {
    DeployAccounter a(c, 16, 4, 1, dropless());
    a.add(s.rows, s.routes, s.plan);
    const DeployStats r = a.result();
    EXPECT_EQ(r.rank_rows, (std::vector<int64_t>{0, 5, 5, 6}));
    EXPECT_EQ(r.rank_local, (std::vector<int64_t>{0, 4, 4, 4}));
    // Low-latency: one message per pair; rank 1 shares token 0's node.
    EXPECT_EQ(r.rank_nvlink_send, (std::vector<int64_t>{1, 0, 0, 0}));
    EXPECT_EQ(r.rank_nvlink_recv, (std::vector<int64_t>{0, 1, 0, 0}));
    EXPECT_EQ(r.rank_rdma_send, (std::vector<int64_t>{3, 0, 0, 0}));
    EXPECT_EQ(r.rank_rdma_recv, (std::vector<int64_t>{0, 0, 1, 2}));
  }
  {
    DeployConfig n = c;
    n.a2a = A2aKind::kNormal;
    DeployAccounter a(n, 16, 4, 1, dropless());
    a.add(s.rows, s.routes, s.plan);
    const DeployStats r = a.result();
    // Normal: once to rank 1 (NVLink), once over RDMA to node 1's rank with local index 0 (rank 2), which
    // forwards it to rank 3 over NVLink.
    EXPECT_EQ(r.rank_nvlink_send, (std::vector<int64_t>{1, 0, 1, 0}));
    EXPECT_EQ(r.rank_nvlink_recv, (std::vector<int64_t>{0, 1, 0, 1}));
    EXPECT_EQ(r.rank_rdma_send, (std::vector<int64_t>{1, 0, 0, 0}));
    EXPECT_EQ(r.rank_rdma_recv, (std::vector<int64_t>{0, 0, 1, 0}));
    EXPECT_EQ(r.rank_rows, (std::vector<int64_t>{0, 5, 5, 6}));  // the rows computed do not change
  }
  {
    DeployConfig rd = c;
    rd.intranode_rdma = true;  // DeepEP's low-latency kernels before NVLink: rank 1 over RDMA too
    DeployAccounter a(rd, 16, 4, 1, dropless());
    a.add(s.rows, s.routes, s.plan);
    EXPECT_EQ(a.result().rank_rdma_send, (std::vector<int64_t>{4, 0, 0, 0}));
  }
}

TEST(SimDeploy, StepTimeIsTheSlowestRankPerPhase) {
  DeployConfig c = config(2, 1);  // two nodes of one rank: every remote pair over RDMA
  const Step s = planned({{0, 2}, {0, 1}, {0, 1}, {2, 3}}, 4, dropless());
  DeployAccounter a(c, 4, 2, 1, dropless());
  a.add(s.rows, s.routes, s.plan);
  const DeployStats r = a.result();
  // Homes: tokens 0, 1 on rank 0; 2, 3 on rank 1. Rank 0 holds experts 0, 1; rank 1 experts 2, 3.
  EXPECT_EQ(r.rank_tokens, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(r.rank_rows, (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(r.rank_rdma_send, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(r.rank_rdma_recv, (std::vector<int64_t>{2, 1}));
  const int64_t d = row_bytes(c.dispatch, 128), cb = row_bytes(c.combine, 128);
  const double dispatch = a2a_seconds(LinkRows{0, 0, 1, 2}, d, c.hardware);  // both ranks move 2 rows
  const double combine = a2a_seconds(LinkRows{0, 0, 2, 1}, cb, c.hardware);
  const double gemm = gemm_seconds(RankWork{5, 2, 2}, c.model, d, cb, c.hardware);
  EXPECT_DOUBLE_EQ(r.dispatch_s, dispatch);
  EXPECT_DOUBLE_EQ(r.combine_s, combine);
  EXPECT_DOUBLE_EQ(r.gemm_s, gemm);
  EXPECT_DOUBLE_EQ(r.step_s, dispatch + gemm + combine);
  EXPECT_DOUBLE_EQ(r.gemm_mean_s, (gemm + gemm_seconds(RankWork{3, 2, 2}, c.model, d, cb, c.hardware)) / 2);
  EXPECT_DOUBLE_EQ(r.rank_balance.mean, 5.0 / 4.0);
  EXPECT_DOUBLE_EQ(r.token_balance.max, 1.0);
  EXPECT_EQ(r.steps, 1);
  EXPECT_EQ(r.computed, 8);
}

TEST(SimDeploy, TokenHomesByRequest) {
  DeployConfig c = config(2, 2);
  c.homes = TokenHomes::kRequests;
  Step s = planned({{0, 1}, {0, 1}, {2, 3}, {2, 3}}, 4, dropless());
  s.rows = {TokenMeta{5, 0}, TokenMeta{5, 1}, TokenMeta{6, 0}, TokenMeta{7, 0}};  // homes 1, 1, 0, 1
  DeployAccounter a(c, 4, 2, 1, dropless());
  a.add(s.rows, s.routes, s.plan);
  const DeployStats r = a.result();
  EXPECT_EQ(r.rank_tokens, (std::vector<int64_t>{1, 3}));
  // Tokens 0 and 1 (rank 1's) go to rank 0's experts 0, 1; token 2 (rank 0's) to rank 1's experts 2, 3.
  EXPECT_EQ(r.rank_nvlink_send, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(r.rank_local, (std::vector<int64_t>{0, 2}));
  EXPECT_DOUBLE_EQ(r.token_balance.max, 1.5);
}

// Random routes over E experts, k per token (distinct), T tokens.
std::vector<std::vector<int>> random_routes(Rng& rng, int T, int E, int k, double hot) {
  std::vector<std::vector<int>> out(T);
  for (auto& t : out) {
    while (static_cast<int>(t.size()) < k) {
      const int e = rng.uniform() < hot ? 0 : static_cast<int>(rng.uniform_int(0, E - 1));
      if (std::find(t.begin(), t.end(), e) == t.end()) t.push_back(e);
    }
  }
  return out;
}

TEST(SimDeploy, ReplicaRuleMatchesItsClosedForm) {
  // A hot expert replicated by EPLB; kept pairs under a capacity (some dropped): the accounting's rows per
  // rank (the rule pair by pair, in slot order) equal rows_per_rank over the (home, expert) counts.
  const int E = 16, k = 4, P = 4;
  DeployConfig c = config(P, 2);
  c.placement = Placement::kGlobal;
  c.redundant_experts = 8;
  std::vector<float> load(E, 1.0f);
  load[0] = 40;
  const std::filesystem::path file = std::filesystem::temp_directory_path() / "sim_deploy_test_replica_loads";
  {
    std::ofstream out(file);
    for (float l : load) out << l << "\n";
  }
  c.loads = file.string();
  c.validate(E, 1);
  DispatchPolicy capped = DispatchPolicy::mode("greedy");
  capped.capacity_factor = 1.5;
  DeployAccounter a(c, E, k, 1, capped);
  ASSERT_NE(a.placement(), nullptr);
  EXPECT_GE(a.placement()->num_replicas(0), 3);
  Rng rng(7);
  std::vector<int64_t> expected(P, 0);
  for (int step = 0; step < 5; ++step) {
    const int T = 37 + step * 11;
    const Step s = planned(random_routes(rng, T, E, k, 0.3), E, capped);
    a.add(s.rows, s.routes, s.plan);
    std::vector<int64_t> count(static_cast<size_t>(P) * E, 0);
    for (int t = 0; t < T; ++t) {
      int h = 0;  // rank h holds rows [floor(T h / P), floor(T (h + 1) / P))
      while (static_cast<int64_t>(T) * (h + 1) / P <= t) ++h;
      for (int j = 0; j < k; ++j) {
        const int32_t e = s.plan.pair_expert[static_cast<size_t>(t) * k + j];
        if (e >= 0) ++count[static_cast<size_t>(h) * E + e];
      }
    }
    const std::vector<int64_t> rows = a.placement()->rows_per_rank(count);
    for (int r = 0; r < P; ++r) expected[r] += rows[r];
  }
  const DeployStats r = a.result();
  EXPECT_EQ(r.rank_rows, expected);
  EXPECT_GT(r.expert_dropped, 0);
  EXPECT_EQ(r.computed + r.expert_dropped, r.pairs);
  std::filesystem::remove(file);
}

TEST(SimDeploy, RankCapacityClaimsInPriorityOrder) {
  // 2 ranks, 4 experts contiguous; 4 tokens, each choosing experts 0 then 1 (both on rank 0): rank 0 is
  // offered 8 pairs, its capacity ceil(0.5 * 4 * 2 / 2) = 2.
  DeployConfig c = config(2, 2);
  c.rank_capacity_factor = 0.5;
  const Step s = planned({{0, 1}, {0, 1}, {0, 1}, {0, 1}}, 4, dropless());
  {
    DeployAccounter a(c, 4, 2, 1, dropless());  // arrival: tokens 0 and 1 keep their first choice
    a.add(s.rows, s.routes, s.plan);
    const DeployStats r = a.result();
    EXPECT_EQ(r.rank_rows, (std::vector<int64_t>{2, 0}));
    EXPECT_EQ(r.rank_dropped, 6);
    EXPECT_EQ(r.rank_capacity, 2);
    EXPECT_EQ(r.rank_tokens, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(r.rank_rdma_send, (std::vector<int64_t>{0, 0}));
    EXPECT_EQ(r.rank_nvlink_send, (std::vector<int64_t>{0, 0}));  // tokens 0, 1 are rank 0's own
  }
  {
    DispatchPolicy score = dropless();
    score.priority = Priority::kScore;  // top-1 scores 0, 1, 2, 3: tokens 3 and 2 claim first
    DeployAccounter a(c, 4, 2, 1, score);
    a.add(s.rows, s.routes, s.plan);
    const DeployStats r = a.result();
    EXPECT_EQ(r.rank_nvlink_send, (std::vector<int64_t>{0, 2}));  // both from rank 1's tokens
  }
}

TEST(SimDeploy, WarmupChoosesThePlacement) {
  const int E = 8, k = 2, P = 2;
  DeployConfig c = config(P, 2);
  c.placement = Placement::kGlobal;
  c.redundant_experts = 2;
  c.warmup_steps = 2;
  c.validate(E, 1);
  DeployAccounter a(c, E, k, 1, dropless());
  const Step hot = planned({{3, 0}, {3, 1}, {3, 2}, {3, 4}}, E, dropless());
  a.add(hot.rows, hot.routes, hot.plan);
  EXPECT_EQ(a.placement(), nullptr);
  a.add(hot.rows, hot.routes, hot.plan);
  ASSERT_NE(a.placement(), nullptr);
  EXPECT_GT(a.placement()->num_replicas(3), 1);  // the warm-up's hot expert is replicated
  EXPECT_EQ(a.result().steps, 0);
  a.add(hot.rows, hot.routes, hot.plan);
  const DeployStats r = a.result();
  EXPECT_EQ(r.steps, 1);
  EXPECT_EQ(r.warmup_steps, 2);
  EXPECT_EQ(r.pairs, 8);
  EXPECT_EQ(std::accumulate(r.rank_rows.begin(), r.rank_rows.end(), int64_t{0}), 8);
}

}  // namespace
}  // namespace moe::sim::deploy

namespace moe::sim {
namespace {

// The accounting inside a streamed workload: the same statistics for 1 and 3 threads and any window (the
// policies' chains run beside the routing; make tsan runs this), and the run's own counts agree with it.
TEST(SimDeployWorkload, SameForThreadsAndWindows) {
  Overrides o = {{"preset", "deepseek-v3"},
                 {"requests", "24"},
                 {"prompt-len", "uniform:8,200"},
                 {"decode-len", "uniform:2,20"},
                 {"token-budget", "300"},
                 {"arrival-rate", "3"},
                 {"ep-size", "16"},
                 {"placement", "global"},
                 {"redundant-experts", "16"},
                 {"warmup-steps", "2"},
                 {"rank-capacity-factor", "1.1"}};
  std::vector<deploy::DeployStats> results;
  for (const char* threads : {"1", "3"}) {
    for (int64_t window : {int64_t{1}, kDefaultWindowTokens}) {
      o["threads"] = threads;
      const SimConfig c = build_config(o);
      const WorkloadRun run = simulate_workload(c, {c.policy, DispatchPolicy::mode("stable")},
                                                StreamOptions{.window_tokens = window});
      for (const RunStats& s : run.stats) {
        ASSERT_TRUE(s.deploy.enabled);
        EXPECT_EQ(s.deploy.steps + s.deploy.warmup_steps, s.steps);
        EXPECT_EQ(s.deploy.computed + s.deploy.expert_dropped + s.deploy.rank_dropped, s.deploy.pairs);
        results.push_back(s.deploy);
      }
    }
  }
  for (size_t i = 2; i < results.size(); ++i) {
    const deploy::DeployStats& a = results[i % 2];
    const deploy::DeployStats& b = results[i];
    EXPECT_EQ(a.rank_rows, b.rank_rows);
    EXPECT_EQ(a.rank_rdma_send, b.rank_rdma_send);
    EXPECT_EQ(a.replicas, b.replicas);
    EXPECT_EQ(a.rank_dropped, b.rank_dropped);
    EXPECT_EQ(a.step_s, b.step_s);
  }
}

}  // namespace
}  // namespace moe::sim

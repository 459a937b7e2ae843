// What only expert parallelism has, under mpirun with 1, 2 and 4 ranks (tests/cmake/parallel.cmake): explicit
// placements, sub-communicators of 1, 2 and 4 ranks in one job, collective admission and release of requests,
// sequence scope's serving-determinism property (2000 probe draws per world size), the serving lifecycle
// under prefix scope (2000 served probes per world size: cached prefixes restored with the collective
// restore_requests, preemption, speculative drafts rolled back with rollback_requests),
// empty global batches, no allocation after warm-up, errors found on one rank reported on every rank,
// start-up mismatches, diverged causal states, mixed thread counts. The layer's accuracy and bit equality to
// the single-process layer on the shared table of cases is the backend harness (tests/layer_cases_test.cc,
// backend "ep"); the configs here come from that table too.
//
// Every rank builds the same global batches (a pure function of a seed), runs its slice through an
// ExpertParallelLayer, and also runs a single-process MoELayer on the whole global batch: its rows must be
// bitwise equal (memcmp) to the reference's slice. Rank 0 prints the gtest output, the others only their
// failures.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/parallel/expert_parallel_layer.h"
#include "moe/parallel/mpi_communicator.h"
#include "tests/support/allocation_counter.h"
#include "tests/support/ep_fixtures.h"
#include "tests/support/layer_cases.h"
#include "tests/support/mpi_gtest.h"
#include "tests/support/serving_trial.h"

namespace moe::parallel {
namespace {

using moe::testing::GlobalBatch;
using moe::testing::LocalTokens;
using moe::testing::MakeGlobalBatch;
using moe::testing::RandomWeights;
using moe::testing::SliceBitEqual;

constexpr int64_t kHidden = 64;

CommOptions TestOptions() {
  CommOptions o;
  o.timeout = std::chrono::seconds(30);
  return o;
}

std::string MessageOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

template <typename Fn>
void ExpectInvalidEverywhere(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected std::invalid_argument containing '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

struct Case {
  std::string name;
  io::LayerShape shape;
  kernels::DType storage;
  MoELayerConfig config;
};

// The harness's case of that name (tests/support/layer_cases.h), with a workspace smaller than some local
// batches (it grows once).
Case HarnessCase(const std::string& name) {
  for (const moe::testing::LayerCase& c : moe::testing::layer_cases()) {
    if (c.name != name) continue;
    MoELayerConfig config = c.config;
    config.max_tokens = 32;
    return {c.name, c.shape, c.storage, config};
  }
  throw std::invalid_argument("no harness case " + name);
}

// The cases with invariant kernels (what expert parallelism promises bit equality for).
std::vector<Case> Cases() {
  std::vector<Case> out;
  for (const moe::testing::LayerCase& c : moe::testing::layer_cases()) {
    if (c.config.expert_kernel == kernels::KernelKind::kInvariant &&
        c.config.gate_kernel == kernels::KernelKind::kInvariant && c.calls == 1) {
      out.push_back(HarnessCase(c.name));
    }
  }
  return out;
}

struct Outcome {
  int batches = 0;
  int64_t mismatched_batches = 0;
  int64_t drops = 0;
};

// Runs `num_batches` global batches through an EP layer on `comm` and a single-process MoELayer, comparing
// this rank's rows bitwise and the plans by hash (on every rank, gathered).
Outcome RunAgainstReference(Communicator& comm, const Case& c, int num_batches, uint64_t seed,
                            std::optional<ExpertPlacement> placement = std::nullopt) {
  auto weights = RandomWeights(c.shape, c.storage, 77);
  ExpertParallelOptions options;
  options.verify_plan = true;
  ExpertParallelLayer ep(c.config, weights, comm, placement, options);
  MoELayerConfig ref_config = c.config;
  ref_config.max_tokens = 256;
  MoELayer ref(ref_config, weights);
  const int64_t hidden = c.shape.hidden;
  Outcome out;
  std::vector<size_t> hashes(comm.size());
  for (int b = 0; b < num_batches; ++b) {
    const GlobalBatch g = MakeGlobalBatch(seed + b, comm.size(), hidden);
    const int64_t T = static_cast<int64_t>(g.batch.meta.size());
    std::vector<float> y_ref(g.batch.x.size());
    ref.forward(g.batch.x.data(), static_cast<int>(T), g.batch.meta, y_ref.data());

    const int64_t first = g.offsets[comm.rank()];
    const int64_t rows = LocalTokens(g, comm.rank());
    std::vector<float> y(static_cast<size_t>(rows * hidden), -1.0f);
    MoEStats stats;
    ep.forward(g.batch.x.data() + first * hidden, static_cast<int>(rows),
               std::span<const TokenMeta>(g.batch.meta.data() + first, static_cast<size_t>(rows)), y.data(),
               nullptr, &stats);
    ++out.batches;
    if (!SliceBitEqual(y, y_ref, first, rows, hidden)) ++out.mismatched_batches;
    EXPECT_EQ(ep.last_global_tokens(), T);
    EXPECT_EQ(ep.last_token_offset(), first);
    EXPECT_EQ(stats.num_tokens, T);
    EXPECT_EQ(stats.num_dropped, ref.last_plan().num_dropped);
    EXPECT_EQ(plan_hash(ep.last_plan()), plan_hash(ref.last_plan())) << c.name << " batch " << b;
    comm.all_gather_sizes(static_cast<size_t>(plan_hash(ep.last_plan())), hashes);
    for (int r = 1; r < comm.size(); ++r) EXPECT_EQ(hashes[r], hashes[0]) << "plan of rank " << r;
    out.drops += ref.last_plan().num_dropped;
  }
  return out;
}

TEST(ExpertParallel, ExplicitPlacementsGiveTheSameBits) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  const Case c = HarnessCase("qwen2_bf16_deterministic_reroute");
  const int P = comm.size();
  std::vector<int> round_robin(8), all_on_last(8, P - 1), reversed(8);
  for (int e = 0; e < 8; ++e) {
    round_robin[e] = e % P;
    reversed[e] = (P - 1) - (e * P / 8);
  }
  for (const auto& map : {round_robin, all_on_last, reversed}) {
    const Outcome o = RunAgainstReference(comm, c, 2, 200, ExpertPlacement::from_map(map, P));
    EXPECT_EQ(o.mismatched_batches, 0);
  }
}

// Redundant experts: EPLB's placements of skewed loads (hot experts with replicas on several ranks, some rank
// holding two replicas of one expert), and every expert on every rank: the same bits and plans, every case.
TEST(ExpertParallel, ReplicatedExpertsGiveTheSameBits) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  const int P = comm.size();
  for (const Case& c : Cases()) {
    const int E = c.shape.num_experts;
    std::vector<float> load(E);  // skewed, hottest experts scattered
    for (int e = 0; e < E; ++e) load[e] = std::floor(1000.0f / static_cast<float>(1 + (e * 5) % E));
    std::vector<std::vector<int>> everywhere(E);
    for (int e = 0; e < E; ++e) {
      for (int r = 0; r <= P; ++r) everywhere[e].push_back((e + r) % P);  // one rank twice
    }
    const ExpertPlacement placements[] = {
        ExpertPlacement::from_replication(eplb::rebalance_global(load, E + 2 * P, P)),
        ExpertPlacement::from_replication(eplb::rebalance(load, E + 4 * P, 4, P % 2 == 0 ? 2 : 1, P)),
        ExpertPlacement::from_replicas(everywhere, P)};
    for (const ExpertPlacement& placement : placements) {
      ASSERT_TRUE(placement.has_redundancy()) << placement.describe();
      const Outcome o = RunAgainstReference(comm, c, 2, 300, placement);
      EXPECT_EQ(o.mismatched_batches, 0) << c.name << " with " << placement.describe();
    }
  }
}

// The same global batches through communicators of 1, 2 and 4 ranks in one job: every world size's
// output equals the reference bits (hence each other's).
TEST(ExpertParallel, WorldSizes124) {
  MpiCommunicator world(MPI_COMM_WORLD, TestOptions());
  for (int group : {1, 2, 4}) {
    if (group > world.size() || world.size() % group != 0) continue;
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, world.rank() / group, world.rank(), &sub);
    {
      MpiCommunicator comm(sub, TestOptions());
      ASSERT_EQ(comm.size(), group);
      for (const Case& c : Cases()) {
        const Outcome o = RunAgainstReference(comm, c, 2, 500);
        EXPECT_EQ(o.mismatched_batches, 0) << c.name << " on " << group << " ranks";
      }
    }
    MPI_Comm_free(&sub);
  }
}

// Finished requests are released collectively: rank 0 reports one, the last rank another, and every rank's
// global causal state forgets both. (Bit equality over causal calls is the harness's.)
TEST(ExpertParallel, ReleaseRequestsIsCollective) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  Case c = HarnessCase("mixtral_f32_causal");
  c.config.num_threads = 1;
  ExpertParallelLayer ep(c.config, RandomWeights(c.shape, c.storage, 78), comm);
  RoutingState state(8);
  const uint64_t seed = 32;
  const GlobalBatch g = MakeGlobalBatch(seed, comm.size(), kHidden, 0, 6, 8);
  const int64_t first = g.offsets[comm.rank()];
  const int64_t rows = LocalTokens(g, comm.rank());
  std::vector<float> y(static_cast<size_t>(std::max<int64_t>(rows, 1) * kHidden));
  ep.forward(g.batch.x.data() + first * kHidden, static_cast<int>(rows),
             std::span<const TokenMeta>(g.batch.meta.data() + first, static_cast<size_t>(rows)), y.data(),
             &state);
  const uint64_t first_id = 100 + seed % 5;  // MakeGlobalBatch's first request (the second is first_id + 7)
  std::vector<uint64_t> finished;
  if (comm.rank() == 0) finished.push_back(first_id);
  if (comm.rank() == comm.size() - 1) finished.push_back(first_id + 7);
  const size_t before = state.num_requests();
  ep.release_requests(finished, state);
  EXPECT_EQ(state.find(first_id), nullptr);
  EXPECT_EQ(state.find(first_id + 7), nullptr);
  EXPECT_EQ(state.num_requests(), before - 2);
}

// Sequence scope: requests are admitted collectively (each rank admits some), and errors in admission or
// release are reported on every rank alike, changing nothing.
TEST(ExpertParallel, AdmitAndReleaseAreCollectiveAndAtomic) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  Case c = HarnessCase("mixtral_f32_deterministic");
  ExpertParallelLayer ep(c.config, RandomWeights(c.shape, c.storage, 78), comm);
  RoutingState state(8, 2);
  std::vector<ExpertParallelLayer::Admission> mine;
  for (uint64_t id = 0; id < 6; ++id) {
    if (static_cast<int>(id % comm.size()) == comm.rank())
      mine.push_back({id + 1, static_cast<uint32_t>(id + 3)});
  }
  ep.admit_requests(mine, state);
  ASSERT_EQ(state.num_requests(), 6u);
  for (uint64_t id = 1; id <= 6; ++id) EXPECT_EQ(state.find(id)->prompt_length, id + 2);
  // Request 3 again (from the last rank) with a new one: nothing is admitted, on every rank.
  std::vector<ExpertParallelLayer::Admission> again;
  if (comm.rank() == comm.size() - 1) again = {{40, 5}, {3, 9}};
  ExpectInvalidEverywhere([&] { ep.admit_requests(again, state); }, "request 3 is already admitted");
  EXPECT_EQ(state.find(40), nullptr);
  // The same new request from two ranks (or twice from one): refused.
  std::vector<ExpertParallelLayer::Admission> twice = {{41, 2}};
  if (comm.rank() == 0) twice.push_back({41, 2});
  ExpectInvalidEverywhere([&] { ep.admit_requests(twice, state); }, "request 41 is admitted twice");
  std::vector<ExpertParallelLayer::Admission> empty_prompt;
  if (comm.rank() == 0) empty_prompt = {{42, 0}};
  ExpectInvalidEverywhere([&] { ep.admit_requests(empty_prompt, state); }, "prompt length 0");
  EXPECT_EQ(state.num_requests(), 6u);
  // A conversation's turn (docs/routing.md, "Conversations"): its turn ends reach every rank; invalid ones
  // from one rank refuse the whole call everywhere.
  std::vector<ExpertParallelLayer::Admission> turn;
  if (comm.rank() == comm.size() - 1) turn = {{43, 30, {20, 24, 30}}, {44, 9, {4, 6}}};
  ExpectInvalidEverywhere([&] { ep.admit_requests(turn, state); }, "an even number of turn ends");
  EXPECT_EQ(state.find(43), nullptr);
  if (comm.rank() == comm.size() - 1) turn = {{43, 30, {20, 24, 30}}};
  ep.admit_requests(turn, state);
  ASSERT_NE(state.find(43), nullptr);
  EXPECT_EQ(state.find(43)->turn_ends, (std::vector<uint32_t>{20, 24, 30}));
  std::vector<ExpertParallelLayer::Restoration> restored;
  if (comm.rank() == 0) restored.push_back({45, 12, {}, {5, 7, 12}});
  ep.restore_requests(restored, state);
  ASSERT_NE(state.find(45), nullptr);
  EXPECT_EQ(state.find(45)->turn_ends, (std::vector<uint32_t>{5, 7, 12}));
  const std::vector<uint64_t> turns_done = {43, 45};
  ep.release_requests(turns_done, state);
  EXPECT_EQ(state.num_requests(), 6u);
  // Releasing an unknown request with a known one releases neither.
  std::vector<uint64_t> finished;
  if (comm.rank() == 0) finished = {2, 99};
  ExpectInvalidEverywhere([&] { ep.release_requests(finished, state); }, "does not hold request 99");
  EXPECT_EQ(state.num_requests(), 6u);
  // A request named by every rank is released once.
  const std::vector<uint64_t> all = {2};
  ep.release_requests(all, state);
  EXPECT_EQ(state.find(2), nullptr);
  EXPECT_EQ(state.num_requests(), 5u);
}

// The serving-determinism property on the expert-parallel layer (docs/determinism.md clause 2): every trial
// serves kProbes probe requests among strangers under sequence scope; every step each live request sends a
// prompt chunk of random size or one decode row, rows shuffled and split unevenly over the ranks, requests
// admitted and released collectively from varying ranks. Every probe's pairs (expert, weight bits, status)
// and output rows equal those of the probe alone and unchunked on a single-process layer: kTrials * kProbes
// = 2000 draws per world size, drop and reroute.
TEST(ExpertParallel, SequenceScopeProbeEqualsItsPlanAloneAndUnchunked) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  constexpr int kTrials = 500, kProbes = 4;
  Case c = HarnessCase("mixtral_f32_deterministic");
  c.config.num_threads = 1;
  c.config.max_tokens = 256;
  auto weights = RandomWeights(c.shape, c.storage, 81);
  MoELayerConfig reroute_config = c.config;
  reroute_config.policy.overflow = Overflow::kReroute;
  reroute_config.policy.reroute_depth = 2;
  ExpertParallelLayer ep_drop(c.config, weights, comm), ep_reroute(reroute_config, weights, comm);
  MoELayer ref_drop(c.config, weights), ref_reroute(reroute_config, weights);
  const int E = c.config.router.num_experts, k = c.config.router.top_k;
  struct PairOutcome {
    int32_t expert;
    uint32_t weight_bits;
    PairStatus status;
    bool operator==(const PairOutcome&) const = default;
  };
  auto outcome = [&](const DispatchPlan& plan, int64_t t, int j) {
    const size_t p = static_cast<size_t>(t) * k + j;
    uint32_t bits;
    std::memcpy(&bits, &plan.pair_weight[p], 4);
    return PairOutcome{plan.pair_expert[p], bits, plan.pair_status[p]};
  };
  std::mt19937_64 rng(2026);  // the same draws on every rank
  int draws = 0;
  int64_t probe_drops = 0, mismatches = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const bool reroute = trial % 2 == 1;
    ExpertParallelLayer& ep = reroute ? ep_reroute : ep_drop;
    MoELayer& ref = reroute ? ref_reroute : ref_drop;
    struct Live {
      uint64_t id;
      uint32_t prompt, next, end;
      bool probe;
    };
    std::vector<Live> live;
    uint64_t next_id = 1000 * static_cast<uint64_t>(trial + 1);
    // References: each probe alone, its prompt and decode rows in one call.
    std::map<uint64_t, std::vector<PairOutcome>> want_pairs;
    std::map<uint64_t, std::vector<float>> want_y;
    std::vector<ExpertParallelLayer::Admission> admit_now;
    for (int q = 0; q < kProbes; ++q) {
      const uint32_t prompt = 1 + static_cast<uint32_t>(rng() % 40);
      const uint32_t end = prompt + static_cast<uint32_t>(rng() % 4);
      const uint64_t id = next_id++;
      live.push_back({id, prompt, 0, end, true});
      admit_now.push_back({id, prompt});
      std::vector<TokenMeta> meta;
      for (uint32_t p = 0; p < end; ++p) meta.push_back({id, p});
      const moe::testing::Batch alone = moe::testing::MakeBatch(meta, kHidden);
      RoutingState alone_state(E, k);
      alone_state.admit(id, prompt);
      std::vector<float> y(alone.x.size());
      ref.forward(alone.x.data(), static_cast<int>(end), meta, y.data(), &alone_state);
      for (uint32_t p = 0; p < end; ++p) {
        for (int j = 0; j < k; ++j) {
          want_pairs[id].push_back(outcome(ref.last_plan(), p, j));
          probe_drops += ref.last_plan().pair_status[static_cast<size_t>(p) * k + j] == PairStatus::kDropped;
        }
      }
      want_y[id] = std::move(y);
    }
    RoutingState state(E, k);
    std::map<uint64_t, std::vector<PairOutcome>> got_pairs;
    for (int step = 0; !live.empty(); ++step) {
      if (rng() % 2 == 0) {  // a stranger arrives
        const uint32_t prompt = 1 + static_cast<uint32_t>(rng() % 48);
        live.push_back({next_id, prompt, 0, prompt + static_cast<uint32_t>(rng() % 6), false});
        admit_now.push_back({next_id++, prompt});
      }
      // Admissions of this step, spread over the ranks.
      std::vector<ExpertParallelLayer::Admission> mine;
      for (size_t i = 0; i < admit_now.size(); ++i) {
        if (static_cast<int>((i + static_cast<size_t>(step)) % comm.size()) == comm.rank()) {
          mine.push_back(admit_now[i]);
        }
      }
      ep.admit_requests(mine, state);
      admit_now.clear();
      std::vector<TokenMeta> meta;
      for (Live& r : live) {
        const uint32_t n =
            r.next < r.prompt ? std::min(r.prompt - r.next, 1 + static_cast<uint32_t>(rng() % 16)) : 1;
        for (uint32_t i = 0; i < n; ++i) meta.push_back({r.id, r.next + i});
        r.next += n;
      }
      std::shuffle(meta.begin(), meta.end(), rng);
      const moe::testing::Batch b = moe::testing::MakeBatch(meta, kHidden);
      const int64_t T = static_cast<int64_t>(meta.size());
      const std::vector<int64_t> offsets = moe::testing::SplitRows(T, comm.size(), rng(), rng());
      const int64_t first = offsets[comm.rank()], rows = offsets[comm.rank() + 1] - first;
      std::vector<float> y(static_cast<size_t>(std::max<int64_t>(rows, 1) * kHidden));
      ep.forward(b.x.data() + first * kHidden, static_cast<int>(rows),
                 std::span<const TokenMeta>(b.meta.data() + first, static_cast<size_t>(rows)), y.data(),
                 &state);
      const DispatchPlan& plan = ep.last_plan();
      for (int64_t t = 0; t < T; ++t) {
        const TokenMeta& m = meta[t];
        auto it = want_y.find(m.request_id);
        if (it == want_y.end()) continue;
        if (t >= first && t < first + rows &&
            std::memcmp(y.data() + (t - first) * kHidden, it->second.data() + m.position * kHidden,
                        kHidden * sizeof(float)) != 0) {
          ++mismatches;
        }
        auto& got = got_pairs[m.request_id];
        got.resize(want_pairs[m.request_id].size(), PairOutcome{-2, 0, PairStatus::kDropped});
        for (int j = 0; j < k; ++j) got[static_cast<size_t>(m.position) * k + j] = outcome(plan, t, j);
      }
      // Finished requests, released by varying ranks.
      std::vector<uint64_t> finished;
      for (size_t i = 0; i < live.size();) {
        if (live[i].next >= live[i].end) {
          if (static_cast<int>((live[i].id + static_cast<uint64_t>(step)) % comm.size()) == comm.rank()) {
            finished.push_back(live[i].id);
          }
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
      ep.release_requests(finished, state);
    }
    EXPECT_EQ(state.num_requests(), 0u);
    for (const auto& [id, want] : want_pairs) {
      EXPECT_TRUE(got_pairs[id] == want) << "trial " << trial << " probe " << id;
      ++draws;
    }
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GE(draws, 2000);
  EXPECT_GT(probe_drops, 0) << "capacity must bind for the property to mean anything";
}

// The serving engine's whole lifecycle on the expert-parallel layer (docs/determinism.md clause 2b): 2000
// served probes per world size (the engine model of sim/serving) - cached prefixes restored collectively from
// another request's segments, preemption and recompute, speculative drafts partly rejected and rolled back
// collectively, strangers, rows shuffled and split unevenly over the ranks, each lifecycle call passed by a
// varying rank - equal, pair by pair and output row by output row, the probe alone on a single-process layer.
TEST(ExpertParallel, ServedProbesEqualTheProbeAlone) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  Case c = HarnessCase("mixtral_f32_deterministic");
  c.config.num_threads = 1;
  c.config.max_tokens = 256;
  auto weights = RandomWeights(c.shape, c.storage, 83);
  const int k = c.config.router.top_k;
  struct RowOutcome {
    std::vector<int32_t> expert;
    std::vector<uint32_t> weight_bits;
    std::vector<float> y;
    bool operator==(const RowOutcome& o) const {
      return expert == o.expert && weight_bits == o.weight_bits && y.size() == o.y.size() &&
             std::memcmp(y.data(), o.y.data(), y.size() * sizeof(float)) == 0;
    }
  };
  auto outcomes = [&](const std::vector<moe::testing::ServingRow>& rows, const DispatchPlan& plan,
                      const std::vector<float>& y) {
    std::vector<RowOutcome> out(rows.size());
    for (size_t t = 0; t < rows.size(); ++t) {
      for (int j = 0; j < k; ++j) {
        const size_t p = t * k + j;
        uint32_t bits;
        std::memcpy(&bits, &plan.pair_weight[p], 4);
        out[t].expert.push_back(plan.pair_expert[p]);
        out[t].weight_bits.push_back(bits);
      }
      out[t].y.assign(y.begin() + static_cast<int64_t>(t) * kHidden,
                      y.begin() + static_cast<int64_t>(t + 1) * kHidden);
    }
    return out;
  };
  auto inputs = [&](const std::vector<moe::testing::ServingRow>& rows, std::vector<TokenMeta>& meta) {
    std::vector<float> x(rows.size() * kHidden);
    meta.clear();
    for (size_t t = 0; t < rows.size(); ++t) {
      moe::testing::TokenHidden(rows[t].content, rows[t].meta.position, kHidden, &x[t * kHidden]);
      meta.push_back(rows[t].meta);
    }
    return x;
  };
  // Each lifecycle call is passed by one rank (a different one each time); every rank makes the collective.
  struct Collective {
    ExpertParallelLayer* ep;
    Communicator* comm;
    int turn = 0;
    bool mine() { return turn++ % comm->size() == comm->rank(); }
    void admit(RoutingState& s, uint64_t id, uint32_t L) {
      std::vector<ExpertParallelLayer::Admission> a;
      if (mine()) a.push_back({id, L});
      ep->admit_requests(a, s);
    }
    void restore(RoutingState& s, uint64_t id, uint32_t L, const std::vector<RoutingSegment>& prefix) {
      std::vector<ExpertParallelLayer::Restoration> r;
      if (mine()) r.push_back({id, L, prefix});
      ep->restore_requests(r, s);
    }
    void rollback(RoutingState& s, uint64_t id, uint32_t position) {
      std::vector<ExpertParallelLayer::Rollback> r;
      if (mine()) r.push_back({id, position});
      ep->rollback_requests(r, s);
    }
    void release(RoutingState& s, uint64_t id) {
      std::vector<uint64_t> r;
      if (mine()) r.push_back(id);
      ep->release_requests(r, s);
    }
  };
  std::mt19937_64 rng(2027);  // the same draws on every rank
  moe::testing::ServingDrawOptions opt;
  opt.max_prompt = 32;
  opt.max_decode = 6;
  int trials = 0, cached = 0, preempted = 0, speculated = 0;
  int64_t probe_drops = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    MoELayerConfig config = c.config;
    config.policy.overflow = trial % 2 ? Overflow::kReroute : Overflow::kDrop;
    config.policy.reroute_depth = 2;
    config.policy.lookahead = trial % 4 == 0 ? 64 : static_cast<uint32_t>(trial % 4 * 3);
    ExpertParallelLayer ep(config, weights, comm);
    MoELayer ref(config, weights);
    const moe::testing::ServingTrial t = moe::testing::DrawServingTrial(rng, config.policy, opt);
    std::vector<TokenMeta> meta;
    const std::vector<moe::testing::ServingRow> alone_rows = moe::testing::ProbeAloneRows(t);
    const std::vector<float> alone_x = inputs(alone_rows, meta);
    std::vector<float> alone_y(alone_x.size());
    RoutingState alone(8, k);
    alone.admit(t.probe, t.prompt_length);
    ref.forward(alone_x.data(), static_cast<int>(meta.size()), meta, alone_y.data(), &alone);
    probe_drops += ref.last_plan().num_dropped;
    const std::vector<RowOutcome> want = outcomes(alone_rows, ref.last_plan(), alone_y);
    RoutingState state(8, k, /*record=*/true);
    const std::vector<RowOutcome> got = moe::testing::ReplayServingTrial<RowOutcome>(
        t, state,
        [&](const std::vector<moe::testing::ServingRow>& rows, RoutingState& st) {
          const std::vector<float> x = inputs(rows, meta);
          const int64_t T = static_cast<int64_t>(rows.size());
          const std::vector<int64_t> offsets = moe::testing::SplitRows(T, comm.size(), rng(), rng());
          const int64_t first = offsets[comm.rank()], n = offsets[comm.rank() + 1] - first;
          std::vector<float> local(static_cast<size_t>(std::max<int64_t>(n, 1) * kHidden));
          ep.forward(x.data() + first * kHidden, static_cast<int>(n),
                     std::span<const TokenMeta>(meta.data() + first, static_cast<size_t>(n)), local.data(),
                     &st);
          std::vector<size_t> bytes(comm.size());
          for (int r = 0; r < comm.size(); ++r)
            bytes[r] = (offsets[r + 1] - offsets[r]) * kHidden * sizeof(float);
          std::vector<float> y(static_cast<size_t>(T * kHidden));
          comm.all_gather_v(local.data(), n * kHidden * sizeof(float), y.data(), bytes);
          return outcomes(rows, ep.last_plan(), y);
        },
        Collective{&ep, &comm});
    ++trials;
    cached += t.cached > 0;
    preempted += t.preemptions > 0;
    speculated += t.rejected > 0;
    ASSERT_TRUE(got == want) << "trial " << trial << ": " << t.describe();
    ASSERT_EQ(state.num_requests(), 0u);
  }
  EXPECT_EQ(trials, 2000);
  EXPECT_GT(probe_drops, 0) << "capacity must bind for the property to mean anything";
  EXPECT_GT(cached, trials / 2);
  EXPECT_GT(preempted, trials / 10);
  EXPECT_GT(speculated, trials / 10);
}

TEST(ExpertParallel, EmptyGlobalBatch) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  const Case c = HarnessCase("qwen2_bf16_deterministic_reroute");
  ExpertParallelLayer ep(c.config, RandomWeights(c.shape, c.storage, 77), comm);
  MoEStats stats;
  ep.forward(nullptr, 0, {}, nullptr, nullptr, &stats);
  EXPECT_EQ(stats.num_tokens, 0);
  EXPECT_EQ(ep.last_global_tokens(), 0);
}

TEST(ExpertParallel, NoAllocationAfterWarmUp) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  for (const Case& c : Cases()) {
    ExpertParallelLayer ep(c.config, RandomWeights(c.shape, c.storage, 77), comm);
    const int64_t hidden = c.shape.hidden;
    const GlobalBatch g = MakeGlobalBatch(900, comm.size(), hidden, 0, 8, 30);
    const int64_t first = g.offsets[comm.rank()];
    const int64_t rows = LocalTokens(g, comm.rank());
    std::vector<float> y(static_cast<size_t>(std::max<int64_t>(rows, 1) * hidden));
    MoEStats stats;
    auto step = [&] {
      ep.forward(g.batch.x.data() + first * hidden, static_cast<int>(rows),
                 std::span<const TokenMeta>(g.batch.meta.data() + first, static_cast<size_t>(rows)), y.data(),
                 nullptr, &stats);
    };
    step();  // warm-up (grows past max_tokens)
    const long before = moe::testing::allocation_count();
    for (int i = 0; i < 3; ++i) step();
    EXPECT_EQ(moe::testing::allocation_count() - before, 0) << c.name << " rank " << comm.rank();
  }
}

TEST(ExpertParallel, FingerprintHasWorldSize) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  const Case c = HarnessCase("mixtral_f32_deterministic");
  ExpertParallelLayer ep(c.config, RandomWeights(c.shape, c.storage, 77), comm);
  const Fingerprint f = ep.fingerprint();
  EXPECT_EQ(f.world_size, comm.size());
  EXPECT_EQ(f.config_hash,
            MoELayer(c.config, RandomWeights(c.shape, c.storage, 77)).fingerprint().config_hash);
  EXPECT_NE(f.to_json().find("\"world_size\":" + std::to_string(comm.size())), std::string::npos)
      << f.to_json();
}

// A rank whose batch has a NaN row: every rank throws std::invalid_argument, nothing hangs, and the layer
// (and communicator) stay usable.
TEST(ExpertParallel, BadInputOnOneRankFailsEveryRank) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  const Case c = HarnessCase("mixtral_f32_deterministic");
  ExpertParallelLayer ep(c.config, RandomWeights(c.shape, c.storage, 77), comm);
  const int victim = comm.size() - 1;
  std::vector<TokenMeta> meta = {{static_cast<uint64_t>(comm.rank()), 0},
                                 {static_cast<uint64_t>(comm.rank()), 1}};
  moe::testing::Batch b = moe::testing::MakeBatch(meta, kHidden);
  std::vector<float> y(b.x.size());
  if (comm.rank() == victim) b.x[kHidden + 3] = std::numeric_limits<float>::quiet_NaN();
  const std::string msg = MessageOf([&] { ep.forward(b.x.data(), 2, b.meta, y.data()); });
  if (comm.rank() == victim) {
    EXPECT_NE(msg.find("row 1"), std::string::npos) << msg;
  } else {
    EXPECT_NE(msg.find("rank(s) " + std::to_string(victim) + " rejected their input"), std::string::npos)
        << msg;
  }
  b = moe::testing::MakeBatch(meta, kHidden);
  EXPECT_NO_THROW(ep.forward(b.x.data(), 2, b.meta, y.data()));
}

// Two ranks send the same (request_id, position): the planner rejects the global batch on every rank alike.
TEST(ExpertParallel, DuplicateTokensAcrossRanksRejectedEverywhere) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  if (comm.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const Case c = HarnessCase("mixtral_f32_deterministic");
  ExpertParallelLayer ep(c.config, RandomWeights(c.shape, c.storage, 77), comm);
  std::vector<TokenMeta> meta = {{7, 0}};
  moe::testing::Batch b = moe::testing::MakeBatch(meta, kHidden);
  std::vector<float> y(b.x.size());
  const std::string msg = MessageOf([&] { ep.forward(b.x.data(), 1, b.meta, y.data()); });
  EXPECT_NE(msg.find("both claim request 7 position 0"), std::string::npos) << msg;
}

// Start-up: a rank with another capacity factor, other weights or another placement is found by every rank.
TEST(ExpertParallel, MismatchAcrossRanksDetectedAtStartUp) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  if (comm.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int victim = comm.size() - 1;
  const bool odd = comm.rank() == victim;
  const Case c = HarnessCase("mixtral_f32_deterministic");
  const std::string needle = "rank " + std::to_string(victim) + " (";

  MoELayerConfig config = c.config;
  if (odd) config.policy.capacity_factor = 1.5;
  std::string msg =
      MessageOf([&] { ExpertParallelLayer(config, RandomWeights(c.shape, c.storage, 77), comm); });
  EXPECT_NE(msg.find("layer config (experts/k/policy/kernels) differs across ranks"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find(needle), std::string::npos) << msg;

  msg = MessageOf(
      [&] { ExpertParallelLayer(c.config, RandomWeights(c.shape, c.storage, odd ? 78 : 77), comm); });
  EXPECT_NE(msg.find("layer weights differs across ranks"), std::string::npos) << msg;
  EXPECT_NE(msg.find(needle), std::string::npos) << msg;

  std::vector<int> map(8, 0);
  if (odd) map[3] = victim;
  msg = MessageOf([&] {
    ExpertParallelLayer(c.config, RandomWeights(c.shape, c.storage, 77), comm,
                        ExpertPlacement::from_map(map, comm.size()));
  });
  EXPECT_NE(msg.find("expert placement differs across ranks"), std::string::npos) << msg;

  // A placement that is wrong locally (for another world size) fails every rank with invalid_argument.
  msg = MessageOf([&] {
    ExpertParallelLayer(c.config, RandomWeights(c.shape, c.storage, 77), comm,
                        ExpertPlacement::contiguous(8, odd ? comm.size() + 1 : comm.size()));
  });
  if (odd) {
    EXPECT_NE(msg.find("the placement is for"), std::string::npos) << msg;
  } else {
    EXPECT_NE(msg.find("rank(s) " + std::to_string(victim) + " rejected the layer's configuration"),
              std::string::npos)
        << msg;
  }
  // The communicator still works.
  EXPECT_NO_THROW(comm.barrier());
}

// Causal states that diverge (one rank's state touched alone) are caught by verify_plan on every rank: a
// rank whose planner rejects the batch, or a rank whose plan differs.
TEST(ExpertParallel, VerifyPlanCatchesDivergedCausalState) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  if (comm.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int victim = comm.size() - 1;
  Case c = HarnessCase("mixtral_f32_deterministic");
  c.config.policy.scope = CapacityScope::kCausal;
  ExpertParallelOptions options;
  options.verify_plan = true;
  ExpertParallelLayer ep(c.config, RandomWeights(c.shape, c.storage, 77), comm, std::nullopt, options);
  std::vector<TokenMeta> meta;
  for (uint32_t p = 0; p < 4; ++p) meta.push_back({static_cast<uint64_t>(50 + comm.rank()), p});
  const moe::testing::Batch b = moe::testing::MakeBatch(meta, kHidden);
  std::vector<float> y(b.x.size());

  // The victim believes request 50 is already at position 2: its planner rejects the batch, the others don't.
  RoutingState state(8);
  if (comm.rank() == victim) state.get_or_create(50).next_position = 2;
  std::string msg = MessageOf([&] { ep.forward(b.x.data(), 4, meta, y.data(), &state); });
  EXPECT_NE(msg.find("the dispatch plan of rank(s) " + std::to_string(victim) + " differs from rank 0's"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("rank(s) " + std::to_string(victim) + " rejected the batch"), std::string::npos) << msg;

  // The victim believes request 50 already holds a slot of every expert: same positions, different plan.
  RoutingState fresh(8);
  if (comm.rank() == victim) fresh.get_or_create(50).slots_held.assign(8, 1);
  msg = MessageOf([&] { ep.forward(b.x.data(), 4, meta, y.data(), &fresh); });
  EXPECT_NE(msg.find("differs from rank 0's; the routing states have diverged"), std::string::npos) << msg;

  // Equal states: no error, and a batch every rank rejects is an invalid_argument everywhere.
  RoutingState good(8);
  EXPECT_NO_THROW(ep.forward(b.x.data(), 4, meta, y.data(), &good));
  RoutingState again(8);
  std::vector<TokenMeta> gap = meta;
  gap[3].position = 9;
  ExpectInvalidEverywhere([&] { ep.forward(b.x.data(), 4, gap, y.data(), &again); }, "contiguous");
}

// Ranks may run different thread counts (num_threads is not part of the config hash): same bits.
TEST(ExpertParallel, MixedThreadCountsAcrossRanks) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  Case c = HarnessCase("qwen2_bf16_deterministic_reroute");
  c.config.num_threads = 1 + comm.rank() % 2;
  const Outcome o = RunAgainstReference(comm, c, 2, 700);
  EXPECT_EQ(o.mismatched_batches, 0);
}

}  // namespace
}  // namespace moe::parallel

int main(int argc, char** argv) {
  moe::parallel::MpiSession session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  return moe::testing::RunAllTestsOnEveryRank();
}

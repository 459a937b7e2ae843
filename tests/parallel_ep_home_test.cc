// Expert parallelism at scale, under mpirun with 1, 2 and 4 ranks (tests/cmake/parallel.cmake): home-rank
// planning (ExpertParallelOptions::planning = kHome: each rank plans its own rows, O(E) counts per step),
// redundant experts under it, and ranks that hold only their part of the layer (read from a checkpoint or
// passed from memory).
//
// The property throughout: every rank's output rows are bitwise equal (memcmp) to the matching rows of a
// single-process MoELayer run on the concatenated batch, and its plan's pairs (expert, weight bits, status)
// equal that plan's on its rows - for every per-request scope, batch scope (planned as slices) and dropless
// scope, any world size, placement (replicas included) and split that keeps a request's rows of a step on
// one rank. Every rank builds the same batches (a pure function of a seed); rank 0 prints gtest's output.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/io/checkpoint.h"
#include "moe/parallel/eplb.h"
#include "moe/parallel/expert_parallel_layer.h"
#include "moe/parallel/mpi_communicator.h"
#include "tests/support/allocation_counter.h"
#include "tests/support/layer_fixtures.h"
#include "tests/support/mpi_gtest.h"

namespace moe::parallel {
namespace {

using moe::testing::Batch;
using moe::testing::MakeBatch;

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

ExpertParallelOptions Home(bool verify = false) {
  ExpertParallelOptions o;
  o.planning = EpPlanning::kHome;
  o.verify_plan = verify;
  return o;
}

// A batch whose requests each live on one rank (their home: fixed per request id), rows shuffled within each
// rank, the ranks' rows concatenated in rank order; with two or more ranks one rank may get nothing.
struct HomeBatch {
  Batch batch;
  std::vector<int64_t> offsets;  // rank r holds rows [offsets[r], offsets[r + 1])
  struct Request {
    uint64_t id;
    uint32_t first, length;  // positions [first, first + length) in this batch
  };
  std::vector<Request> requests;
};

int HomeOf(uint64_t id, int world) {
  return static_cast<int>(mix64(id * 977) % static_cast<uint64_t>(world));
}

// `first_position`: the positions continue an earlier call's (the same requests, longer).
HomeBatch MakeHomeBatch(uint64_t seed, int world, int max_requests = 8, int max_len = 20,
                        uint32_t first_position = 0) {
  std::mt19937_64 rng(seed);
  HomeBatch h;
  const int n = 2 + static_cast<int>(rng() % (max_requests - 1));
  std::vector<std::vector<TokenMeta>> rows(world);
  for (int r = 0; r < n; ++r) {
    const uint64_t id = 100 + seed % 7 + static_cast<uint64_t>(r) * 11;
    const uint32_t len = 1 + static_cast<uint32_t>(rng() % max_len);
    h.requests.push_back({id, first_position, len});
    for (uint32_t i = 0; i < len; ++i) rows[HomeOf(id, world)].push_back({id, first_position + i});
  }
  std::vector<TokenMeta> meta;
  h.offsets.push_back(0);
  for (int r = 0; r < world; ++r) {
    std::shuffle(rows[r].begin(), rows[r].end(), rng);
    meta.insert(meta.end(), rows[r].begin(), rows[r].end());
    h.offsets.push_back(static_cast<int64_t>(meta.size()));
  }
  h.batch = MakeBatch(meta, kHidden);
  return h;
}

struct HomeCase {
  std::string name;
  io::LayerShape shape;
  kernels::DType storage;
  MoELayerConfig config;
};

// Invariant kernels (bitwise equality holds), every scope the home ranks plan: per-request (with drop and
// reroute, request and score priority), batch (arrival, as slices), dropless; f32 and bf16 weights (bf16
// compute), a gated shared expert.
std::vector<HomeCase> HomeCases() {
  std::vector<HomeCase> out;
  auto add = [&](const std::string& name, const io::LayerShape& shape, kernels::DType storage,
                 const std::function<void(MoELayerConfig&)>& edit) {
    MoELayerConfig c = moe::testing::SmallConfig("deterministic", shape.num_experts, 2);
    c.max_tokens = 16;  // smaller than some batches: the workspace grows once
    edit(c);
    out.push_back({name, shape, storage, c});
  };
  const io::LayerShape mixtral = moe::testing::SmallShape(kHidden, 48, 8);
  add("stable", mixtral, kernels::DType::kF32, [](MoELayerConfig&) {});
  add("stable_reroute", mixtral, kernels::DType::kF32, [](MoELayerConfig& c) {
    c.policy.overflow = Overflow::kReroute;
    c.policy.reroute_depth = 2;
  });
  add("request_score_reroute", mixtral, kernels::DType::kF32, [](MoELayerConfig& c) {
    c.policy.scope = CapacityScope::kRequest;
    c.policy.priority = Priority::kScore;
    c.policy.overflow = Overflow::kReroute;
  });
  add("causal", mixtral, kernels::DType::kF32,
      [](MoELayerConfig& c) { c.policy.scope = CapacityScope::kCausal; });
  add("batch_arrival", mixtral, kernels::DType::kF32, [](MoELayerConfig& c) {
    c.policy.scope = CapacityScope::kBatch;
    c.policy.priority = Priority::kArrival;
    c.policy.capacity_factor = 0.75;
    c.policy.renormalize_survivors = true;
  });
  add("dropless_score", mixtral, kernels::DType::kF32, [](MoELayerConfig& c) {
    c.policy.scope = CapacityScope::kNone;
    c.policy.priority = Priority::kScore;
  });
  io::LayerShape qwen = moe::testing::Qwen2LikeShape();
  qwen.hidden = kHidden;
  add("qwen2_bf16_stable", qwen, kernels::DType::kBF16,
      [](MoELayerConfig& c) { c.compute = kernels::ComputePrecision::kBF16; });
  add("qwen2_bf16_batch", qwen, kernels::DType::kBF16, [](MoELayerConfig& c) {
    c.compute = kernels::ComputePrecision::kBF16;
    c.policy.scope = CapacityScope::kBatch;
    c.policy.priority = Priority::kArrival;
    c.policy.capacity_factor = 1.0;
  });
  return out;
}

struct PairOutcome {
  int32_t expert;
  uint32_t weight_bits;
  PairStatus status;
  bool operator==(const PairOutcome&) const = default;
};
PairOutcome OutcomeOf(const DispatchPlan& plan, int64_t pair) {
  return {plan.pair_expert[pair], std::bit_cast<uint32_t>(plan.pair_weight[pair]), plan.pair_status[pair]};
}

// One step on `ep` (this rank's rows of `b`) against the reference's plan and output of the whole batch:
// returns the number of mismatched rows or pairs on this rank.
int64_t CompareStep(ExpertParallelLayer& ep, const HomeBatch& b, const DispatchPlan& ref_plan,
                    const std::vector<float>& y_ref, RoutingState* state) {
  Communicator& comm = ep.communicator();
  const int64_t first = b.offsets[comm.rank()], rows = b.offsets[comm.rank() + 1] - first;
  const int k = ep.top_k();
  std::vector<float> y(static_cast<size_t>(std::max<int64_t>(rows, 1) * kHidden), -1.0f);
  MoEStats stats;
  ep.forward(b.batch.x.data() + first * kHidden, static_cast<int>(rows),
             std::span<const TokenMeta>(b.batch.meta.data() + first, static_cast<size_t>(rows)), y.data(),
             state, &stats);
  int64_t bad = 0;
  if (rows > 0 && std::memcmp(y.data(), y_ref.data() + first * kHidden, rows * kHidden * sizeof(float)) != 0)
    ++bad;
  for (int64_t t = 0; t < rows; ++t) {
    for (int j = 0; j < k; ++j)
      bad += !(OutcomeOf(ep.last_plan(), t * k + j) == OutcomeOf(ref_plan, (first + t) * k + j));
  }
  // The ranks' stats add up to the whole batch's.
  std::vector<size_t> kept(comm.size());
  comm.all_gather_sizes(static_cast<size_t>(stats.num_kept), kept);
  int64_t total = 0;
  for (size_t n : kept) total += static_cast<int64_t>(n);
  EXPECT_EQ(total, ref_plan.num_kept);
  EXPECT_EQ(ep.last_global_tokens(), b.offsets.back());
  EXPECT_EQ(ep.last_token_offset(), first);
  return bad;
}

// Runs `calls` forward calls of the same requests (call c: each request's next `length` positions) on an EP
// layer of `placement` and on a single-process MoELayer; sequence and prefix scopes admit every request on
// its home rank (and all of them on the reference's state).
void RunAgainstReference(Communicator& comm, const HomeCase& s, uint64_t seed, int calls,
                         std::optional<ExpertPlacement> placement = std::nullopt) {
  auto weights = moe::testing::RandomWeights(s.shape, s.storage, 77);
  ExpertParallelLayer ep(s.config, weights, comm, placement, Home());
  ASSERT_TRUE(ep.plans_locally()) << s.name;
  MoELayerConfig ref_config = s.config;
  ref_config.max_tokens = 512;
  MoELayer ref(ref_config, weights);
  const int E = s.shape.num_experts, k = s.config.router.top_k;
  RoutingState state(E, k), ref_state(E, k);
  const bool stateful = rules::carries_routing_state(s.config.policy);
  const HomeBatch first = MakeHomeBatch(seed, comm.size(), 8, 12);
  std::map<uint64_t, uint32_t> length;
  for (const HomeBatch::Request& r : first.requests) length[r.id] = r.length;
  if (rules::pools_prompt(s.config.policy)) {
    std::vector<ExpertParallelLayer::Admission> mine;
    for (const HomeBatch::Request& r : first.requests) {
      const uint32_t prompt = r.length * static_cast<uint32_t>(calls);
      ref_state.admit(r.id, prompt);
      if (HomeOf(r.id, comm.size()) == comm.rank()) mine.push_back({r.id, prompt});
    }
    ep.admit_requests(mine, state);
  }
  int64_t drops = 0;
  for (int call = 0; call < calls; ++call) {
    HomeBatch b = first;
    for (TokenMeta& m : b.batch.meta) m.position += static_cast<uint32_t>(call) * length[m.request_id];
    b.batch = MakeBatch(b.batch.meta, kHidden);
    std::vector<float> y_ref(b.batch.x.size());
    ref.forward(b.batch.x.data(), static_cast<int>(b.batch.meta.size()), b.batch.meta, y_ref.data(),
                stateful ? &ref_state : nullptr);
    drops += ref.last_plan().num_dropped;
    EXPECT_EQ(CompareStep(ep, b, ref.last_plan(), y_ref, stateful ? &state : nullptr), 0)
        << s.name << " call " << call << " on " << comm.size() << " ranks";
    EXPECT_EQ(ep.last_step().metadata_bytes_received, 0) << "no routing records move";
  }
  if (s.config.policy.scope != CapacityScope::kNone) {
    EXPECT_GT(drops, 0) << s.name << ": capacity must bind";
  }
}

TEST(HomePlanning, EqualsTheSingleProcessLayerOnTheConcatenatedBatch) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  for (const HomeCase& s : HomeCases()) {
    for (uint64_t seed : {11u, 12u})
      RunAgainstReference(comm, s, seed, s.config.policy.scope == CapacityScope::kCausal ? 2 : 1);
  }
}

// Sub-communicators of 1, 2 and 4 ranks in one job: the same bits for every world size.
TEST(HomePlanning, WorldSizes124) {
  MpiCommunicator world(MPI_COMM_WORLD, TestOptions());
  for (int group : {1, 2, 4}) {
    if (group > world.size() || world.size() % group != 0) continue;
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, world.rank() / group, world.rank(), &sub);
    {
      MpiCommunicator comm(sub, TestOptions());
      for (const HomeCase& s : HomeCases()) {
        if (s.name == "stable" || s.name == "batch_arrival") RunAgainstReference(comm, s, 21, 1);
      }
    }
    MPI_Comm_free(&sub);
  }
}

// Redundant experts under home planning: EPLB's placements (global and hierarchical), every expert everywhere
// (one rank holding two copies), all experts on the last rank.
TEST(HomePlanning, RedundantExpertsAndPlacements) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  const int P = comm.size();
  const std::vector<float> load = {900, 20, 300, 40, 50, 600, 70, 10};
  std::vector<std::vector<int>> everywhere(8);
  for (int e = 0; e < 8; ++e) {
    for (int r = 0; r <= P; ++r) everywhere[e].push_back((e + r) % P);
  }
  const ExpertPlacement placements[] = {
      ExpertPlacement::from_replication(eplb::rebalance_global(load, 8 + 2 * P, P)),
      ExpertPlacement::from_replication(eplb::rebalance(load, 8 + 4 * P, 4, P % 2 == 0 ? 2 : 1, P)),
      ExpertPlacement::from_replicas(everywhere, P),
      ExpertPlacement::from_map(std::vector<int>(8, P - 1), P)};
  for (const ExpertPlacement& placement : placements) {
    for (const HomeCase& s : HomeCases()) {
      if (s.name == "stable" || s.name == "batch_arrival") RunAgainstReference(comm, s, 31, 1, placement);
    }
  }
}

// Policies that need the whole batch (batch scope with score priority or reroute) fall back to the global
// gather; requests may then be split over ranks.
TEST(HomePlanning, PoliciesThatNeedTheWholeBatchGather) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  auto weights =
      moe::testing::RandomWeights(moe::testing::SmallShape(kHidden, 48, 8), kernels::DType::kF32, 5);
  for (const auto& edit : std::vector<std::function<void(DispatchPolicy&)>>{
           [](DispatchPolicy& p) { p.priority = Priority::kScore; },
           [](DispatchPolicy& p) { p.overflow = Overflow::kReroute; }}) {
    MoELayerConfig c = moe::testing::SmallConfig("deterministic", 8, 2);
    c.policy.scope = CapacityScope::kBatch;
    c.policy.priority = Priority::kArrival;
    edit(c.policy);
    ExpertParallelLayer ep(c, weights, comm, std::nullopt, Home());
    EXPECT_FALSE(ep.plans_locally());
    MoELayer ref(c, weights);
    std::vector<TokenMeta> meta;
    for (uint32_t i = 0; i < 24; ++i) meta.push_back({i % 3, i / 3});  // requests split over ranks
    const Batch b = MakeBatch(meta, kHidden);
    std::vector<float> y_ref(b.x.size());
    ref.forward(b.x.data(), 24, meta, y_ref.data());
    const int64_t first = 24 * comm.rank() / comm.size(), last = 24 * (comm.rank() + 1) / comm.size();
    std::vector<float> y(static_cast<size_t>(std::max<int64_t>(last - first, 1) * kHidden));
    ep.forward(b.x.data() + first * kHidden, static_cast<int>(last - first),
               std::span<const TokenMeta>(meta.data() + first, static_cast<size_t>(last - first)), y.data());
    EXPECT_EQ(std::memcmp(y.data(), y_ref.data() + first * kHidden, (last - first) * kHidden * sizeof(float)),
              0);
    EXPECT_FALSE(ep.last_step().planned_locally);
    EXPECT_GT(ep.last_step().metadata_bytes_received, 0);
  }
}

// Bytes per step: a fixed batch per rank moves the same counts whatever the world size - 4 bytes per expert
// held by each destination (per-request scopes), plus the claim counts and their scans (8 bytes per choice
// rank and expert, each way) under batch scope - and no routing record.
TEST(HomePlanning, CountBytesDoNotGrowWithTheWorld) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  for (const HomeCase& s : HomeCases()) {
    if (s.name != "stable" && s.name != "batch_arrival") continue;
    auto weights = moe::testing::RandomWeights(s.shape, s.storage, 3);
    ExpertParallelLayer ep(s.config, weights, comm, std::nullopt, Home());
    std::vector<TokenMeta> meta;
    for (uint32_t i = 0; i < 16; ++i) meta.push_back({static_cast<uint64_t>(comm.rank()) * 2 + i % 2, i / 2});
    const Batch b = MakeBatch(meta, kHidden);
    std::vector<float> y(b.x.size());
    ep.forward(b.x.data(), 16, meta, y.data());
    const ExpertParallelStepStats& st = ep.last_step();
    const int64_t E = 8, k = 2;
    const int64_t want = 4 * E + (s.name == "batch_arrival" ? 2 * 8 * k * E : 0);
    EXPECT_EQ(st.count_bytes_sent, want) << s.name;
    EXPECT_EQ(st.count_bytes_received, want) << s.name;
    EXPECT_EQ(st.metadata_bytes_sent + st.metadata_bytes_received, 0);
    EXPECT_EQ(st.size_bytes_received, static_cast<int64_t>(8 * comm.size()));
  }
}

// verify_plan under kHome: a request whose rows sit on two ranks in one step is refused on every rank, by
// name.
TEST(HomePlanning, VerifyPlanCatchesARequestOnTwoRanks) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  if (comm.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto weights = moe::testing::RandomWeights(moe::testing::SmallShape(kHidden, 48, 8));
  ExpertParallelLayer ep(moe::testing::SmallConfig("deterministic", 8, 2), weights, comm, std::nullopt,
                         Home(true));
  std::vector<TokenMeta> meta = {{static_cast<uint64_t>(50 + comm.rank()), 0}};
  if (comm.rank() == 1) meta[0] = {50, 1};  // request 50 also on rank 1
  const Batch b = MakeBatch(meta, kHidden);
  std::vector<float> y(b.x.size());
  const std::string msg = MessageOf([&] { ep.forward(b.x.data(), 1, meta, y.data()); });
  EXPECT_NE(msg.find("request 50 has rows on ranks 0 and 1 in one step"), std::string::npos) << msg;
  meta[0] = {static_cast<uint64_t>(50 + comm.rank()), 0};
  EXPECT_NO_THROW(ep.forward(b.x.data(), 1, meta, y.data()));
}

// A rank whose own batch its planner rejects (causal positions that skip) fails every rank in the same step;
// no rank's routing state moves.
TEST(HomePlanning, ALocalPlanErrorFailsEveryRankAndChangesNoState) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  MoELayerConfig c = moe::testing::SmallConfig("deterministic", 8, 2);
  c.policy.scope = CapacityScope::kCausal;
  ExpertParallelLayer ep(c, moe::testing::RandomWeights(moe::testing::SmallShape(kHidden, 48, 8)), comm,
                         std::nullopt, Home());
  const int victim = comm.size() - 1;
  RoutingState state(8);
  std::vector<TokenMeta> meta;
  for (uint32_t p = 0; p < 4; ++p) meta.push_back({static_cast<uint64_t>(60 + comm.rank()), p});
  if (comm.rank() == victim) meta[3].position = 9;
  const Batch b = MakeBatch(meta, kHidden);
  std::vector<float> y(b.x.size());
  const std::string msg = MessageOf([&] { ep.forward(b.x.data(), 4, meta, y.data(), &state); });
  if (comm.rank() == victim) {
    EXPECT_NE(msg.find("contiguous"), std::string::npos) << msg;
  } else {
    EXPECT_NE(msg.find("rank(s) " + std::to_string(victim) + " rejected their input"), std::string::npos)
        << msg;
  }
  EXPECT_EQ(state.num_requests(), 0u) << "no request was created";
  meta[3].position = 3;
  EXPECT_NO_THROW(ep.forward(b.x.data(), 4, meta, y.data(), &state));
  EXPECT_EQ(state.find(60 + comm.rank())->next_position, 4u);
}

// The same step again and again allocates nothing after the first (state-free: every request's rows are its
// whole prompt, causal requests start fresh).
TEST(HomePlanning, NoAllocationAfterWarmUp) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  for (const HomeCase& s : HomeCases()) {
    ExpertParallelLayer ep(s.config, moe::testing::RandomWeights(s.shape, s.storage, 7), comm, std::nullopt,
                           Home());
    const HomeBatch b = MakeHomeBatch(900, comm.size(), 8, 30);
    const int64_t first = b.offsets[comm.rank()], rows = b.offsets[comm.rank() + 1] - first;
    std::vector<float> y(static_cast<size_t>(std::max<int64_t>(rows, 1) * kHidden));
    const std::span<const TokenMeta> meta(b.batch.meta.data() + first, static_cast<size_t>(rows));
    auto step = [&] {
      ep.forward(b.batch.x.data() + first * kHidden, static_cast<int>(rows), meta, y.data());
    };
    step();  // warm-up (grows past max_tokens)
    const long before = moe::testing::allocation_count();
    for (int i = 0; i < 3; ++i) step();
    EXPECT_EQ(moe::testing::allocation_count() - before, 0) << s.name << " rank " << comm.rank();
  }
}

// ---- Each rank holds only its part ------------------------------------------------------------------------

// A Mixtral checkpoint directory (config.json + model.safetensors) written by rank 0.
std::filesystem::path WriteCheckpoint(Communicator& comm, const io::LayerWeights& w) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("moe_ep_home_" + std::to_string(static_cast<long>(getppid())));
  if (comm.rank() == 0) {
    std::filesystem::create_directories(dir);
    io::save_layer(w, io::Architecture::kMixtral, 0, dir / "model.safetensors");
    std::ofstream(dir / "config.json")
        << R"({"model_type": "mixtral", "hidden_size": )" << w.shape().hidden << R"(, "intermediate_size": )"
        << w.shape().expert_ff << R"(, "num_local_experts": )" << w.shape().num_experts
        << R"(, "num_experts_per_tok": 2, "num_hidden_layers": 1, "vocab_size": 32, "num_attention_heads": 4,
             "num_key_value_heads": 4, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
             "hidden_act": "silu"})";
  }
  comm.barrier();
  return dir;
}

// Every rank reads only its experts (plus the router gate) from the checkpoint; the layer equals the
// single-process layer on the whole checkpoint, and its weights hash equals the whole-weights EP layer's.
TEST(ShardedWeights, EachRankReadsItsExpertsFromACheckpoint) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  const io::LayerShape shape = moe::testing::SmallShape(kHidden, 48, 8);
  const io::LayerWeights whole = io::random_layer(shape, kernels::DType::kBF16, 41);
  const std::filesystem::path dir = WriteCheckpoint(comm, whole);
  std::vector<float> load(8);
  for (int e = 0; e < 8; ++e) load[e] = static_cast<float>(100 + 97 * ((e * 3) % 8));
  const ExpertPlacement placements[] = {
      ExpertPlacement::contiguous(8, comm.size()),
      ExpertPlacement::from_replication(eplb::rebalance_global(load, 8 + 2 * comm.size(), comm.size()))};
  auto weights = std::make_shared<const io::LayerWeights>(io::random_layer(shape, kernels::DType::kBF16, 41));
  for (const ExpertPlacement& placement : placements) {
    auto ep = ExpertParallelLayer::from_pretrained(dir, 0, "deterministic", comm, placement, Home());
    EXPECT_EQ(ep->weights().held().is_all(), false);
    EXPECT_EQ(ep->weights().held().list(), placement.experts_of(comm.rank()));
    EXPECT_TRUE(ep->weights().zero_copy()) << "bf16 storage maps the file";
    MoELayer ref(ep->config(), weights);
    const HomeBatch b = MakeHomeBatch(51, comm.size());
    std::vector<float> y_ref(b.batch.x.size());
    ref.forward(b.batch.x.data(), static_cast<int>(b.batch.meta.size()), b.batch.meta, y_ref.data());
    EXPECT_EQ(CompareStep(*ep, b, ref.last_plan(), y_ref, nullptr), 0);
    ExpertParallelLayer from_whole(ep->config(), weights, comm, placement, Home());
    EXPECT_EQ(ep->fingerprint().weights_hash, from_whole.fingerprint().weights_hash);
    std::vector<size_t> hashes(comm.size());
    comm.all_gather_sizes(static_cast<size_t>(ep->fingerprint().weights_hash), hashes);
    for (size_t h : hashes) EXPECT_EQ(h, hashes[0]);
  }
  comm.barrier();
  if (comm.rank() == 0) std::filesystem::remove_all(dir);
}

// From memory, each rank passes only its experts (random_layer's and weights_from_views' parts); start-up
// catches a rank whose part lacks one of its experts, and replicas of an expert that differ.
TEST(ShardedWeights, PartsFromMemoryAndTheirChecks) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  const int P = comm.size(), me = comm.rank(), victim = P - 1;
  const io::LayerShape shape = moe::testing::SmallShape(kHidden, 48, 8);
  const MoELayerConfig config = moe::testing::SmallConfig("deterministic", 8, 2);
  const ExpertPlacement placement = ExpertPlacement::contiguous(8, P);
  auto part = std::make_shared<const io::LayerWeights>(
      io::random_layer(shape, kernels::DType::kF32, 9, io::ExpertSet::only(placement.experts_of(me))));
  ExpertParallelLayer ep(config, part, comm, placement, Home());
  const HomeBatch b = MakeHomeBatch(61, P);
  auto whole = moe::testing::RandomWeights(shape, kernels::DType::kF32, 9);
  MoELayer ref(config, whole);
  std::vector<float> y_ref(b.batch.x.size());
  ref.forward(b.batch.x.data(), static_cast<int>(b.batch.meta.size()), b.batch.meta, y_ref.data());
  EXPECT_EQ(CompareStep(ep, b, ref.last_plan(), y_ref, nullptr), 0);
  EXPECT_EQ(ep.fingerprint().weights_hash,
            ExpertParallelLayer(config, whole, comm, placement).fingerprint().weights_hash);

  // The victim's part lacks its first expert: every rank refuses.
  std::vector<int> mine = placement.experts_of(me);
  if (me == victim) mine.erase(mine.begin());
  auto short_part = std::make_shared<const io::LayerWeights>(
      io::random_layer(shape, kernels::DType::kF32, 9, io::ExpertSet::only(mine)));
  std::string msg = MessageOf([&] { ExpertParallelLayer(config, short_part, comm, placement, Home()); });
  if (me == victim) {
    EXPECT_NE(msg.find("but the placement gives rank " + std::to_string(victim) + " expert"),
              std::string::npos)
        << msg;
  } else {
    EXPECT_NE(msg.find("rank(s) " + std::to_string(victim) + " rejected the layer's configuration"),
              std::string::npos)
        << msg;
  }
  if (P < 2) return;
  // Expert 0 on every rank; the victim's copy has one changed value (weights_from_views, copied).
  std::vector<std::vector<int>> replicas(8);
  for (int e = 0; e < 8; ++e) replicas[e] = {e % P};
  for (int r = 1; r < P; ++r) replicas[0].push_back(r);
  const ExpertPlacement with_copies = ExpertPlacement::from_replicas(replicas, P);
  const std::vector<int> held = with_copies.experts_of(me);
  io::LayerViews views;
  views.router_gate = whole->router_gate();
  views.part = io::ExpertSet::only(held);
  for (int e : held) views.experts.push_back(whole->experts()[e]);
  std::vector<float> changed;
  if (me == victim) {
    const kernels::MatrixView& g = whole->experts()[0].gate_proj;
    const float* src = static_cast<const float*>(g.data);
    changed.assign(src, src + g.rows * g.cols);
    changed[5] += 1.0f;
    views.experts[0].gate_proj =
        kernels::MatrixView{changed.data(), kernels::DType::kF32, g.rows, g.cols, g.cols};
  }
  auto copied = std::make_shared<const io::LayerWeights>(
      io::weights_from_views(shape, views, kernels::DType::kF32, io::Ownership::kCopy));
  msg = MessageOf([&] { ExpertParallelLayer(config, copied, comm, with_copies, Home()); });
  EXPECT_NE(msg.find("layer weights differ across the replicas of an expert: expert 0 on rank 0"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("and rank " + std::to_string(victim)), std::string::npos) << msg;
  EXPECT_NO_THROW(comm.barrier());
}

// ---- Serving on home ranks
// ---------------------------------------------------------------------------------

// Sequence scope's serving property on home ranks: requests admitted on their rank, prompts chunked at
// random, strangers arriving, rows shuffled within each rank; now and then a live request moves to another
// rank (its recorded segments carried over and restored there, released on the old one). Every probe's pairs
// and output rows equal the probe alone, unchunked, on a single-process layer.
TEST(HomePlanning, ServedProbesOnHomeRanksEqualTheProbeAlone) {
  MpiCommunicator comm(MPI_COMM_WORLD, TestOptions());
  const int P = comm.size(), me = comm.rank();
  const io::LayerShape shape = moe::testing::SmallShape(kHidden, 48, 8);
  MoELayerConfig config = moe::testing::SmallConfig("deterministic", 8, 2);
  config.policy.scope = CapacityScope::kSequence;
  config.max_tokens = 128;
  auto weights = moe::testing::RandomWeights(shape, kernels::DType::kF32, 81);
  ExpertParallelLayer ep(config, weights, comm, std::nullopt, Home());
  MoELayer ref(config, weights);
  const int k = 2;
  std::mt19937_64 rng(2028);  // the same draws on every rank
  int64_t mismatches = 0, probe_drops = 0, moved = 0;
  int draws = 0;
  for (int trial = 0; trial < 60; ++trial) {
    struct Live {
      uint64_t id;
      uint32_t prompt, next, end;
      int home;
      bool probe;
    };
    std::vector<Live> live;
    uint64_t next_id = 1000 * static_cast<uint64_t>(trial + 1);
    std::map<uint64_t, std::vector<PairOutcome>> want_pairs;
    std::map<uint64_t, std::vector<float>> want_y;
    RoutingState state(8, k, /*record=*/true);
    auto admit = [&](const Live& r) {
      std::vector<ExpertParallelLayer::Admission> a;
      if (r.home == me) a.push_back({r.id, r.prompt});
      ep.admit_requests(a, state);
    };
    for (int q = 0; q < 3; ++q) {
      const uint32_t prompt = 1 + static_cast<uint32_t>(rng() % 40);
      const Live r{
          next_id++, prompt, 0, prompt + static_cast<uint32_t>(rng() % 4), static_cast<int>(rng() % P), true};
      live.push_back(r);
      admit(r);
      std::vector<TokenMeta> meta;
      for (uint32_t p = 0; p < r.end; ++p) meta.push_back({r.id, p});
      const Batch alone = MakeBatch(meta, kHidden);
      RoutingState alone_state(8, k);
      alone_state.admit(r.id, prompt);
      std::vector<float> y(alone.x.size());
      ref.forward(alone.x.data(), static_cast<int>(r.end), meta, y.data(), &alone_state);
      for (uint32_t p = 0; p < r.end * k; ++p) {
        want_pairs[r.id].push_back(OutcomeOf(ref.last_plan(), p));
        probe_drops += ref.last_plan().pair_status[p] == PairStatus::kDropped;
      }
      want_y[r.id] = std::move(y);
    }
    std::map<uint64_t, std::vector<PairOutcome>> got_pairs;
    for (int step = 0; !live.empty(); ++step) {
      if (rng() % 2 == 0) {  // a stranger arrives
        const uint32_t prompt = 1 + static_cast<uint32_t>(rng() % 48);
        live.push_back({next_id++, prompt, 0, prompt + static_cast<uint32_t>(rng() % 6),
                        static_cast<int>(rng() % P), false});
        admit(live.back());
      }
      if (P > 1 && rng() % 3 == 0) {  // a live request that has started moves to another rank
        Live& r = live[rng() % live.size()];
        if (r.next > 0) {
          const int to = (r.home + 1 + static_cast<int>(rng() % (P - 1))) % P;
          std::vector<uint8_t> bytes;
          if (me == r.home) bytes = state.segment(r.id, 0, r.next).serialize();
          std::vector<size_t> sizes(P);
          comm.all_gather_sizes(bytes.size(), sizes);
          std::vector<uint8_t> carried(sizes[r.home]);
          std::vector<uint8_t> all(std::accumulate(sizes.begin(), sizes.end(), size_t{0}));
          comm.all_gather_v(bytes.data(), bytes.size(), all.data(), sizes);
          size_t at = 0;
          for (int h = 0; h < r.home; ++h) at += sizes[h];
          std::copy(all.begin() + static_cast<std::ptrdiff_t>(at),
                    all.begin() + static_cast<std::ptrdiff_t>(at + sizes[r.home]), carried.begin());
          std::vector<uint64_t> leaving;
          if (me == r.home) leaving.push_back(r.id);
          ep.release_requests(leaving, state);
          std::vector<ExpertParallelLayer::Restoration> arriving;
          if (me == to) arriving.push_back({r.id, r.prompt, {RoutingSegment::parse(carried)}});
          ep.restore_requests(arriving, state);
          r.home = to;
          ++moved;
        }
      }
      std::vector<std::vector<TokenMeta>> rows(P);
      for (Live& r : live) {
        const uint32_t n =
            r.next < r.prompt ? std::min(r.prompt - r.next, 1 + static_cast<uint32_t>(rng() % 16)) : 1;
        for (uint32_t i = 0; i < n; ++i) rows[r.home].push_back({r.id, r.next + i});
        r.next += n;
      }
      for (auto& v : rows) std::shuffle(v.begin(), v.end(), rng);
      const Batch b = MakeBatch(rows[me], kHidden);
      const int n = static_cast<int>(rows[me].size());
      std::vector<float> y(static_cast<size_t>(std::max(n, 1)) * kHidden);
      ep.forward(b.x.data(), n, rows[me], y.data(), &state);
      for (int t = 0; t < n; ++t) {
        const TokenMeta& m = rows[me][t];
        auto it = want_y.find(m.request_id);
        if (it == want_y.end()) continue;
        mismatches += std::memcmp(y.data() + t * kHidden, it->second.data() + m.position * kHidden,
                                  kHidden * sizeof(float)) != 0;
        auto& got = got_pairs[m.request_id];
        got.resize(want_pairs[m.request_id].size(), PairOutcome{-2, 0, PairStatus::kDropped});
        for (int j = 0; j < k; ++j)
          got[static_cast<size_t>(m.position) * k + j] = OutcomeOf(ep.last_plan(), t * k + j);
      }
      std::vector<uint64_t> finished;
      for (size_t i = 0; i < live.size();) {
        if (live[i].next >= live[i].end) {
          if (live[i].home == me) finished.push_back(live[i].id);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
      ep.release_requests(finished, state);
    }
    EXPECT_EQ(state.num_requests(), 0u);
    // Each probe's pairs were seen on its home ranks: gather them (a probe's position is on one rank each).
    for (const auto& [id, want] : want_pairs) {
      std::vector<PairOutcome> mine = got_pairs[id];
      mine.resize(want.size(), PairOutcome{-2, 0, PairStatus::kDropped});
      std::vector<PairOutcome> merged(want.size());
      std::vector<size_t> sizes(P, want.size() * sizeof(PairOutcome));
      std::vector<PairOutcome> all(want.size() * P);
      comm.all_gather_v(mine.data(), mine.size() * sizeof(PairOutcome), all.data(), sizes);
      for (size_t p = 0; p < want.size(); ++p) {
        merged[p] = PairOutcome{-2, 0, PairStatus::kDropped};
        for (int r = 0; r < P; ++r) {
          if (all[r * want.size() + p].expert != -2) merged[p] = all[r * want.size() + p];
        }
      }
      EXPECT_TRUE(merged == want) << "trial " << trial << " probe " << id;
      ++draws;
    }
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GE(draws, 180);
  EXPECT_GT(probe_drops, 0) << "capacity must bind for the property to mean anything";
  if (P > 1) {
    EXPECT_GT(moved, 10);
  }
}

}  // namespace
}  // namespace moe::parallel

int main(int argc, char** argv) {
  moe::parallel::MpiSession session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  return moe::testing::RunAllTestsOnEveryRank();
}

// Expert parallelism in one process (SingleProcessCommunicator): placement rules, start-up checks, errors,
// and bit equality with MoELayer. The multi-rank behaviour is in parallel_ep_mpi_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/parallel/expert_parallel_layer.h"
#include "moe/parallel/single_process_communicator.h"
#include "tests/support/ep_fixtures.h"
#include "tests/support/expect_invalid.h"

namespace moe::parallel {
namespace {

using moe::testing::RandomWeights;

constexpr int64_t kHidden = 32;

using moe::testing::ExpectInvalid;

TEST(ExpertPlacement, ContiguousBlocks) {
  const ExpertPlacement p = ExpertPlacement::contiguous(8, 3);
  EXPECT_EQ(p.owners(), (std::vector<int>{0, 0, 1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(p.experts_of(1), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(p.describe(), "rank 0: 0-1, rank 1: 2-4, rank 2: 5-7");
  const ExpertPlacement sparse = ExpertPlacement::contiguous(2, 4);
  EXPECT_EQ(sparse.owners(), (std::vector<int>{1, 3}));
  EXPECT_EQ(sparse.describe(), "rank 0: none, rank 1: 0, rank 2: none, rank 3: 1");
  EXPECT_EQ(ExpertPlacement::from_map({0, 0, 1, 1, 1, 2, 2, 2}, 3).hash(), p.hash());
  EXPECT_NE(ExpertPlacement::from_map({0, 0, 1, 1, 1, 2, 2, 1}, 3).hash(), p.hash());
  EXPECT_NE(ExpertPlacement::contiguous(8, 4).hash(), ExpertPlacement::contiguous(8, 2).hash());
}

TEST(ExpertPlacement, RejectsBadMaps) {
  ExpectInvalid(
      [] {
        ExpertPlacement::from_map({0, 1, 2}, 2);
      },
      "expert 2 is placed on rank 2, outside [0, 2)");
  ExpectInvalid([] { ExpertPlacement::from_map({0, -1}, 2); }, "expert 1 is placed on rank -1");
  ExpectInvalid([] { ExpertPlacement::from_map({}, 2); }, "empty");
  ExpectInvalid([] { ExpertPlacement::contiguous(0, 2); }, "num_experts (0) must be >= 1");
  ExpectInvalid([] { ExpertPlacement::contiguous(4, 0); }, "world_size (0) must be >= 1");
}

TEST(ExpertParallelLayer, RejectsPlacementAndConfigThatDoNotFit) {
  SingleProcessCommunicator comm;
  auto weights = RandomWeights(moe::testing::SmallShape(kHidden, 48, 8));
  const MoELayerConfig config = moe::testing::SmallConfig("deterministic", 8, 2);
  ExpectInvalid([&] { ExpertParallelLayer(config, weights, comm, ExpertPlacement::contiguous(4, 1)); },
                "the placement maps 4 experts but the layer has 8");
  ExpectInvalid([&] { ExpertParallelLayer(config, weights, comm, ExpertPlacement::contiguous(8, 2)); },
                "the placement is for 2 ranks but the communicator has 1");
  ExpectInvalid(
      [&] { ExpertParallelLayer(moe::testing::SmallConfig("deterministic", 16, 2), weights, comm); },
      "the router has 16 experts but the weights have 8");
  ExpectInvalid([&] { ExpertParallelLayer(config, nullptr, comm); }, "weights must not be null");
}

// A device-memory communicator (what NCCL reports) is refused by the CPU layer with a message that says why.
class FakeDeviceCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "nccl"; }
  MemorySpace memory_space() const override { return MemorySpace::kCudaDevice; }
  [[noreturn]] void abort(std::string_view) override { std::abort(); }

 protected:
  void do_all_gather_v(const void* send, size_t bytes, void* recv, std::span<const size_t>) override {
    std::memcpy(recv, send, bytes);
  }
  void do_all_to_all_v(const void* send, std::span<const size_t> bytes, void* recv,
                       std::span<const size_t>) override {
    std::memcpy(recv, send, bytes[0]);
  }
  void do_barrier() override {}
  void do_broadcast(void*, size_t, int) override {}
};

TEST(ExpertParallelLayer, RefusesDeviceMemoryCommunicators) {
  FakeDeviceCommunicator comm;
  ExpectInvalid(
      [&] {
        ExpertParallelLayer(moe::testing::SmallConfig("deterministic", 8, 2),
                            RandomWeights(moe::testing::SmallShape(kHidden, 48, 8)), comm);
      },
      "works on cuda-device memory; this CPU layer needs a host-memory communicator");
}

TEST(ExpertParallelLayer, OneRankEqualsMoELayerBits) {
  SingleProcessCommunicator comm;
  io::LayerShape shape = moe::testing::SmallShape(kHidden, 48, 8);
  shape.num_shared_experts = 1;
  shape.shared_ff = 40;
  shape.shared_expert_gate = true;
  for (const char* preset : {"deterministic", "greedy"}) {
    for (int threads : {1, 2}) {
      auto weights = RandomWeights(shape, kernels::DType::kBF16, 5);
      MoELayerConfig config = moe::testing::SmallConfig(preset, 8, 2, threads);
      config.policy.capacity_factor = 1.0;
      config.policy.overflow = Overflow::kReroute;
      config.max_tokens = 16;
      ExpertParallelLayer ep(config, weights, comm);
      MoELayer ref(config, weights);
      EXPECT_EQ(ep.local_experts().size(), 8u);
      for (uint64_t seed = 1; seed <= 3; ++seed) {
        const moe::testing::GlobalBatch g = moe::testing::MakeGlobalBatch(seed, 1, kHidden);
        const int T = static_cast<int>(g.batch.meta.size());
        std::vector<float> y(g.batch.x.size()), y_ref(g.batch.x.size());
        MoEStats stats, ref_stats;
        ep.forward(g.batch.x.data(), T, g.batch.meta, y.data(), nullptr, &stats);
        ref.forward(g.batch.x.data(), T, g.batch.meta, y_ref.data(), nullptr, &ref_stats);
        // With one rank the expert FFN calls are exactly MoELayer's, so even fast kernels match.
        EXPECT_TRUE(moe::testing::SliceBitEqual(y, y_ref, 0, T, kHidden)) << preset << " threads " << threads;
        EXPECT_EQ(plan_hash(ep.last_plan()), plan_hash(ref.last_plan()));
        EXPECT_EQ(stats.expert_load, ref_stats.expert_load);
        EXPECT_EQ(ep.last_step().rows_sent_remote, 0);
        EXPECT_EQ(ep.last_step().metadata_bytes_received, T * static_cast<int64_t>(ep.record_bytes()));
      }
    }
  }
}

TEST(ExpertParallelLayer, BadInputIsInvalidArgument) {
  SingleProcessCommunicator comm;
  ExpertParallelLayer ep(moe::testing::SmallConfig("deterministic", 8, 2),
                         RandomWeights(moe::testing::SmallShape(kHidden, 48, 8)), comm);
  std::vector<TokenMeta> meta = {{1, 0}, {1, 1}};
  moe::testing::Batch b = moe::testing::MakeBatch(meta, kHidden);
  std::vector<float> y(b.x.size());
  ExpectInvalid([&] { ep.forward(b.x.data(), 2, std::span<const TokenMeta>(meta.data(), 1), y.data()); },
                "token metadata has 1 rows but x has 2");
  ExpectInvalid([&] { ep.forward(b.x.data(), 2, meta, b.x.data()); }, "y must not overlap x");
  b.x[5] = std::numeric_limits<float>::infinity();
  b.x[6] = -std::numeric_limits<float>::infinity();
  ExpectInvalid([&] { ep.forward(b.x.data(), 2, meta, y.data()); }, "token row 0 has no finite logit");
  b = moe::testing::MakeBatch(meta, kHidden);
  EXPECT_NO_THROW(ep.forward(b.x.data(), 2, meta, y.data()));
  EXPECT_EQ(ep.fingerprint().world_size, 1);
}

}  // namespace
}  // namespace moe::parallel

namespace moe::parallel {
namespace {

// A part of a layer (a rank's experts) is for an expert-parallel layer; the single-process layer refuses it.
TEST(ExpertParallelLayer, SingleProcessLayersRefuseParts) {
  const io::LayerShape shape = moe::testing::SmallShape(32, 48, 8);
  auto part = std::make_shared<const io::LayerWeights>(
      io::random_layer(shape, kernels::DType::kF32, 1, io::ExpertSet::only({0, 1, 2})));
  moe::testing::ExpectInvalid([&] { MoELayer(moe::testing::SmallConfig("deterministic", 8, 2), part); },
                              "MoELayer needs every expert's weights; these hold 3 of 8 (experts 0-2");
}

// Home planning at world size 1 is the single-process layer, bit for bit, plans included.
TEST(ExpertParallelLayer, OneRankHomePlanningEqualsMoELayerBits) {
  SingleProcessCommunicator comm;
  auto weights = moe::testing::RandomWeights(moe::testing::SmallShape(32, 48, 8));
  for (const char* preset : {"deterministic", "greedy"}) {
    const MoELayerConfig config = moe::testing::SmallConfig(preset, 8, 2);
    ExpertParallelOptions options;
    options.planning = EpPlanning::kHome;
    ExpertParallelLayer ep(config, weights, comm, std::nullopt, options);
    EXPECT_TRUE(ep.plans_locally());
    MoELayer ref(config, weights);
    std::vector<TokenMeta> meta;
    for (uint32_t i = 0; i < 40; ++i) meta.push_back({i % 5, i / 5});
    const moe::testing::Batch b = moe::testing::MakeBatch(meta, 32);
    std::vector<float> y(b.x.size()), y_ref(b.x.size());
    ep.forward(b.x.data(), 40, meta, y.data());
    ref.forward(b.x.data(), 40, meta, y_ref.data());
    EXPECT_EQ(std::memcmp(y.data(), y_ref.data(), y.size() * sizeof(float)), 0) << preset;
    EXPECT_EQ(plan_hash(ep.last_plan()), plan_hash(ref.last_plan())) << preset;
  }
  EXPECT_EQ(parse_ep_planning("home"), EpPlanning::kHome);
  moe::testing::ExpectInvalid([] { parse_ep_planning("local"); }, "'local' is not one of: global, home");
}

}  // namespace
}  // namespace moe::parallel

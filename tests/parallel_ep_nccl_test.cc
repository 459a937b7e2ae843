// Expert parallelism over the NCCL transport, world size 1 (one GPU): the CPU ExpertParallelLayer runs on a
// HostStagedCommunicator wrapping an NcclCommunicator, so its metadata all-gather and both all-to-alls go
// through grouped ncclSend/ncclRecv on device memory; the output must be bitwise equal to MoELayer's.
// Under mpirun with one GPU per rank the same code runs at any world size (docs/expert-parallel.md).
// Without a CUDA device every test skips and says why.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "moe/parallel/eplb.h"
#include "moe/parallel/expert_parallel_layer.h"
#include "moe/parallel/host_staged_communicator.h"
#include "moe/parallel/nccl_communicator.h"
#include "moe/parallel/single_process_communicator.h"
#include "tests/cuda_gpu_test_util.h"
#include "tests/support/ep_fixtures.h"

namespace moe::parallel {
namespace {

class EpNcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MOE_REQUIRE_GPU();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    NcclConfig config;
    config.device = 0;
    config.stream = stream_;
    config.options.timeout = std::chrono::seconds(30);
    nccl_ = NcclCommunicator::create(bootstrap_, config);
    staged_ = std::make_unique<HostStagedCommunicator>(*nccl_, 0, nccl_->stream());
  }
  void TearDown() override {
    staged_.reset();
    nccl_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  SingleProcessCommunicator bootstrap_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<NcclCommunicator> nccl_;
  std::unique_ptr<HostStagedCommunicator> staged_;
};

TEST_F(EpNcclTest, StagedCollectivesRoundTrip) {
  EXPECT_EQ(staged_->name(), "nccl+staged");
  EXPECT_EQ(staged_->memory_space(), MemorySpace::kHost);
  std::vector<uint8_t> send(1000), recv(1000, 0);
  std::iota(send.begin(), send.end(), uint8_t{3});
  const std::vector<size_t> bytes = {send.size()};
  staged_->all_to_all_v(send.data(), bytes, recv.data(), bytes);
  EXPECT_EQ(send, recv);
  std::fill(recv.begin(), recv.end(), 0);
  staged_->all_gather_v(send.data(), send.size(), recv.data(), bytes);
  EXPECT_EQ(send, recv);
  EXPECT_NO_THROW(staged_->check_consistent(42, "test"));
}

TEST_F(EpNcclTest, LayerOverNcclEqualsMoELayerBits) {
  io::LayerShape shape = moe::testing::SmallShape(64, 64, 8);
  shape.num_shared_experts = 1;
  shape.shared_ff = 96;
  shape.shared_expert_gate = true;
  auto weights = moe::testing::RandomWeights(shape, kernels::DType::kBF16, 9);
  MoELayerConfig config = moe::testing::SmallConfig("deterministic", 8, 2);
  config.policy.capacity_factor = 1.0;
  config.policy.overflow = Overflow::kReroute;
  ExpertParallelLayer ep(config, weights, *staged_);
  MoELayer ref(config, weights);
  EXPECT_EQ(ep.fingerprint().device, "cpu (nccl+staged)");
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const moe::testing::GlobalBatch g = moe::testing::MakeGlobalBatch(seed, 1, 64);
    const int T = static_cast<int>(g.batch.meta.size());
    std::vector<float> y(g.batch.x.size()), y_ref(g.batch.x.size());
    ep.forward(g.batch.x.data(), T, g.batch.meta, y.data());
    ref.forward(g.batch.x.data(), T, g.batch.meta, y_ref.data());
    EXPECT_TRUE(moe::testing::SliceBitEqual(y, y_ref, 0, T, 64)) << "seed " << seed;
    EXPECT_EQ(plan_hash(ep.last_plan()), plan_hash(ref.last_plan()));
  }
}

// The scalable design over NCCL: home-rank planning (per-request and batch scope, the O(E) count exchanges go
// through NCCL's grouped send/recv too), the rank holding only its part, EPLB's redundant copies.
TEST_F(EpNcclTest, HomePlanningWithPartsOverNcclEqualsMoELayerBits) {
  const io::LayerShape shape = moe::testing::SmallShape(64, 64, 8);
  auto whole = moe::testing::RandomWeights(shape, kernels::DType::kF32, 11);
  const std::vector<float> load = {500, 40, 300, 20, 80, 900, 60, 100};
  const ExpertPlacement placement = ExpertPlacement::from_replication(eplb::rebalance_global(load, 10, 1));
  auto part = std::make_shared<const io::LayerWeights>(
      io::random_layer(shape, kernels::DType::kF32, 11, io::ExpertSet::only(placement.experts_of(0))));
  for (const char* preset : {"deterministic", "greedy"}) {
    MoELayerConfig config = moe::testing::SmallConfig(preset, 8, 2);
    config.expert_kernel = config.gate_kernel = kernels::KernelKind::kInvariant;
    ExpertParallelOptions options;
    options.planning = EpPlanning::kHome;
    ExpertParallelLayer ep(config, part, *staged_, placement, options);
    EXPECT_TRUE(ep.plans_locally());
    MoELayer ref(config, whole);
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      const moe::testing::GlobalBatch g = moe::testing::MakeGlobalBatch(seed, 1, 64);
      const int T = static_cast<int>(g.batch.meta.size());
      std::vector<float> y(g.batch.x.size()), y_ref(g.batch.x.size());
      ep.forward(g.batch.x.data(), T, g.batch.meta, y.data());
      ref.forward(g.batch.x.data(), T, g.batch.meta, y_ref.data());
      EXPECT_TRUE(moe::testing::SliceBitEqual(y, y_ref, 0, T, 64)) << preset << " seed " << seed;
      EXPECT_EQ(ep.last_step().metadata_bytes_received, 0);
    }
  }
}

}  // namespace
}  // namespace moe::parallel

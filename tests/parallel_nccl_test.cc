// NCCL communicator tests with world size 1 (one GPU): all_to_all_v / all_gather_v round trips
// through device memory, both bootstrap paths, sizes, broadcast, barrier and argument checks.
// Without a CUDA device every test skips and says why.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/parallel/nccl_communicator.h"
#include "moe/parallel/single_process_communicator.h"
#include "tests/cuda_gpu_test_util.h"

namespace moe::parallel {
namespace {

#define EXPECT_CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MOE_REQUIRE_GPU();
    EXPECT_CUDA_OK(cudaSetDevice(0));
    EXPECT_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    config_.device = 0;
    config_.stream = stream_;
    config_.options.timeout = std::chrono::seconds(30);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Device buffer filled from host bytes; freed by the fixture.
  void* to_device(const std::vector<uint8_t>& host, size_t extra = 0) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, host.size() + extra + 1), cudaSuccess);
    // Stream-ordered on the communicator's (non-blocking) stream, then waited for: a legacy-stream
    // cudaMemset/cudaMemcpy would not be ordered before the collective on that stream.
    EXPECT_EQ(cudaMemsetAsync(p, 0xEE, host.size() + extra + 1, stream_), cudaSuccess);
    if (!host.empty()) {
      EXPECT_EQ(cudaMemcpyAsync(p, host.data(), host.size(), cudaMemcpyHostToDevice, stream_), cudaSuccess);
    }
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    buffers_.emplace_back(p, cudaFree);
    return p;
  }
  std::vector<uint8_t> to_host(const void* p, size_t bytes) {
    std::vector<uint8_t> host(bytes);
    EXPECT_EQ(cudaMemcpyAsync(host.data(), p, bytes, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    return host;
  }

  cudaStream_t stream_ = nullptr;
  NcclConfig config_;
  std::vector<std::unique_ptr<void, cudaError_t (*)(void*)>> buffers_;
};

std::vector<uint8_t> pattern(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed * 31 + i * 7 + 1);
  return v;
}

TEST_F(NcclTest, RoundTripsWithBootstrapCommunicator) {
  SingleProcessCommunicator bootstrap;
  auto comm = NcclCommunicator::create(bootstrap, config_);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->name(), "nccl");
  EXPECT_EQ(comm->memory_space(), MemorySpace::kCudaDevice);

  for (size_t n : {size_t{0}, size_t{1}, size_t{4097}, size_t{1} << 20}) {
    const std::vector<uint8_t> host = pattern(n, static_cast<int>(n % 251));
    void* send = to_device(host);
    void* recv = to_device(std::vector<uint8_t>(), n);
    const size_t bytes[] = {n};
    comm->all_to_all_v(send, bytes, recv, bytes);
    EXPECT_EQ(to_host(recv, n), host) << "all_to_all_v of " << n << " bytes";
    EXPECT_EQ(to_host(static_cast<char*>(recv) + n, 1)[0], 0xEE) << "guard byte";

    void* gathered = to_device(std::vector<uint8_t>(), n);
    comm->all_gather_v(send, n, gathered, bytes);
    EXPECT_EQ(to_host(gathered, n), host) << "all_gather_v of " << n << " bytes";
  }
  size_t sizes[1] = {0};
  comm->all_gather_sizes(987654321, sizes);
  EXPECT_EQ(sizes[0], 987654321u);
  comm->barrier();
  const std::vector<uint8_t> host = pattern(100, 5);
  void* data = to_device(host);
  comm->broadcast(data, host.size(), 0);
  EXPECT_EQ(to_host(data, host.size()), host);
  comm->check_consistent(42, "experts");
  EXPECT_FALSE(comm->broken());
}

TEST_F(NcclTest, FileRendezvousAndArgumentChecks) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("moe_parallel_nccl_id_" + std::to_string(::getpid())))
          .string();
  auto comm = NcclCommunicator::create_from_file(path, 0, 1, config_);
  std::filesystem::remove(path);
  const std::vector<uint8_t> host = pattern(333, 9);
  void* send = to_device(host);
  void* recv = to_device(std::vector<uint8_t>(), host.size());
  const size_t bytes[] = {host.size()};
  comm->all_to_all_v(send, bytes, recv, bytes);
  EXPECT_EQ(to_host(recv, host.size()), host);

  const size_t wrong[] = {host.size() - 1};
  EXPECT_THROW(comm->all_gather_v(send, host.size(), recv, wrong), std::invalid_argument);
  EXPECT_THROW(comm->all_to_all_v(send, bytes, recv, wrong), std::invalid_argument);
  EXPECT_FALSE(comm->broken());
  EXPECT_THROW(NcclCommunicator::create_from_file(path, 1, 1, config_), std::invalid_argument);
}

TEST(NcclNoDevice, FileRendezvousTimesOutWithoutRankZero) {
  // Needs no GPU: rank 1 waits for an id file that nobody writes.
  NcclConfig config;
  config.options.timeout = std::chrono::milliseconds(200);
  const std::string path = "/nonexistent-dir/moe_parallel_nccl_id";
  try {
    NcclCommunicator::create_from_file(path, 1, 2, config);
    ADD_FAILURE() << "expected a timeout";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 of 2: waited 200 ms for the unique id file"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace moe::parallel

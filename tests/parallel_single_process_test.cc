// Unit tests of the Communicator contract on the single-process backend: semantics (copies in
// rank order), argument validation shared by every backend, and the factory.
// Links tests/support/allocation_counter.cc (counts operator new) to check that a collective allocates
// nothing.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/parallel/make_communicator.h"
#include "moe/parallel/single_process_communicator.h"
#include "tests/support/allocation_counter.h"

namespace moe::parallel {

namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 7 * i);
  return v;
}

// Runs `f`, expects `Exception`, and checks that its message contains every `parts` entry.
template <typename Exception, typename F>
void expect_throw_with(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected an exception";
  } catch (const Exception& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message: " << e.what() << "\nmissing: " << part;
    }
  }
}

TEST(SingleProcessCommunicator, Identity) {
  SingleProcessCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.name(), "single");
  EXPECT_EQ(comm.memory_space(), MemorySpace::kHost);
  EXPECT_EQ(to_string(comm.memory_space()), "host");
}

TEST(SingleProcessCommunicator, AllGatherVCopies) {
  SingleProcessCommunicator comm;
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}}) {
    const std::vector<uint8_t> send = pattern(n, 3);
    std::vector<uint8_t> recv(n + 4, 0xEE);  // 4 guard bytes
    const size_t recv_bytes[] = {n};
    comm.all_gather_v(send.data(), n, recv.data(), recv_bytes);
    EXPECT_TRUE(std::equal(send.begin(), send.end(), recv.begin())) << n;
    for (size_t i = n; i < recv.size(); ++i) EXPECT_EQ(recv[i], 0xEE) << "guard byte " << i;
  }
}

TEST(SingleProcessCommunicator, AllToAllVCopies) {
  SingleProcessCommunicator comm;
  const std::vector<uint8_t> send = pattern(513, 11);
  std::vector<uint8_t> recv(513);
  const size_t bytes[] = {513};
  comm.all_to_all_v(send.data(), bytes, recv.data(), bytes);
  EXPECT_EQ(send, recv);
}

TEST(SingleProcessCommunicator, ZeroBytesAcceptNullPointers) {
  SingleProcessCommunicator comm;
  const size_t zero[] = {0};
  comm.all_gather_v(nullptr, 0, nullptr, zero);
  comm.all_to_all_v(nullptr, zero, nullptr, zero);
  comm.broadcast(nullptr, 0, 0);
}

TEST(SingleProcessCommunicator, SizesBarrierBroadcastConsistency) {
  SingleProcessCommunicator comm;
  size_t out[1] = {0};
  comm.all_gather_sizes(12345, out);
  EXPECT_EQ(out[0], 12345u);
  comm.barrier();
  std::vector<uint8_t> data = pattern(10, 1);
  const std::vector<uint8_t> before = data;
  comm.broadcast(data.data(), data.size(), 0);
  EXPECT_EQ(data, before);
  comm.check_consistent(0xDEADBEEFull, "experts/k/policy");
}

TEST(CommunicatorValidation, AllGatherVSendBytesMismatch) {
  SingleProcessCommunicator comm;
  std::vector<uint8_t> buf(16);
  const size_t recv_bytes[] = {8};
  expect_throw_with<std::invalid_argument>(
      [&] { comm.all_gather_v(buf.data(), 7, buf.data() + 8, recv_bytes); },
      {"single all_gather_v", "rank 0 of 1", "send_bytes (7)", "recv_bytes[0] (8)"});
}

TEST(CommunicatorValidation, SpanSizesMustEqualSize) {
  SingleProcessCommunicator comm;
  std::vector<uint8_t> buf(16);
  const size_t two[] = {4, 4};
  const size_t one[] = {4};
  expect_throw_with<std::invalid_argument>([&] { comm.all_gather_v(buf.data(), 4, buf.data() + 8, two); },
                                           {"all_gather_v", "recv_bytes.size() is 2", "expected size() = 1"});
  expect_throw_with<std::invalid_argument>([&] { comm.all_to_all_v(buf.data(), two, buf.data() + 8, one); },
                                           {"all_to_all_v", "send_bytes.size() is 2"});
  expect_throw_with<std::invalid_argument>([&] { comm.all_to_all_v(buf.data(), one, buf.data() + 8, two); },
                                           {"all_to_all_v", "recv_bytes.size() is 2"});
  expect_throw_with<std::invalid_argument>(
      [&] { comm.all_to_all_v(buf.data(), std::span<const size_t>(), buf.data() + 8, one); },
      {"send_bytes.size() is 0"});
  std::vector<size_t> out(3);
  expect_throw_with<std::invalid_argument>([&] { comm.all_gather_sizes(1, out); },
                                           {"all_gather_sizes", "out.size() is 3"});
}

TEST(CommunicatorValidation, AllToAllVSelfSizeMismatch) {
  SingleProcessCommunicator comm;
  std::vector<uint8_t> buf(16);
  const size_t send_bytes[] = {4};
  const size_t recv_bytes[] = {5};
  expect_throw_with<std::invalid_argument>(
      [&] { comm.all_to_all_v(buf.data(), send_bytes, buf.data() + 8, recv_bytes); },
      {"send_bytes[0] (4) != recv_bytes[0] (5)"});
}

TEST(CommunicatorValidation, NullPointersWithBytes) {
  SingleProcessCommunicator comm;
  std::vector<uint8_t> buf(8);
  const size_t bytes[] = {4};
  expect_throw_with<std::invalid_argument>([&] { comm.all_gather_v(nullptr, 4, buf.data(), bytes); },
                                           {"send is null but 4 bytes"});
  expect_throw_with<std::invalid_argument>([&] { comm.all_to_all_v(buf.data(), bytes, nullptr, bytes); },
                                           {"recv is null but 4 bytes"});
  expect_throw_with<std::invalid_argument>([&] { comm.broadcast(nullptr, 3, 0); },
                                           {"data is null but 3 bytes"});
}

TEST(CommunicatorValidation, BroadcastRootOutOfRange) {
  SingleProcessCommunicator comm;
  uint8_t byte = 0;
  expect_throw_with<std::invalid_argument>([&] { comm.broadcast(&byte, 1, 1); },
                                           {"root 1 is out of range [0, 1)"});
  expect_throw_with<std::invalid_argument>([&] { comm.broadcast(&byte, 1, -1); }, {"root -1"});
}

TEST(CommunicatorValidation, OptionsTimeoutMustBePositive) {
  CommOptions options;
  EXPECT_EQ(options.timeout, std::chrono::seconds(60));
  options.timeout = std::chrono::milliseconds(0);
  expect_throw_with<std::invalid_argument>([&] { validate(options); },
                                           {"timeout must be positive, got 0 ms"});
  CommSpec spec;
  spec.options = options;
  expect_throw_with<std::invalid_argument>([&] { make_communicator(spec); }, {"timeout must be positive"});
}

TEST(SingleProcessCommunicator, CollectivesAllocateNothing) {
  SingleProcessCommunicator comm;
  std::vector<uint8_t> send(64, 1), recv(64);
  const size_t bytes[] = {64};
  size_t sizes[1];
  const long before = moe::testing::allocation_count();
  for (int i = 0; i < 10; ++i) {
    comm.all_to_all_v(send.data(), bytes, recv.data(), bytes);
    comm.all_gather_v(send.data(), 64, recv.data(), bytes);
    comm.all_gather_sizes(7, sizes);
    comm.broadcast(recv.data(), 64, 0);
    comm.barrier();
  }
  EXPECT_EQ(moe::testing::allocation_count() - before, 0);
  // The counter itself works.
  std::vector<int> probe(10);
  EXPECT_GT(moe::testing::allocation_count() - before, 0);
}

TEST(MakeCommunicator, SingleAndUnknown) {
  CommSpec spec;
  spec.backend = "single";
  auto comm = make_communicator(spec);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->name(), "single");
  const std::vector<std::string> names = available_backends();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "single");
  if (std::find(names.begin(), names.end(), "mpi") != names.end()) {
    // This process never initialises MPI: the MPI backend must say so instead of crashing.
    spec.backend = "mpi";
    expect_throw_with<std::runtime_error>([&] { make_communicator(spec); }, {"MPI is not initialised"});
  }
  spec.backend = "carrier-pigeon";
  expect_throw_with<std::invalid_argument>([&] { make_communicator(spec); },
                                           {"unknown or unavailable backend 'carrier-pigeon'", "single"});
}

}  // namespace
}  // namespace moe::parallel

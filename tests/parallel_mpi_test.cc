// MPI communicator tests, run under mpirun with 1, 2 and 4 ranks (tests/cmake/parallel.cmake).
// Every rank runs every test; data patterns are a pure function of (source, destination, index),
// so each rank checks what it received byte for byte. Rank 0 prints the usual gtest output; the
// other ranks print only their failures, prefixed with their rank.
// Links tests/support/allocation_counter.cc (counts operator new) to check that a collective allocates
// nothing after warm-up (MPI's own C allocations go through malloc and are not counted).

#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "moe/parallel/mpi_communicator.h"
#include "tests/support/allocation_counter.h"
#include "tests/support/mpi_gtest.h"

namespace moe::parallel {

namespace {

// Test communicators give up after a few seconds, so a broken test fails instead of hanging.
CommOptions test_options(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  CommOptions options;
  options.timeout = timeout;
  return options;
}

uint8_t byte_at(int source, int destination, size_t index, int round) {
  return static_cast<uint8_t>(source * 131 + destination * 29 + index * 7 + round * 17 + 1);
}

// Bytes rank `source` sends to rank `destination` in `round`: varied, rank-dependent, with zeros.
size_t message_bytes(int source, int destination, int round) {
  if ((source + 2 * destination + round) % 4 == 1) return 0;
  if (round == 2) return 65536 + 4096 * static_cast<size_t>(source) + 513 * static_cast<size_t>(destination);
  return static_cast<size_t>((source * 37 + destination * 11 + round * 5) % 97);
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

TEST(MpiCommunicator, Identity) {
  MpiCommunicator comm(MPI_COMM_WORLD, test_options());
  int rank = -1;
  int size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(comm.rank(), rank);
  EXPECT_EQ(comm.size(), size);
  EXPECT_EQ(comm.name(), "mpi");
  EXPECT_EQ(comm.memory_space(), MemorySpace::kHost);
  EXPECT_NE(comm.comm(), MPI_COMM_WORLD);  // a private duplicate
  EXPECT_FALSE(comm.broken());
}

TEST(MpiCommunicator, AllGatherVVariableSizes) {
  MpiCommunicator comm(MPI_COMM_WORLD, test_options());
  const int me = comm.rank();
  for (int round = 0; round < 3; ++round) {
    // Rank r contributes message_bytes(r, r, round) bytes (some ranks contribute zero).
    std::vector<size_t> recv_bytes(comm.size());
    size_t total = 0;
    for (int r = 0; r < comm.size(); ++r) total += recv_bytes[r] = message_bytes(r, r, round);
    std::vector<uint8_t> send(recv_bytes[me]);
    for (size_t i = 0; i < send.size(); ++i) send[i] = byte_at(me, -1, i, round);
    std::vector<uint8_t> recv(total + 8, 0xEE);
    comm.all_gather_v(send.data(), send.size(), recv.data(), recv_bytes);
    size_t offset = 0;
    for (int r = 0; r < comm.size(); ++r) {
      for (size_t i = 0; i < recv_bytes[r]; ++i) {
        ASSERT_EQ(recv[offset + i], byte_at(r, -1, i, round))
            << "round " << round << " from rank " << r << " byte " << i;
      }
      offset += recv_bytes[r];
    }
    for (size_t i = total; i < recv.size(); ++i) ASSERT_EQ(recv[i], 0xEE) << "guard byte " << i - total;
  }
}

TEST(MpiCommunicator, AllToAllVVariableSizes) {
  MpiCommunicator comm(MPI_COMM_WORLD, test_options());
  const int me = comm.rank();
  const int n = comm.size();
  for (int round = 0; round < 4; ++round) {
    std::vector<size_t> send_bytes(n), recv_bytes(n);
    size_t send_total = 0, recv_total = 0;
    for (int r = 0; r < n; ++r) {
      send_total += send_bytes[r] = message_bytes(me, r, round);
      recv_total += recv_bytes[r] = message_bytes(r, me, round);
    }
    std::vector<uint8_t> send(send_total);
    size_t offset = 0;
    for (int d = 0; d < n; ++d) {
      for (size_t i = 0; i < send_bytes[d]; ++i) send[offset + i] = byte_at(me, d, i, round);
      offset += send_bytes[d];
    }
    std::vector<uint8_t> recv(recv_total + 8, 0xEE);
    comm.all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes);
    offset = 0;
    for (int s = 0; s < n; ++s) {
      for (size_t i = 0; i < recv_bytes[s]; ++i) {
        ASSERT_EQ(recv[offset + i], byte_at(s, me, i, round))
            << "round " << round << " from rank " << s << " byte " << i;
      }
      offset += recv_bytes[s];
    }
    for (size_t i = recv_total; i < recv.size(); ++i)
      ASSERT_EQ(recv[i], 0xEE) << "guard byte " << i - recv_total;
  }
}

TEST(MpiCommunicator, CollectivesAllocateNothingAfterConstruction) {
  MpiCommunicator comm(MPI_COMM_WORLD, test_options());
  const int n = comm.size();
  std::vector<size_t> bytes(n, 100), sizes(n);
  std::vector<uint8_t> send(100 * n, 3), recv(100 * n);
  const long before = moe::testing::allocation_count();
  for (int i = 0; i < 10; ++i) {
    comm.all_to_all_v(send.data(), bytes, recv.data(), bytes);
    comm.all_gather_v(send.data(), 100, recv.data(), bytes);
    comm.all_gather_sizes(i, sizes);
    comm.broadcast(recv.data(), 100, i % n);
    comm.barrier();
  }
  EXPECT_EQ(moe::testing::allocation_count() - before, 0) << "rank " << comm.rank();
}

TEST(MpiCommunicator, AllZeroBytes) {
  MpiCommunicator comm(MPI_COMM_WORLD, test_options());
  const std::vector<size_t> zeros(comm.size(), 0);
  comm.all_to_all_v(nullptr, zeros, nullptr, zeros);
  comm.all_gather_v(nullptr, 0, nullptr, zeros);
}

TEST(MpiCommunicator, AllGatherSizesAndBroadcast) {
  MpiCommunicator comm(MPI_COMM_WORLD, test_options());
  std::vector<size_t> sizes(comm.size());
  comm.all_gather_sizes(1000003 * static_cast<size_t>(comm.rank()) + (size_t{1} << 40), sizes);
  for (int r = 0; r < comm.size(); ++r)
    EXPECT_EQ(sizes[r], 1000003 * static_cast<size_t>(r) + (size_t{1} << 40));
  for (int root = 0; root < comm.size(); ++root) {
    std::vector<uint8_t> data(777 + root);
    for (size_t i = 0; i < data.size(); ++i) data[i] = comm.rank() == root ? byte_at(root, 0, i, 9) : 0;
    comm.broadcast(data.data(), data.size(), root);
    for (size_t i = 0; i < data.size(); ++i)
      ASSERT_EQ(data[i], byte_at(root, 0, i, 9)) << "root " << root << " byte " << i;
  }
}

// Rank 0 arrives 200 ms late; no rank may leave before it arrives. (The bound is loose because
// ranks leave the first barrier at slightly different times on an oversubscribed machine.)
TEST(MpiCommunicator, BarrierWaitsForTheSlowestRank) {
  MpiCommunicator comm(MPI_COMM_WORLD, test_options());
  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  comm.barrier();
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(100)) << "rank " << comm.rank() << " left the barrier early";
}

TEST(MpiCommunicator, CheckConsistentPassesWithEqualHashes) {
  MpiCommunicator comm(MPI_COMM_WORLD, test_options());
  comm.check_consistent(0x0123456789ABCDEFull, "experts/k/policy");
  comm.barrier();  // still usable
}

TEST(MpiCommunicator, CheckConsistentNamesTheDifferingRanks) {
  MpiCommunicator comm(MPI_COMM_WORLD, test_options());
  if (comm.size() == 1) GTEST_SKIP() << "needs 2 or more ranks to have a differing rank";
  const int odd_one = comm.size() - 1;
  const uint64_t hash = comm.rank() == odd_one ? 0xBADull : 0x600Dull;
  const std::string message = message_of([&] { comm.check_consistent(hash, "weights"); });
  // The same diagnosis on every rank, prefixed by the rank that throws.
  EXPECT_NE(message.find("rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size())),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("weights differs across ranks: 1 of " + std::to_string(comm.size()) +
                         " ranks differ from rank 0 (0x000000000000600d): rank " + std::to_string(odd_one) +
                         " (0x0000000000000bad)"),
            std::string::npos)
      << message;
  comm.barrier();  // a detected mismatch does not break the communicator
}

TEST(MpiCommunicator, CheckConsistentListsSeveralRanks) {
  MpiCommunicator comm(MPI_COMM_WORLD, test_options());
  if (comm.size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const uint64_t hash = comm.rank() % 2 == 1 ? 100 + comm.rank() : 7;  // ranks 1 and 3 differ
  const std::string message = message_of([&] { comm.check_consistent(hash, "k"); });
  EXPECT_NE(message.find("2 of 4 ranks differ from rank 0 (0x0000000000000007): rank 1 (0x0000000000000065), "
                         "rank 3 (0x0000000000000067)"),
            std::string::npos)
      << message;
}

TEST(MpiCommunicator, ArgumentErrorsAreLocalAndLeaveItUsable) {
  MpiCommunicator comm(MPI_COMM_WORLD, test_options());
  const int me = comm.rank();
  std::vector<size_t> recv_bytes(comm.size(), 4);
  std::vector<uint8_t> buf(4 * comm.size() + 8);
  const std::string mismatch =
      message_of([&] { comm.all_gather_v(buf.data(), 3, buf.data() + 4, recv_bytes); });
  EXPECT_NE(
      mismatch.find("mpi all_gather_v: rank " + std::to_string(me) + " of " + std::to_string(comm.size()) +
                    ": send_bytes (3) != recv_bytes[" + std::to_string(me) + "] (4)"),
      std::string::npos)
      << mismatch;
  const std::vector<size_t> wrong_size(comm.size() + 1, 0);
  EXPECT_THROW(comm.all_to_all_v(buf.data(), wrong_size, buf.data(), recv_bytes), std::invalid_argument);

  // A count above INT_MAX is rejected before anything is sent (never touches the buffers).
  std::vector<size_t> huge(comm.size(), 1);
  huge.back() = size_t{3} << 30;
  const std::string too_big =
      message_of([&] { comm.all_gather_v(buf.data(), huge[me], buf.data() + 8, huge); });
  EXPECT_NE(
      too_big.find("recv_bytes[" + std::to_string(comm.size() - 1) + "] = 3221225472 bytes exceeds INT_MAX"),
      std::string::npos)
      << too_big;
  EXPECT_FALSE(comm.broken());
  comm.barrier();
}

TEST(MpiCommunicator, TimeoutNamesTheRankAndBreaksTheCommunicator) {
  MpiCommunicator comm(MPI_COMM_WORLD, test_options(std::chrono::milliseconds(300)));
  if (comm.size() == 1) GTEST_SKIP() << "needs 2 or more ranks (rank 0 plays the stuck peer)";
  if (comm.rank() != 0) {
    const auto start = std::chrono::steady_clock::now();
    const std::string message = message_of([&] { comm.barrier(); });
    const auto waited = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(message, "mpi barrier: rank " + std::to_string(comm.rank()) + " of " +
                           std::to_string(comm.size()) + " waited 300 ms; a peer is dead or stuck");
    EXPECT_GE(waited, std::chrono::milliseconds(300));
    EXPECT_LT(waited, std::chrono::seconds(5));
    EXPECT_TRUE(comm.broken());
    const std::string again = message_of([&] { comm.barrier(); });
    EXPECT_NE(again.find("broken by an earlier failure"), std::string::npos) << again;
  }
  // Let the stuck peer arrive late, so that the abandoned barrier requests complete and MPI
  // shuts down cleanly.
  MPI_Barrier(MPI_COMM_WORLD);
  if (comm.rank() == 0) comm.barrier();
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace moe::parallel

int main(int argc, char** argv) {
  moe::parallel::MpiSession session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  return moe::testing::RunAllTestsOnEveryRank();
}

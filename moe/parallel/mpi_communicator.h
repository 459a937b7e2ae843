// moe/parallel/mpi_communicator.h: the MPI backend (host memory; OpenMPI 4.1 / any MPI-3 library).
//
// Ownership: the process's engine (or an MpiSession, below) owns MPI_Init/MPI_Finalize. An
// MpiCommunicator does not own the MPI_Comm it is given: it duplicates it (MPI_Comm_idup) into a
// private communicator, so its traffic never mixes with the caller's, and sets MPI_ERRORS_RETURN on
// the duplicate only. The duplicate is freed by the destructor, which must run before
// MPI_Finalize (if MPI is already finalised, or the communicator is broken, it is left alone).
//
// Fault handling - never a hang: every collective (including the duplication in the constructor)
// is started as a non-blocking MPI operation (MPI_Iallgatherv, MPI_Ialltoallv, MPI_Ibarrier,
// MPI_Ibcast) and polled with MPI_Test until it completes or CommOptions::timeout has passed. On
// timeout it throws std::runtime_error, for example
//   "mpi all_to_all_v: rank 1 of 4 waited 5000 ms; a peer is dead or stuck"
// and every MPI error code becomes a std::runtime_error carrying MPI_Error_string. Either leaves
// the communicator broken (the timed-out request still references the caller's buffers, so they
// must stay alive): the caller's policy then decides; a tool calls abort(), which calls MPI_Abort
// so that every process of the job ends with the reason on stderr.
//
// Sizes: MPI-3 counts and displacements are `int`, so any single count, and any displacement (the
// running sum of counts on one side), above INT_MAX bytes is rejected with std::invalid_argument
// before anything is sent. broadcast() has no such limit (it is chunked).
//
// Threading: not thread-safe. MPI is used at MPI_THREAD_FUNNELED: call every method from the thread
// that initialised MPI.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "moe/parallel/communicator.h"

namespace moe::parallel {

// RAII for tests and tools that own the MPI lifetime themselves. If MPI is not initialised, the
// constructor calls MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED) and the destructor calls
// MPI_Finalize; if it is already initialised, the session does nothing (owns_mpi() is false).
// Throws std::runtime_error if MPI_Init_thread fails or provides less than MPI_THREAD_FUNNELED.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  bool owns_mpi() const { return owns_; }

 private:
  bool owns_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  // Collective over `comm` (every rank of `comm` must construct one). `comm` is borrowed, must
  // stay valid while the constructor runs, and is not modified after it returns (its error
  // handler is set to MPI_ERRORS_RETURN for the duplication and then restored). Throws
  // std::runtime_error if MPI is not initialised, if duplication fails or times out;
  // std::invalid_argument if `options` is invalid or comm is MPI_COMM_NULL.
  explicit MpiCommunicator(MPI_Comm comm, CommOptions options = {});
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }

  // Writes "moe::parallel abort (mpi, rank r of n): <reason>" to stderr and calls MPI_Abort(comm, 1),
  // which ends every process of the job (mpirun exits non-zero). Falls back to std::_Exit(1) if MPI
  // is not usable.
  [[noreturn]] void abort(std::string_view reason) override;

  // The private duplicate communicator (valid while *this lives).
  MPI_Comm comm() const { return comm_; }
  const CommOptions& options() const { return options_; }
  // True after a collective failed or timed out; every later collective throws.
  bool broken() const { return !broken_reason_.empty(); }

 protected:
  void do_all_gather_v(const void* send, size_t send_bytes, void* recv,
                       std::span<const size_t> recv_bytes) override;
  void do_all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                       std::span<const size_t> recv_bytes) override;
  void do_barrier() override;
  void do_broadcast(void* data, size_t bytes, int root) override;

 private:
  // Throws std::runtime_error if the communicator is broken.
  void check_usable(std::string_view op) const;
  // Throws std::runtime_error (and marks the communicator broken) unless rc == MPI_SUCCESS.
  void check_mpi(int rc, std::string_view op, std::string_view call);
  // Polls `request` with MPI_Test until it completes or the timeout passes.
  void wait(MPI_Request* request, std::string_view op);
  // Fills counts/displacements (as int) from byte counts; throws std::invalid_argument above INT_MAX.
  void to_int_counts(std::span<const size_t> bytes, std::vector<int>& counts, std::vector<int>& displs,
                     std::string_view op, std::string_view what) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  CommOptions options_;
  int rank_ = 0;
  int size_ = 1;
  std::string broken_reason_;
  // Count and displacement arrays must outlive the non-blocking call; sized once, reused.
  std::vector<int> send_counts_, send_displs_, recv_counts_, recv_displs_;
};

}  // namespace moe::parallel

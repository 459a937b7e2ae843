#include "moe/parallel/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace moe::parallel {
namespace {

bool mpi_usable() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) return "MPI error code " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(length)) + " (code " + std::to_string(rc) + ")";
}

// A valid address for zero-byte buffers: some MPI libraries reject null even with count 0.
char zero_byte_buffer[1];

const void* or_dummy(const void* p) {
  return p ? p : zero_byte_buffer;
}
void* or_dummy(void* p) {
  return p ? p : zero_byte_buffer;
}

// Polls `request` until it completes or `timeout` passes; returns false on timeout and the MPI
// error code through `rc`. Spins briefly, then sleeps between tests so that oversubscribed ranks
// leave the cores to their peers.
bool poll(MPI_Request* request, std::chrono::milliseconds timeout, int* rc) {
  const auto start = std::chrono::steady_clock::now();
  for (int polls = 0;; ++polls) {
    int done = 0;
    *rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (*rc != MPI_SUCCESS || done) return true;
    if (std::chrono::steady_clock::now() - start >= timeout) return false;
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(polls < 1024 ? 20 : 200));
    }
  }
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) {
    throw std::runtime_error("MpiSession: MPI_Init_thread failed: " + mpi_error_string(rc));
  }
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    throw std::runtime_error("MpiSession: MPI provides thread level " + std::to_string(provided) +
                             ", MPI_THREAD_FUNNELED (" + std::to_string(MPI_THREAD_FUNNELED) +
                             ") is required");
  }
  owns_ = true;
}

MpiSession::~MpiSession() {
  if (owns_ && mpi_usable()) MPI_Finalize();
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, CommOptions options) : options_(options) {
  validate(options_);
  if (!mpi_usable()) {
    throw std::runtime_error(
        "mpi: MPI is not initialised (or already finalised); create an MpiSession first");
  }
  if (comm == MPI_COMM_NULL) throw std::invalid_argument("mpi: the communicator is MPI_COMM_NULL");
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);

  // Duplicate without blocking, so that a dead peer at startup ends in a timeout, not a hang. The
  // caller's handler is swapped for MPI_ERRORS_RETURN only for the duration of the duplication.
  MPI_Errhandler caller_handler;
  MPI_Comm_get_errhandler(comm, &caller_handler);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Comm dup = MPI_COMM_NULL;
  int rc = MPI_Comm_idup(comm, &dup, &request);
  bool completed = true;
  if (rc == MPI_SUCCESS) completed = poll(&request, options_.timeout, &rc);
  MPI_Comm_set_errhandler(comm, caller_handler);
  MPI_Errhandler_free(&caller_handler);
  if (rc != MPI_SUCCESS) {
    throw std::runtime_error(error_prefix("MPI_Comm_idup") + mpi_error_string(rc));
  }
  if (!completed) {
    throw std::runtime_error("mpi MPI_Comm_idup: rank " + std::to_string(rank_) + " of " +
                             std::to_string(size_) + " waited " + std::to_string(options_.timeout.count()) +
                             " ms; a peer is dead or stuck");
  }
  comm_ = dup;
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  for (auto* v : {&send_counts_, &send_displs_, &recv_counts_, &recv_displs_}) v->resize(size_);
}

MpiCommunicator::~MpiCommunicator() {
  if (comm_ != MPI_COMM_NULL && !broken() && mpi_usable()) MPI_Comm_free(&comm_);
}

void MpiCommunicator::abort(std::string_view reason) {
  std::fprintf(stderr, "moe::parallel abort (mpi, rank %d of %d): %.*s\n", rank_, size_,
               static_cast<int>(reason.size()), reason.data());
  std::fflush(stderr);
  if (mpi_usable()) MPI_Abort(comm_ != MPI_COMM_NULL ? comm_ : MPI_COMM_WORLD, 1);
  std::_Exit(EXIT_FAILURE);
}

void MpiCommunicator::check_usable(std::string_view op) const {
  if (broken()) {
    throw std::runtime_error(error_prefix(op) + "communicator is broken by an earlier failure (" +
                             broken_reason_ + "); call abort()");
  }
}

void MpiCommunicator::check_mpi(int rc, std::string_view op, std::string_view call) {
  if (rc == MPI_SUCCESS) return;
  const std::string message = error_prefix(op) + std::string(call) + " failed: " + mpi_error_string(rc);
  broken_reason_ = message;
  throw std::runtime_error(message);
}

void MpiCommunicator::wait(MPI_Request* request, std::string_view op) {
  int rc = MPI_SUCCESS;
  if (!poll(request, options_.timeout, &rc)) {
    const std::string message = "mpi " + std::string(op) + ": rank " + std::to_string(rank_) + " of " +
                                std::to_string(size_) + " waited " +
                                std::to_string(options_.timeout.count()) + " ms; a peer is dead or stuck";
    broken_reason_ = message;
    throw std::runtime_error(message);
  }
  check_mpi(rc, op, "MPI_Test");
}

void MpiCommunicator::to_int_counts(std::span<const size_t> bytes, std::vector<int>& counts,
                                    std::vector<int>& displs, std::string_view op,
                                    std::string_view what) const {
  size_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    if (bytes[r] > static_cast<size_t>(INT_MAX)) {
      throw std::invalid_argument(error_prefix(op) + std::string(what) + "[" + std::to_string(r) +
                                  "] = " + std::to_string(bytes[r]) + " bytes exceeds INT_MAX (" +
                                  std::to_string(INT_MAX) + "), the largest MPI-3 count");
    }
    if (offset > static_cast<size_t>(INT_MAX)) {
      throw std::invalid_argument(error_prefix(op) + std::string(what) + ": displacement of block " +
                                  std::to_string(r) + " = " + std::to_string(offset) +
                                  " bytes exceeds INT_MAX (" + std::to_string(INT_MAX) +
                                  "), the largest MPI-3 displacement");
    }
    counts[r] = static_cast<int>(bytes[r]);
    displs[r] = static_cast<int>(offset);
    offset += bytes[r];
  }
}

void MpiCommunicator::do_all_gather_v(const void* send, size_t send_bytes, void* recv,
                                      std::span<const size_t> recv_bytes) {
  constexpr std::string_view op = "all_gather_v";
  check_usable(op);
  to_int_counts(recv_bytes, recv_counts_, recv_displs_, op, "recv_bytes");
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgatherv(or_dummy(send), static_cast<int>(send_bytes), MPI_BYTE, or_dummy(recv),
                            recv_counts_.data(), recv_displs_.data(), MPI_BYTE, comm_, &request),
            op, "MPI_Iallgatherv");
  wait(&request, op);
}

void MpiCommunicator::do_all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                                      std::span<const size_t> recv_bytes) {
  constexpr std::string_view op = "all_to_all_v";
  check_usable(op);
  to_int_counts(send_bytes, send_counts_, send_displs_, op, "send_bytes");
  to_int_counts(recv_bytes, recv_counts_, recv_displs_, op, "recv_bytes");
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ialltoallv(or_dummy(send), send_counts_.data(), send_displs_.data(), MPI_BYTE, or_dummy(recv),
                           recv_counts_.data(), recv_displs_.data(), MPI_BYTE, comm_, &request),
            op, "MPI_Ialltoallv");
  wait(&request, op);
}

void MpiCommunicator::do_barrier() {
  constexpr std::string_view op = "barrier";
  check_usable(op);
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibarrier(comm_, &request), op, "MPI_Ibarrier");
  wait(&request, op);
}

void MpiCommunicator::do_broadcast(void* data, size_t bytes, int root) {
  constexpr std::string_view op = "broadcast";
  check_usable(op);
  // Chunked so that any size works with int counts; every rank computes the same chunks.
  constexpr size_t kChunkBytes = size_t{1} << 30;
  size_t offset = 0;
  do {
    const size_t chunk = std::min(kChunkBytes, bytes - offset);
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Ibcast(or_dummy(static_cast<char*>(data) + offset), static_cast<int>(chunk), MPI_BYTE, root,
                         comm_, &request),
              op, "MPI_Ibcast");
    wait(&request, op);
    offset += chunk;
  } while (offset < bytes);
}

}  // namespace moe::parallel

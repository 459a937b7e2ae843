// moe/parallel/communicator.h: the one interface every expert-parallel exchange goes through.
//
// A Communicator connects `size()` ranks, numbered 0..size()-1. It moves untyped bytes: callers
// pass byte counts, so the interface stays free of element types. Backends:
//   SingleProcessCommunicator  (single_process_communicator.h)  size 1, host memory, copies.
//   MpiCommunicator            (mpi_communicator.h)              host memory, MPI collectives.
//   NcclCommunicator           (nccl_communicator.h)             device memory, NCCL send/recv.
// `memory_space()` says which memory the data pointers must point to: host pointers for the
// single-process and MPI backends, CUDA device pointers for NCCL. The size arrays
// (std::span<const size_t>) are always host memory.
//
// Collective contract (all backends)
//   - Every collective must be called by every rank of the communicator, in the same order, with
//     matching arguments (what rank a sends to b is what b expects from a). A mismatch that a rank
//     can see locally throws std::invalid_argument before anything is sent; a mismatch between
//     ranks that no rank can see ends in a timeout (std::runtime_error), never in a silent hang.
//   - A collective returns when this rank's part is complete: receive buffers hold the data and
//     send buffers may be reused.
//   - Receive buffers are laid out contiguously in rank order, with no padding.
//   - Buffers with zero bytes may be null. Send and receive buffers must not overlap.
//
// Errors
//   - std::invalid_argument: bad arguments (span sizes != size(), send_bytes != recv_bytes[rank()],
//     null pointer with non-zero bytes, root out of range, counts too large for the backend).
//     The communicator stays usable. Messages name the backend, rank, operation and values.
//   - std::runtime_error: communication failure or timeout (CommOptions::timeout). After one,
//     the communicator is broken: every later collective throws again, and the caller's policy
//     decides what happens (a tool calls abort(), which ends every process with a clear message).
//
// Threading: a Communicator is not thread-safe. Call it from one thread at a time (for MPI, the
// thread that initialised MPI, see MpiSession).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace moe::parallel {

// Which memory the data pointers of a communicator's collectives must point to.
enum class MemorySpace {
  kHost,        // ordinary host memory (SingleProcess, MPI)
  kCudaDevice,  // CUDA device memory on the communicator's device (NCCL)
};

std::string_view to_string(MemorySpace space);

struct CommOptions {
  // How long one collective (or communicator setup) may wait for its peers before it throws
  // std::runtime_error saying that a peer is dead or stuck. Must be positive.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

// Throws std::invalid_argument when options are not usable (timeout <= 0).
void validate(const CommOptions& options);

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // This process's rank, in [0, size()).
  virtual int rank() const = 0;
  // Number of ranks, >= 1.
  virtual int size() const = 0;
  // Backend name: "single", "mpi", "nccl".
  virtual std::string name() const = 0;
  // Which memory the `send`/`recv`/`data` pointers below must point to.
  virtual MemorySpace memory_space() const = 0;

  // Every rank contributes `send_bytes` bytes; every rank receives all contributions in rank order:
  // recv = [rank 0's bytes][rank 1's bytes]... with rank r's block recv_bytes[r] bytes long.
  // Requires recv_bytes.size() == size() and send_bytes == recv_bytes[rank()] (checked), and the
  // same recv_bytes on every rank (not checkable locally; a mismatch ends in a timeout or an error).
  void all_gather_v(const void* send, size_t send_bytes, void* recv, std::span<const size_t> recv_bytes);

  // Personalised exchange. send = [bytes for rank 0][bytes for rank 1]..., block d is send_bytes[d]
  // bytes; recv = [bytes from rank 0][bytes from rank 1]..., block s is recv_bytes[s] bytes.
  // Requires send_bytes.size() == recv_bytes.size() == size() and send_bytes[rank()] ==
  // recv_bytes[rank()] (checked); recv_bytes[s] on this rank must equal send_bytes[rank()] on rank s.
  void all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                    std::span<const size_t> recv_bytes);

  // out[r] = the `mine` of rank r. `out` is host memory on every backend; out.size() == size().
  void all_gather_sizes(size_t mine, std::span<size_t> out);

  // Returns once every rank has entered barrier().
  void barrier();

  // Copies `bytes` bytes at `data` on rank `root` to `data` on every other rank. `bytes` must be
  // the same on every rank; 0 <= root < size().
  void broadcast(void* data, size_t bytes, int root);

  // Startup consistency check: gathers `config_hash` from every rank and throws
  // std::runtime_error if they are not all equal, naming each rank whose hash differs from
  // rank 0's (the same message on every rank, prefixed by this rank). `what` names the checked
  // configuration in the message ("experts/k/policy", "weights"). Collective.
  void check_consistent(uint64_t config_hash, std::string_view what);

  // Ends the job: writes "moe::parallel abort (<name>, rank r of n): <reason>" to stderr and tells
  // every rank to stop (MPI_Abort for MPI). Never returns. Safe to call when other ranks are not in
  // a collective, or are dead; it is the documented response to a runtime_error from a collective.
  [[noreturn]] virtual void abort(std::string_view reason) = 0;

 protected:
  Communicator() = default;

  // Backend hooks, called after the public methods have validated their arguments. The size
  // spans have exactly size() elements; displacements are the prefix sums of the counts.
  virtual void do_all_gather_v(const void* send, size_t send_bytes, void* recv,
                               std::span<const size_t> recv_bytes) = 0;
  virtual void do_all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                               std::span<const size_t> recv_bytes) = 0;
  virtual void do_barrier() = 0;
  virtual void do_broadcast(void* data, size_t bytes, int root) = 0;
  // Default: all_gather_v of host buffers. Device-memory backends override it.
  virtual void do_all_gather_sizes(size_t mine, std::span<size_t> out);

  // "<name> <op>: rank r of n: " - the prefix for every error message of this communicator.
  std::string error_prefix(std::string_view op) const;
};

}  // namespace moe::parallel

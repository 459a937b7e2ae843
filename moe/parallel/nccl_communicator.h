// moe/parallel/nccl_communicator.h: the NCCL backend (CUDA device memory, one GPU per rank).
//
// Memory: every data pointer passed to a collective is CUDA device memory on device() (or memory
// NCCL can address from it); memory_space() is MemorySpace::kCudaDevice. Size arrays stay on the
// host. Work is enqueued on the caller's stream (stream(), borrowed, never the default stream
// unless the caller passes it) and each collective returns only when the stream has drained, so
// the byte-level contract of communicator.h holds unchanged: on return the receive buffer holds
// the data. Work the caller enqueued earlier on the same stream is waited for too.
//
// Transport: all_to_all_v is one ncclGroupStart/ncclGroupEnd of ncclSend/ncclRecv (ncclUint8) per
// peer; all_gather_v the same with one send to every peer; a rank's own block is a device-to-device
// cudaMemcpyAsync. Zero-byte blocks are skipped on both sides. broadcast is ncclBroadcast in
// place; barrier a one-element ncclAllReduce on an internal scratch buffer.
//
// Setup: the ncclUniqueId travels either over a host communicator (create: rank 0 of the
// bootstrap communicator calls ncclGetUniqueId and broadcasts it; typically an MpiCommunicator)
// or through a file (create_from_file: rank 0 writes it atomically, the others poll for it).
// The communicator is created non-blocking (ncclConfig_t::blocking = 0) so that setup too is
// bounded by CommOptions::timeout.
//
// Fault handling - never a hang: while waiting, ncclCommGetAsyncError and cudaStreamQuery are
// polled until the work completes or CommOptions::timeout passes. On an error or a timeout the
// NCCL communicator is aborted (ncclCommAbort), the object is broken (every later collective
// throws), and std::runtime_error is thrown, e.g.
//   "nccl all_to_all_v: rank 1 of 4 waited 5000 ms; a peer is dead or stuck".
// Every CUDA and NCCL error carries file:line, the call, and cudaGetErrorString /
// ncclGetErrorString (+ ncclGetLastError).
//
// Threading: not thread-safe; one thread at a time. The constructor and every collective call
// cudaSetDevice(device()) on the calling thread.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "moe/parallel/communicator.h"

namespace moe::parallel {

struct NcclConfig {
  int device = 0;                 // CUDA device ordinal of this rank
  cudaStream_t stream = nullptr;  // borrowed; must outlive the communicator
  CommOptions options;
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap` (a host-memory communicator; every rank calls it). The NCCL
  // communicator has bootstrap's rank and size. `bootstrap` is borrowed, must outlive the result,
  // and is used by abort() to stop every rank. Throws std::invalid_argument if bootstrap is not
  // host memory or the config is invalid; std::runtime_error on CUDA/NCCL failure or timeout.
  static std::unique_ptr<NcclCommunicator> create(Communicator& bootstrap, const NcclConfig& config);
  // As above, but the result owns the bootstrap communicator (destroyed after the NCCL one).
  static std::unique_ptr<NcclCommunicator> create(std::unique_ptr<Communicator> bootstrap,
                                                  const NcclConfig& config);

  // File rendezvous: rank 0 writes the ncclUniqueId to `path` (write to a temporary, then rename);
  // ranks 1..size-1 poll for it up to config.options.timeout. `path` must be unique to this job (a
  // stale file from an earlier job would be read). Requires 0 <= rank < size (std::invalid_argument).
  // Throws std::runtime_error when the file cannot be written/read in time, or NCCL/CUDA fails.
  static std::unique_ptr<NcclCommunicator> create_from_file(const std::string& path, int rank, int size,
                                                            const NcclConfig& config);

  // Finalises and destroys the NCCL communicator (ncclCommAbort instead if broken or if
  // finalising does not finish within the timeout). Never throws.
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  MemorySpace memory_space() const override { return MemorySpace::kCudaDevice; }

  // Writes "moe::parallel abort (nccl, rank r of n): <reason>" to stderr, aborts the NCCL communicator
  // and then calls the bootstrap communicator's abort() (which ends every rank) if there is one,
  // std::_Exit(1) otherwise (peers then fail with an NCCL error or a timeout).
  [[noreturn]] void abort(std::string_view reason) override;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  ncclComm_t comm() const { return comm_; }
  bool broken() const { return !broken_reason_.empty(); }

  // Throws std::runtime_error naming file:line, `call` and the NCCL error. ncclInProgress counts as
  // success (the communicator is non-blocking; wait() completes it). Public for the CHECK macros.
  void check_nccl(ncclResult_t result, const char* call, const char* file, int line);
  void check_cuda(cudaError_t error, const char* call, const char* file, int line);

 protected:
  void do_all_gather_v(const void* send, size_t send_bytes, void* recv,
                       std::span<const size_t> recv_bytes) override;
  void do_all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                       std::span<const size_t> recv_bytes) override;
  void do_barrier() override;
  void do_broadcast(void* data, size_t bytes, int root) override;
  void do_all_gather_sizes(size_t mine, std::span<size_t> out) override;

 private:
  NcclCommunicator(const ncclUniqueId& id, int rank, int size, const NcclConfig& config,
                   Communicator* bootstrap);

  // Sets the device and throws if broken.
  void begin(std::string_view op);
  // Waits until the communicator has no operation in progress and the stream has drained.
  void wait(std::string_view op, bool query_stream = true);
  // Aborts the NCCL communicator, marks *this broken and throws std::runtime_error(message).
  [[noreturn]] void fail(const std::string& message);

  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  CommOptions options_;
  std::unique_ptr<Communicator> owned_bootstrap_;  // declared first: destroyed last
  Communicator* bootstrap_ = nullptr;              // may be null
  ncclComm_t comm_ = nullptr;
  std::string op_;  // operation in progress, for error messages
  std::string broken_reason_;
  void* scratch_ = nullptr;          // device: (size + 1) size_t, for all_gather_sizes and barrier
  std::vector<size_t> offsets_;      // host: receive displacements, reused
  std::vector<size_t> size_counts_;  // host: size() copies of sizeof(size_t)
};

}  // namespace moe::parallel

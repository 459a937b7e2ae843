// moe/parallel/host_staged_communicator.h: a host-memory Communicator over a device-memory one.
//
// Every collective copies the host send buffer into device staging memory, runs the wrapped
// communicator's collective on device memory, and copies the result back to the host receive buffer
// (cudaMemcpy on the wrapped communicator's device). It lets host-side code - the CPU
// ExpertParallelLayer, tools, tests - move its bytes through NCCL (grouped ncclSend/ncclRecv) unchanged;
// the GPU layer passes device buffers to the NCCL communicator directly and needs no staging.
//
// Memory: staging buffers grow to the largest message seen (cudaMalloc, once per growth) and are reused,
// so a warmed-up collective allocates nothing. Errors: those of the wrapped communicator, plus
// std::runtime_error naming the CUDA call for a failed copy or allocation (the wrapped communicator is
// then left as it is; the caller aborts). Threading: as the wrapped communicator (one thread at a time).
#pragma once

#include <cstddef>
#include <string>

#include "moe/parallel/communicator.h"

namespace moe::parallel {

class HostStagedCommunicator final : public Communicator {
 public:
  // `device_comm` is borrowed, must outlive this object and must work on MemorySpace::kCudaDevice memory of
  // CUDA device `cuda_device` (std::invalid_argument otherwise).
  HostStagedCommunicator(Communicator& device_comm, int cuda_device);
  ~HostStagedCommunicator() override;

  int rank() const override { return device_comm_.rank(); }
  int size() const override { return device_comm_.size(); }
  // "<wrapped>+staged", e.g. "nccl+staged".
  std::string name() const override { return device_comm_.name() + "+staged"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  // The wrapped communicator's abort().
  [[noreturn]] void abort(std::string_view reason) override;

 protected:
  void do_all_gather_v(const void* send, size_t send_bytes, void* recv,
                       std::span<const size_t> recv_bytes) override;
  void do_all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                       std::span<const size_t> recv_bytes) override;
  void do_barrier() override { device_comm_.barrier(); }
  void do_broadcast(void* data, size_t bytes, int root) override;
  void do_all_gather_sizes(size_t mine, std::span<size_t> out) override {
    device_comm_.all_gather_sizes(mine, out);
  }

 private:
  // Grows the staging buffers to at least send/recv bytes.
  void reserve(size_t send_bytes, size_t recv_bytes);
  void copy(void* dst, const void* src, size_t bytes, bool to_device, const char* op);

  Communicator& device_comm_;
  int cuda_device_ = 0;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  size_t send_capacity_ = 0;
  size_t recv_capacity_ = 0;
};

}  // namespace moe::parallel

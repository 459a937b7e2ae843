// moe/parallel/single_process_communicator.h: the size-1 communicator (rank 0 of 1, host memory).
//
// Every collective is a local copy from the send buffer to the receive buffer, with the same
// argument checks as every other backend, so code written against Communicator runs unchanged on
// one process. Never fails at runtime and never waits. Not thread-safe (see communicator.h).
#pragma once

#include "moe/parallel/communicator.h"

namespace moe::parallel {

class SingleProcessCommunicator final : public Communicator {
 public:
  SingleProcessCommunicator() = default;

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }

  // Writes the reason to stderr and ends the process with exit status 1 (std::_Exit: no
  // destructors run, as with MPI_Abort).
  [[noreturn]] void abort(std::string_view reason) override;

 protected:
  void do_all_gather_v(const void* send, size_t send_bytes, void* recv,
                       std::span<const size_t> recv_bytes) override;
  void do_all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                       std::span<const size_t> recv_bytes) override;
  void do_barrier() override {}
  void do_broadcast(void*, size_t, int) override {}
};

}  // namespace moe::parallel

#include "moe/parallel/single_process_communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace moe::parallel {

void SingleProcessCommunicator::abort(std::string_view reason) {
  std::fprintf(stderr, "moe::parallel abort (single, rank 0 of 1): %.*s\n", static_cast<int>(reason.size()),
               reason.data());
  std::fflush(stderr);
  std::_Exit(EXIT_FAILURE);
}

void SingleProcessCommunicator::do_all_gather_v(const void* send, size_t send_bytes, void* recv,
                                                std::span<const size_t>) {
  if (send_bytes != 0) std::memcpy(recv, send, send_bytes);
}

void SingleProcessCommunicator::do_all_to_all_v(const void* send, std::span<const size_t> send_bytes,
                                                void* recv, std::span<const size_t>) {
  if (send_bytes[0] != 0) std::memcpy(recv, send, send_bytes[0]);
}

}  // namespace moe::parallel

#include "moe/parallel/communicator.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace moe::parallel {
namespace {

// NOTES: `prefix` is a callable returning the message prefix; it is called only when throwing, so
// that a valid call allocates nothing (collectives run on the hot path).

// Sum of counts, throwing if it overflows size_t.
template <typename Prefix>
size_t checked_total(std::span<const size_t> counts, const Prefix& prefix, std::string_view what) {
  size_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > std::numeric_limits<size_t>::max() - total) {
      throw std::invalid_argument(prefix() + std::string(what) + " overflows size_t at index " +
                                  std::to_string(i));
    }
    total += counts[i];
  }
  return total;
}

template <typename Prefix>
void check_span_size(size_t got, int size, const Prefix& prefix, std::string_view what) {
  if (got != static_cast<size_t>(size)) {
    throw std::invalid_argument(prefix() + std::string(what) + ".size() is " + std::to_string(got) +
                                ", expected size() = " + std::to_string(size));
  }
}

template <typename Prefix>
void check_pointer(const void* p, size_t bytes, const Prefix& prefix, std::string_view what) {
  if (p == nullptr && bytes != 0) {
    throw std::invalid_argument(prefix() + std::string(what) + " is null but " + std::to_string(bytes) +
                                " bytes were requested");
  }
}

std::string hex(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::string_view to_string(MemorySpace space) {
  switch (space) {
    case MemorySpace::kHost:
      return "host";
    case MemorySpace::kCudaDevice:
      return "cuda-device";
  }
  return "unknown";
}

void validate(const CommOptions& options) {
  if (options.timeout.count() <= 0) {
    throw std::invalid_argument("CommOptions: timeout must be positive, got " +
                                std::to_string(options.timeout.count()) + " ms");
  }
}

std::string Communicator::error_prefix(std::string_view op) const {
  return name() + " " + std::string(op) + ": rank " + std::to_string(rank()) + " of " +
         std::to_string(size()) + ": ";
}

void Communicator::all_gather_v(const void* send, size_t send_bytes, void* recv,
                                std::span<const size_t> recv_bytes) {
  const auto prefix = [this] { return error_prefix("all_gather_v"); };
  check_span_size(recv_bytes.size(), size(), prefix, "recv_bytes");
  if (send_bytes != recv_bytes[rank()]) {
    throw std::invalid_argument(prefix() + "send_bytes (" + std::to_string(send_bytes) + ") != recv_bytes[" +
                                std::to_string(rank()) + "] (" + std::to_string(recv_bytes[rank()]) + ")");
  }
  const size_t total = checked_total(recv_bytes, prefix, "sum of recv_bytes");
  check_pointer(send, send_bytes, prefix, "send");
  check_pointer(recv, total, prefix, "recv");
  do_all_gather_v(send, send_bytes, recv, recv_bytes);
}

void Communicator::all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                                std::span<const size_t> recv_bytes) {
  const auto prefix = [this] { return error_prefix("all_to_all_v"); };
  check_span_size(send_bytes.size(), size(), prefix, "send_bytes");
  check_span_size(recv_bytes.size(), size(), prefix, "recv_bytes");
  if (send_bytes[rank()] != recv_bytes[rank()]) {
    throw std::invalid_argument(prefix() + "send_bytes[" + std::to_string(rank()) + "] (" +
                                std::to_string(send_bytes[rank()]) + ") != recv_bytes[" +
                                std::to_string(rank()) + "] (" + std::to_string(recv_bytes[rank()]) +
                                "): a rank's message to itself must have one size");
  }
  check_pointer(send, checked_total(send_bytes, prefix, "sum of send_bytes"), prefix, "send");
  check_pointer(recv, checked_total(recv_bytes, prefix, "sum of recv_bytes"), prefix, "recv");
  do_all_to_all_v(send, send_bytes, recv, recv_bytes);
}

void Communicator::all_gather_sizes(size_t mine, std::span<size_t> out) {
  check_span_size(
      out.size(), size(), [this] { return error_prefix("all_gather_sizes"); }, "out");
  do_all_gather_sizes(mine, out);
}

void Communicator::do_all_gather_sizes(size_t mine, std::span<size_t> out) {
  // No allocation for the usual world sizes: this runs once per forward pass in expert parallelism.
  constexpr int kMaxStackRanks = 256;
  std::array<size_t, kMaxStackRanks> stack_counts;
  std::vector<size_t> heap_counts;
  std::span<size_t> counts;
  if (size() <= kMaxStackRanks) {
    counts = std::span<size_t>(stack_counts.data(), static_cast<size_t>(size()));
  } else {
    heap_counts.resize(static_cast<size_t>(size()));
    counts = heap_counts;
  }
  std::fill(counts.begin(), counts.end(), sizeof(size_t));
  do_all_gather_v(&mine, sizeof(size_t), out.data(), counts);
}

void Communicator::barrier() {
  do_barrier();
}

void Communicator::broadcast(void* data, size_t bytes, int root) {
  const auto prefix = [this] { return error_prefix("broadcast"); };
  if (root < 0 || root >= size()) {
    throw std::invalid_argument(prefix() + "root " + std::to_string(root) + " is out of range [0, " +
                                std::to_string(size()) + ")");
  }
  check_pointer(data, bytes, prefix, "data");
  do_broadcast(data, bytes, root);
}

void Communicator::check_consistent(uint64_t config_hash, std::string_view what) {
  static_assert(sizeof(size_t) >= sizeof(uint64_t), "hashes travel as size_t");
  std::vector<size_t> hashes(static_cast<size_t>(size()));
  all_gather_sizes(static_cast<size_t>(config_hash), hashes);
  std::ostringstream differing;
  int num_differing = 0;
  for (int r = 1; r < size(); ++r) {
    if (hashes[r] != hashes[0]) {
      differing << (num_differing++ ? ", " : "") << "rank " << r << " (" << hex(hashes[r]) << ")";
    }
  }
  if (num_differing > 0) {
    throw std::runtime_error(error_prefix("check_consistent") + std::string(what) +
                             " differs across ranks: " + std::to_string(num_differing) + " of " +
                             std::to_string(size()) + " ranks differ from rank 0 (" + hex(hashes[0]) +
                             "): " + differing.str());
  }
}

}  // namespace moe::parallel

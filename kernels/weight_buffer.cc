#include "kernels/weight_buffer.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace moe::kernels {
namespace {

constexpr std::align_val_t kAlign{64};

// MOE_HUGE_PAGES=0 in the environment turns the huge-page mappings off (read once per process).
bool huge_pages_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("MOE_HUGE_PAGES");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return wanted;
}

#if defined(__linux__)
// An anonymous mapping of `length` bytes (a multiple of the page size) starting on a 2 MB boundary, advised
// MADV_HUGEPAGE; null when the system refuses the mapping.
std::byte* map_huge_aligned(size_t length) {
  void* raw =
      mmap(nullptr, length + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (base + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  // Unmap the slack before the aligned start and after the end.
  if (start > base) munmap(raw, start - base);
  const uintptr_t end = start + length, raw_end = base + length + kHugePageBytes;
  if (raw_end > end) munmap(reinterpret_cast<void*>(end), raw_end - end);
#if defined(MADV_HUGEPAGE)
  madvise(reinterpret_cast<void*>(start), length, MADV_HUGEPAGE);  // advice: failing (no THP) is harmless
#endif
  return reinterpret_cast<std::byte*>(start);
}
#endif

}  // namespace

WeightBuffer::WeightBuffer(size_t bytes) : bytes_(bytes) {
#if defined(__linux__)
  if (bytes >= kHugePageBytes && huge_pages_wanted()) {
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t length = (bytes + page - 1) / page * page;
    const bool fits = length >= bytes && length <= SIZE_MAX - kHugePageBytes;  // no wrap-around below
    if (fits && (data_ = map_huge_aligned(length)) != nullptr) {
      mapped_ = length;
      return;
    }
  }
#endif
  data_ = static_cast<std::byte*>(::operator new(bytes == 0 ? 1 : bytes, kAlign));
  std::memset(data_, 0, bytes);
}

WeightBuffer::~WeightBuffer() {
  release();
}

WeightBuffer::WeightBuffer(WeightBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

WeightBuffer& WeightBuffer::operator=(WeightBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

void WeightBuffer::release() noexcept {
  if (data_ == nullptr) return;
#if defined(__linux__)
  if (mapped_ != 0) {
    munmap(data_, mapped_);
    data_ = nullptr;
    return;
  }
#endif
  ::operator delete(data_, kAlign);
  data_ = nullptr;
}

}  // namespace moe::kernels

// Memory for weights that the kernels stream: the expert matrices a layer owns and the kernels' packed
// panels.
//
// A one-row product (decode) reads every weight of the experts it uses once per call, so with 4 KB pages it
// also walks the page tables for each 4 KB it reads: on the AMD Zen 5 development VM a Qwen3-30B-A3B-shaped
// fp32 layer at T = 1 on one thread ran 10-13 % faster with its weights in 2 MB pages (docs/results.md 3f).
// A WeightBuffer of at least kHugePageBytes is therefore an anonymous mapping that starts on a 2 MB boundary
// and is advised MADV_HUGEPAGE, so that the kernel backs it with transparent huge pages where they are
// enabled ("always" or "madvise" in /sys/kernel/mm/transparent_hugepage/enabled); elsewhere it is ordinary
// memory with the same contents. The tail past the last whole 2 MB is not rounded up (no memory is wasted).
// Smaller buffers, and every buffer when the environment has MOE_HUGE_PAGES=0 (read once per process), come
// from operator new. Either way the buffer is 64-byte aligned and zero-filled.
//
// Movable (a moved-from buffer is empty: data() null, size() 0), not copyable; the destructor releases the
// memory. Errors: std::bad_alloc when the memory cannot be had (the C API reports it as MOE_OUT_OF_MEMORY).
#pragma once

#include <cstddef>

namespace moe::kernels {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

class WeightBuffer {
 public:
  WeightBuffer() = default;
  explicit WeightBuffer(size_t bytes);
  ~WeightBuffer();
  WeightBuffer(WeightBuffer&& other) noexcept;
  WeightBuffer& operator=(WeightBuffer&& other) noexcept;
  WeightBuffer(const WeightBuffer&) = delete;
  WeightBuffer& operator=(const WeightBuffer&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return bytes_; }
  // Whether the buffer is a 2 MB-aligned mapping advised MADV_HUGEPAGE (whether the kernel granted huge
  // pages is its choice: /proc/self/smaps's AnonHugePages tells).
  bool huge_pages_advised() const { return mapped_ != 0; }

 private:
  void release() noexcept;

  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
  size_t mapped_ = 0;  // length of the mapping (0: operator new)
};

}  // namespace moe::kernels

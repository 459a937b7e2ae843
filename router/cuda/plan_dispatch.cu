// The planner's algorithm (plan_core.h) on the CUDA backend of Thrust, on an explicit stream with
// workspace-backed temporary storage; the sorts are CUB radix sorts over only the key bits in use.
#include <thrust/system/cuda/execution_policy.h>

#include <cub/device/device_radix_sort.cuh>
#include <new>
#include <stdexcept>
#include <string>

#include "base/cuda/check.h"
#include "router/cuda/plan_core.h"
#include "router/cuda/plan_dispatch.h"

namespace moe::cuda {
namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t n) {
  return (n + kAlign - 1) & ~(kAlign - 1);
}

// Stack allocator over a fixed device buffer for Thrust's temporary storage. Thrust frees each algorithm's
// storage before the next algorithm starts, so the last allocation is always the one freed and the peak is
// one algorithm's need. Running out throws (the workspace query was wrong), it never falls back to
// cudaMalloc.
struct ArenaAllocator {
  using value_type = char;
  char* base;
  size_t capacity;
  size_t* top;  // host-side counter shared by copies of the allocator

  char* allocate(std::ptrdiff_t n) {
    const size_t bytes = align_up(static_cast<size_t>(n));
    if (*top + bytes > capacity) {
      throw std::runtime_error("gpu planner: temporary storage of " + std::to_string(n) +
                               " bytes exceeds the workspace arena (" + std::to_string(capacity - *top) +
                               " left); plan_workspace_bytes() is too small for this shape");
    }
    char* p = base + *top;
    *top += bytes;
    return p;
  }
  void deallocate(char* p, size_t n) {
    if (p + align_up(n) == base + *top) *top = static_cast<size_t>(p - base);
  }
};

// CUB radix sort over key bits [0, end_bit), in place on (keys, vals): alternate buffers and CUB's temporary
// storage come from the arena; when the result lands in the alternates it is copied back (asynchronously).
struct CubSorter {
  ArenaAllocator* arena;
  cudaStream_t stream;
  void operator()(uint64_t* keys, int32_t* vals, int n, int end_bit) const {
    if (n <= 1) return;
    const size_t key_bytes = static_cast<size_t>(n) * sizeof(uint64_t),
                 val_bytes = static_cast<size_t>(n) * sizeof(int32_t);
    auto* keys_alt = reinterpret_cast<uint64_t*>(arena->allocate(static_cast<std::ptrdiff_t>(key_bytes)));
    auto* vals_alt = reinterpret_cast<int32_t*>(arena->allocate(static_cast<std::ptrdiff_t>(val_bytes)));
    cub::DoubleBuffer<uint64_t> k(keys, keys_alt);
    cub::DoubleBuffer<int32_t> v(vals, vals_alt);
    size_t temp_bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k, v, n, 0, end_bit, stream));
    char* temp = arena->allocate(static_cast<std::ptrdiff_t>(temp_bytes));
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, k, v, n, 0, end_bit, stream));
    if (k.Current() != keys)
      CUDA_CHECK(cudaMemcpyAsync(keys, k.Current(), key_bytes, cudaMemcpyDeviceToDevice, stream));
    if (v.Current() != vals)
      CUDA_CHECK(cudaMemcpyAsync(vals, v.Current(), val_bytes, cudaMemcpyDeviceToDevice, stream));
    arena->deallocate(temp, temp_bytes);
    arena->deallocate(reinterpret_cast<char*>(vals_alt), val_bytes);
    arena->deallocate(reinterpret_cast<char*>(keys_alt), key_bytes);
  }
};

// Bound on the largest temporary storage one Thrust algorithm of the plan asks for: a radix sort of the pair
// keys needs alternate key/value buffers plus CUB's own storage; scans need a little.
size_t arena_bytes(const PlanShape& shape) {
  const size_t pairs = static_cast<size_t>(std::max(shape.max_tokens, 1)) * shape.top_k;
  size_t sort_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int64_t>(pairs)));
  return 2 * (align_up(sort_bytes) + align_up(pairs * 8) + align_up(pairs * 4)) + (size_t{4} << 20);
}

}  // namespace

size_t plan_workspace_bytes(const PlanShape& shape) {
  shape.validate();
  return align_up(PlanWorkspaceLayout(shape).bytes) + arena_bytes(shape);
}

void plan_dispatch(const PlanShape& shape, const PlanInputs& in, const PlanOutputs& out, void* workspace,
                   size_t workspace_bytes, cudaStream_t stream) {
  shape.validate();
  check_plan_args(shape, in, out);
  const size_t arrays = align_up(PlanWorkspaceLayout(shape).bytes);
  const size_t needed = arrays + arena_bytes(shape);
  if (workspace == nullptr || workspace_bytes < needed) {
    throw std::invalid_argument("gpu planner: workspace of " + std::to_string(workspace_bytes) +
                                " bytes is below plan_workspace_bytes() = " + std::to_string(needed));
  }
  size_t top = 0;
  ArenaAllocator arena{static_cast<char*>(workspace) + arrays, workspace_bytes - arrays, &top};
  detail::run_plan(thrust::cuda::par_nosync(arena).on(stream), CubSorter{&arena, stream}, shape, in, out,
                   workspace);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace moe::cuda

// How a layer runs its routed experts on a thread pool: the one schedule MoELayer and ExpertParallelLayer
// share.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/cpu/expert_ffn.h"
#include "kernels/cpu/thread_pool.h"

namespace moe {

// Experts with at most this many rows run one per thread when there are enough of them to share out; larger
// experts split their output columns over the pool instead.
inline constexpr int64_t kSmallExpertRows = 32;

// Scratch: one thread running one small expert needs ExpertFfns::expert_scratch_floats(min(max_rows,
// kSmallExpertRows)) floats (per_thread below); a layer holds max(expert_scratch_floats(max_rows), per_thread
// * threads).

// Calls run(e, scratch) once for every expert of `experts` (each with rows; max_rows the largest count).
// When the experts are small and at least two per thread, each runs on one pool thread with its own scratch
// slice (scratch + thread * per_thread; ffn_forward inside a pool task runs inline on that thread);
// otherwise they run one after another with `scratch`, each splitting its columns over the pool. Invariant
// kernels give the same bits either way: only the schedule changes.
template <class Run>
void run_experts_scheduled(std::span<const int> experts, int64_t max_rows, kernels::ThreadPool& pool,
                           float* scratch, size_t per_thread, Run&& run) {
  const int threads = pool.num_threads();
  const bool one_expert_per_thread =
      threads > 1 && max_rows <= kSmallExpertRows && static_cast<int>(experts.size()) >= 2 * threads;
  if (one_expert_per_thread) {
    pool.parallel_for(static_cast<int64_t>(experts.size()), [&](int64_t i, int thread) {
      run(experts[static_cast<size_t>(i)], scratch + static_cast<size_t>(thread) * per_thread);
    });
  } else {
    for (int e : experts) run(e, scratch);
  }
}

}  // namespace moe

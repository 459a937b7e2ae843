// Work items spread over threads, for the simulator's per-token work (scores and routing).
#pragma once

#include <cstddef>
#include <functional>

namespace moe::sim {

// The thread count --threads 0 means: the machine's hardware threads (at least 1).
int default_threads();

// Calls work(item, worker) once for every item in [0, num_items), on `threads` workers (worker ids
// 0 .. threads-1; worker 0 is the calling thread; threads < 1 means default_threads()). Items are handed out
// in increasing order, each to whichever worker is free, so `work` must write only item-owned or
// worker-owned memory. Every item runs; if items throw, the exception of the lowest throwing item is
// rethrown after every worker stopped (so the error does not depend on the thread count).
void parallel_for(int threads, size_t num_items, const std::function<void(size_t item, int worker)>& work);

}  // namespace moe::sim

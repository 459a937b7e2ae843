// Work items spread over threads, for the simulator's per-token work (scores and routing) and its in-order
// chains (planning, statistics).
#pragma once

#include <cstddef>
#include <functional>

#include "kernels/cpu/thread_pool.h"

namespace moe::sim {

// The thread count --threads 0 means: the CPUs this process may run on (kernels::ThreadPool::usable_cpus: the
// machine's, or those an MPI launcher or a cpuset binds it to).
int default_threads();

// A persistent pool (kernels::ThreadPool: `threads` - 1 workers that spin briefly, then sleep, between
// calls; the calling thread is worker 0) that hands out work items dynamically. Keep one across many calls:
// a thread started per call may wait milliseconds before the OS runs it on an idle core.
class ItemRunner {
 public:
  explicit ItemRunner(int threads);  // threads < 1: default_threads()
  int threads() const { return pool_.num_threads(); }

  // Calls work(item, worker) once for every item in [0, num_items) (worker ids 0 .. threads() - 1). Items
  // are handed out in increasing order, each to whichever worker is free, so `work` must write only
  // item-owned or worker-owned memory. Every item runs; if items throw, the exception of the lowest throwing
  // item is rethrown after every worker stopped (so the error does not depend on the thread count). Not
  // reentrant: one call at a time.
  void run(size_t num_items, const std::function<void(size_t item, int worker)>& work);

 private:
  kernels::ThreadPool pool_;
};

// ItemRunner(min(threads, num_items)).run(num_items, work), for a single call.
void parallel_for(int threads, size_t num_items, const std::function<void(size_t item, int worker)>& work);

}  // namespace moe::sim

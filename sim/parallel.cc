#include "sim/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

namespace moe::sim {

int default_threads() {
  return kernels::ThreadPool::usable_cpus();
}

ItemRunner::ItemRunner(int threads) : pool_(threads < 1 ? default_threads() : threads) {}

void ItemRunner::run(size_t num_items, const std::function<void(size_t item, int worker)>& work) {
  if (num_items == 0) return;
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  size_t error_item = num_items;
  std::exception_ptr error;
  // One pool task per thread (the pool runs task t on thread t); each takes items until none is left.
  pool_.parallel_for(pool_.num_threads(), [&](int64_t, int worker) {
    for (;;) {
      const size_t item = next.fetch_add(1);
      if (item >= num_items) return;
      try {
        work(item, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (item < error_item) {
          error_item = item;
          error = std::current_exception();
        }
      }
    }
  });
  if (error) std::rethrow_exception(error);
}

void parallel_for(int threads, size_t num_items, const std::function<void(size_t item, int worker)>& work) {
  if (threads < 1) threads = default_threads();
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(num_items, 1)));
  ItemRunner(threads).run(num_items, work);
}

}  // namespace moe::sim

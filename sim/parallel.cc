#include "sim/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace moe::sim {

int default_threads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

void parallel_for(int threads, size_t num_items, const std::function<void(size_t item, int worker)>& work) {
  if (threads < 1) threads = default_threads();
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(num_items, 1)));
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  size_t error_item = num_items;
  std::exception_ptr error;
  auto run = [&](int worker) {
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
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < threads; ++w) pool.emplace_back(run, w);
  run(0);
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace moe::sim

// The simulator's work items (sim/parallel.h): every item once, worker ids in range, the lowest throwing
// item's error, and one pool reused across calls.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/parallel.h"

namespace moe::sim {
namespace {

TEST(SimParallel, EveryItemOnceOnAnyThreadCount) {
  for (int threads : {1, 2, 3, 5}) {
    ItemRunner runner(threads);
    EXPECT_EQ(runner.threads(), threads);
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {  // one pool, several calls
      std::vector<std::atomic<int>> runs(n);
      std::atomic<int> bad_worker{0};
      runner.run(n, [&](size_t item, int worker) {
        runs[item].fetch_add(1);
        if (worker < 0 || worker >= threads) bad_worker.fetch_add(1);
      });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(runs[i].load(), 1) << threads << " threads, item " << i;
      EXPECT_EQ(bad_worker.load(), 0);
    }
  }
}

TEST(SimParallel, TheLowestThrowingItemsErrorAfterEveryItemRan) {
  for (int threads : {1, 2, 4}) {
    ItemRunner runner(threads);
    std::atomic<int> ran{0};
    try {
      runner.run(64, [&](size_t item, int) {
        ran.fetch_add(1);
        if (item == 9 || item == 40 || item == 63) throw std::runtime_error("item " + std::to_string(item));
      });
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "item 9") << threads << " threads";
    }
    EXPECT_EQ(ran.load(), 64);
    // The pool still works after an error.
    std::atomic<int> after{0};
    runner.run(5, [&](size_t, int) { after.fetch_add(1); });
    EXPECT_EQ(after.load(), 5);
  }
  std::atomic<int> once{0};
  parallel_for(3, 4, [&](size_t, int) { once.fetch_add(1); });
  EXPECT_EQ(once.load(), 4);
}

}  // namespace
}  // namespace moe::sim

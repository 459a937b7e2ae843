#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace moe::kernels {
namespace {

TEST(ThreadPool, RejectsZeroThreads) {
  try {
    ThreadPool pool(0);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("num_threads (0)"), std::string::npos) << e.what();
  }
}

TEST(ThreadPool, EveryTaskOnceOnItsStaticThread) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000}) {
      std::vector<std::atomic<int>> count(static_cast<size_t>(n));
      std::vector<int> owner(static_cast<size_t>(n), -1);
      pool.parallel_for(n, [&](int64_t task, int thread) {
        count[static_cast<size_t>(task)].fetch_add(1);
        owner[static_cast<size_t>(task)] = thread;  // each task written by one thread only
      });
      for (int64_t t = 0; t < n; ++t) {
        EXPECT_EQ(count[static_cast<size_t>(t)].load(), 1);
        int expected = -1;
        for (int th = 0; th < threads; ++th) {
          int64_t first = 0, last = 0;
          ThreadPool::task_range(n, threads, th, &first, &last);
          if (t >= first && t < last) expected = th;
        }
        EXPECT_EQ(owner[static_cast<size_t>(t)], expected) << "n=" << n << " task=" << t;
      }
    }
  }
}

TEST(ThreadPool, SingleThreadRunsInlineOnCaller) {
  ThreadPool pool(1);
  const auto caller = std::this_thread::get_id();
  pool.parallel_for(10, [&](int64_t, int thread) {
    EXPECT_EQ(thread, 0);
    EXPECT_EQ(std::this_thread::get_id(), caller);
  });
}

TEST(ThreadPool, CallerIsThreadZero) {
  ThreadPool pool(3);
  const auto caller = std::this_thread::get_id();
  std::vector<std::thread::id> ids(3);
  pool.parallel_for(3, [&](int64_t task, int thread) {
    EXPECT_EQ(task, thread);
    ids[static_cast<size_t>(thread)] = std::this_thread::get_id();
  });
  EXPECT_EQ(ids[0], caller);
  EXPECT_NE(ids[1], caller);
  EXPECT_NE(ids[2], caller);
  EXPECT_NE(ids[1], ids[2]);
}

TEST(ThreadPool, ManyBackToBackCalls) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int i = 0; i < 20000; ++i) {
    pool.parallel_for(4, [&](int64_t task, int) { sum.fetch_add(task + 1, std::memory_order_relaxed); });
  }
  EXPECT_EQ(sum.load(), 20000 * 10);
}

// Waiting threads spin only when every thread of the pool can have a CPU of its own (the affinity mask);
// a pool with more threads than that (a rank bound to fewer cores) sleeps at once, and still runs every
// task once on its static thread, back to back.
TEST(ThreadPool, SpinsOnlyWithACpuPerThread) {
  const int cpus = ThreadPool::usable_cpus();
  ASSERT_GE(cpus, 1);
  EXPECT_LE(cpus, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_TRUE(ThreadPool(1).spins());
  EXPECT_TRUE(ThreadPool(cpus).spins());
  ThreadPool crowded(cpus + 2);
  EXPECT_FALSE(crowded.spins());
  const int threads = crowded.num_threads();
  std::vector<int> runs(64 * static_cast<size_t>(threads));
  for (int call = 0; call < 2000; ++call) {
    crowded.parallel_for(static_cast<int64_t>(runs.size()), [&](int64_t task, int thread) {
      int64_t first = 0, last = 0;
      ThreadPool::task_range(static_cast<int64_t>(runs.size()), threads, thread, &first, &last);
      if (task >= first && task < last) ++runs[static_cast<size_t>(task)];
    });
  }
  for (int r : runs) ASSERT_EQ(r, 2000);
}

TEST(ThreadPool, ExceptionsReachTheCaller) {
  ThreadPool pool(3);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.parallel_for(9,
                                 [&](int64_t task, int) {
                                   ran.fetch_add(1);
                                   if (task == 7) throw std::runtime_error("task 7");
                                 }),
               std::runtime_error);
  EXPECT_GE(ran.load(), 7);
  // The pool stays usable.
  std::atomic<int> after{0};
  pool.parallel_for(9, [&](int64_t, int) { after.fetch_add(1); });
  EXPECT_EQ(after.load(), 9);
}

TEST(ThreadPool, NestedCallRunsInline) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(4 * 3);
  pool.parallel_for(4, [&](int64_t outer, int outer_thread) {
    pool.parallel_for(3, [&](int64_t inner, int inner_thread) {
      EXPECT_EQ(inner_thread, outer_thread);
      hits[static_cast<size_t>(outer * 3 + inner)].fetch_add(1);
    });
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, ConcurrentCallersAreSerialised) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  auto caller = [&] {
    for (int i = 0; i < 2000; ++i) pool.parallel_for(5, [&](int64_t t, int) { total.fetch_add(t); });
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2 * 2000 * 10);
}

}  // namespace
}  // namespace moe::kernels

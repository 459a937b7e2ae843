#include "kernels/cpu/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MOE_CPU_RELAX() _mm_pause()
#else
#define MOE_CPU_RELAX() std::this_thread::yield()
#endif

namespace moe::kernels {
namespace {

// The pool whose task the current thread is running (for nested calls), and that thread's index.
thread_local const ThreadPool* tls_pool = nullptr;
thread_local int tls_thread = 0;

// Spinning before sleeping on a condition variable: kernels call parallel_for back to back (one per linear
// layer), so a short spin saves the wake-up latency of a futex between them - when the awaited thread is
// running. Each waiting thread adapts its budget: a wait that the spin ended doubles the next budget (up to
// kMaxSpin, ~0.3 ms of pause instructions here), one that had to sleep halves it (down to kMinSpin). On an
// oversubscribed machine (the ranks of an MPI job on fewer cores, other busy processes) the awaited thread
// is often not running while one spins, and the budgets fall to the floor within a few calls instead of
// burning the CPU it needs (an EP test at 4 ranks on 2 cores: 15 s with fixed spins, 2.7 s adaptive).
constexpr int kMaxSpin = 1 << 14;
constexpr int kMinSpin = 16;

// Spins while `busy()` and the budget lasts, then adapts the budget for the next wait (above; 0 stays 0: a
// pool that must not spin). Returns whether the spin saw the end.
template <class Busy>
bool spin_wait(int& budget, int max_budget, Busy busy) {
  for (int i = 0; i < budget && busy(); ++i) MOE_CPU_RELAX();
  const bool ended = !busy();
  if (max_budget > 0) budget = ended ? std::min(max_budget, budget * 2) : std::max(kMinSpin, budget / 2);
  return ended;
}

}  // namespace

int ThreadPool::usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads),
      max_spin_(num_threads <= usable_cpus() ? kMaxSpin : 0),
      caller_spin_(max_spin_) {
  if (num_threads < 1) {
    throw std::invalid_argument("ThreadPool: num_threads (" + std::to_string(num_threads) + ") must be >= 1");
  }
  errors_.resize(static_cast<size_t>(num_threads));
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  for (int t = 1; t < num_threads; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_release);
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_share(int thread) {
  int64_t first = 0, last = 0;
  task_range(job_num_tasks_, num_threads_, thread, &first, &last);
  const ThreadPool* saved_pool = tls_pool;
  const int saved_thread = tls_thread;
  tls_pool = this;
  tls_thread = thread;
  try {
    for (int64_t task = first; task < last; ++task) job_call_(job_ctx_, task, thread);
  } catch (...) {
    errors_[static_cast<size_t>(thread)] = std::current_exception();
  }
  tls_pool = saved_pool;
  tls_thread = saved_thread;
}

void ThreadPool::run(int64_t num_tasks, TaskFn call, void* ctx) {
  if (num_threads_ == 1 || tls_pool == this) {
    // Inline: a single-thread pool, or a nested call from one of this pool's tasks.
    const int thread = tls_pool == this ? tls_thread : 0;
    for (int64_t task = 0; task < num_tasks; ++task) call(ctx, task, thread);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  job_call_ = call;
  job_ctx_ = ctx;
  job_num_tasks_ = num_tasks;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_cv_.notify_all();

  run_share(0);

  // Wait for the workers: spin a little, then sleep.
  if (!spin_wait(caller_spin_, max_spin_, [this] { return pending_.load(std::memory_order_acquire) != 0; })) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  }

  std::exception_ptr first_error;
  for (auto& e : errors_) {
    if (e && !first_error) first_error = e;
    e = nullptr;
  }
  if (first_error) std::rethrow_exception(first_error);
}

void ThreadPool::worker_main(int thread) {
  uint64_t seen = 0;
  int spin = max_spin_;
  for (;;) {
    // Wait for a new generation (or stop): spin a little, then sleep.
    uint64_t gen = 0;
    spin_wait(spin, max_spin_, [&] {
      gen = generation_.load(std::memory_order_acquire);
      return gen == seen && !stop_.load(std::memory_order_relaxed);
    });
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] {
        return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
      });
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) return;  // woken by stop_ with no new job
    seen = gen;

    run_share(thread);

    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace moe::kernels

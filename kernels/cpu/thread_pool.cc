#include "kernels/cpu/thread_pool.h"

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

// Spin iterations before sleeping on a condition variable. Kernels call parallel_for back to back
// (one per linear layer), so a short spin saves the wake-up latency of a futex between them.
constexpr int kSpinIterations = 1 << 14;

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads) {
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
  for (int i = 0; i < kSpinIterations && pending_.load(std::memory_order_acquire) != 0; ++i) MOE_CPU_RELAX();
  if (pending_.load(std::memory_order_acquire) != 0) {
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
  for (;;) {
    // Wait for a new generation (or stop): spin a little, then sleep.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; i < kSpinIterations && gen == seen && !stop_.load(std::memory_order_relaxed); ++i) {
      MOE_CPU_RELAX();
      gen = generation_.load(std::memory_order_acquire);
    }
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

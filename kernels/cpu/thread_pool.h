// A small persistent thread pool for the CPU kernels.
//
// The pool owns num_threads - 1 worker threads; the thread that calls parallel_for is thread 0 and does
// its share of the work. Task-to-thread assignment is static and deterministic: with T threads and N
// tasks, thread t runs the contiguous tasks [N*t/T, N*(t+1)/T) in ascending order. Kernels therefore
// know which thread runs which task, but none of the kernels' results depend on it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace moe::kernels {

class ThreadPool {
 public:
  // Starts num_threads - 1 workers. Throws std::invalid_argument if num_threads < 1.
  // num_threads == 1 starts no thread: parallel_for then runs every task inline.
  explicit ThreadPool(int num_threads);
  // Stops and joins the workers. Must not be called while a parallel_for is running.
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // The CPUs this process may run on (its affinity mask, sched_getaffinity; std::thread::hardware_concurrency
  // where that is not available), at least 1. Under mpirun's default binding a rank gets one core (or a few).
  static int usable_cpus();
  // Whether waiting threads may spin briefly before sleeping (with a budget each waiting thread adapts to
  // how often its spins succeed, thread_pool.cc): only when the pool has no more threads than usable_cpus()
  // at construction. With more (e.g. two threads in a rank bound to one core), a spinning thread would hold
  // the very CPU the thread it waits for needs, so every wait sleeps at once.
  bool spins() const { return max_spin_ > 0; }

  // Runs fn(task, thread) for every task in [0, num_tasks) and returns when all have finished.
  // `thread` is in [0, num_threads()) and is the same for a given (num_tasks, task) on every call, so
  // fn may index per-thread scratch with it. Each task runs exactly once; tasks of one thread run in
  // ascending order. Does not allocate (fn is passed by reference, not wrapped in std::function).
  //
  // Threading: calls from different threads are serialised. A call made from inside a task of this
  // pool runs its tasks inline on the calling thread (passing that thread's index), so nesting is safe.
  // Errors: if tasks throw, the remaining tasks of that thread are skipped, all threads finish, and the
  // exception of the lowest-numbered thread that threw is rethrown to the caller.
  template <class F>
  void parallel_for(int64_t num_tasks, F&& fn) {
    if (num_tasks <= 0) return;
    using Fn = std::remove_reference_t<F>;
    Fn* fn_ptr = &fn;
    run(num_tasks, &invoke<Fn>, const_cast<void*>(static_cast<const void*>(fn_ptr)));
  }

  // The range of tasks [first, last) that `thread` runs when num_tasks tasks are spread over the pool.
  static void task_range(int64_t num_tasks, int num_threads, int thread, int64_t* first, int64_t* last) {
    *first = num_tasks * thread / num_threads;
    *last = num_tasks * (thread + 1) / num_threads;
  }

 private:
  using TaskFn = void (*)(void* ctx, int64_t task, int thread);

  template <class Fn>
  static void invoke(void* ctx, int64_t task, int thread) {
    (*static_cast<Fn*>(ctx))(task, thread);
  }

  void run(int64_t num_tasks, TaskFn call, void* ctx);
  void run_share(int thread);  // runs this thread's tasks of the current job, records an exception
  void worker_main(int thread);

  const int num_threads_;
  const int max_spin_;  // most spin iterations before sleeping on a condition variable (0: sleep at once)
  int caller_spin_;     // the calling thread's current budget (guarded by call_mutex_)
  std::vector<std::thread> workers_;
  std::vector<std::exception_ptr> errors_;  // one per thread, written only by that thread

  std::mutex call_mutex_;  // serialises parallel_for calls from different threads

  // The current job. Written by the caller before it publishes a new generation_ (release) and read by
  // workers after they observe it (acquire); never written while a worker may read it.
  TaskFn job_call_ = nullptr;
  void* job_ctx_ = nullptr;
  int64_t job_num_tasks_ = 0;

  std::mutex mutex_;  // guards sleeping and waking on the two condition variables
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // workers that have not finished the current job
  std::atomic<bool> stop_{false};
};

}  // namespace moe::kernels

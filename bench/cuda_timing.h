// Device-side timing for the GPU benchmarks: CUDA events around device work only.
//
// time_graph(): the work is captured once as a CUDA graph of `reps` calls (set-up, warm-up and capture are
// outside the timed region). Each measurement enqueues a hold kernel that spins until the host releases it,
// then the start event, the graph launch and the stop event, and only then releases the hold: so the
// events bracket the device's execution of the graph, not the host's enqueueing or launch latency.
// time_enqueue(): for work that cannot be captured (it synchronises inside, e.g. CublasExpertFfn::forward):
// events around the call; the time then includes that host round trip.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

namespace moe::cuda::timing {

class DeviceTimer {
 public:
  explicit DeviceTimer(cudaStream_t stream);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  // Captures `reps` calls of enqueue(stream) into a graph (replacing any earlier one). Returns false, leaving
  // no graph, when the work cannot be captured (the capture error is cleared); the caller then uses
  // time_enqueue.
  bool capture(const std::function<void(cudaStream_t)>& enqueue, int reps);
  // Milliseconds of device time per call of the captured work (one graph launch / reps).
  double time_graph();
  // Milliseconds between events recorded before and after enqueue(stream) (host work inside included).
  double time_enqueue(const std::function<void(cudaStream_t)>& enqueue);
  int reps() const { return reps_; }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  int reps_ = 0;
  volatile int* release_ = nullptr;  // mapped pinned flag the hold kernel spins on
  int* release_device_ = nullptr;
};

}  // namespace moe::cuda::timing

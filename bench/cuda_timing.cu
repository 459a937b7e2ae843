#include <cstdint>

#include "base/cuda/check.h"
#include "bench/cuda_timing.h"

namespace moe::cuda::timing {
namespace {

// Spins until *release is set by the host, or 2 s of device time have passed (so a host that never releases
// cannot hang the stream).
__global__ void hold_kernel(const volatile int* release) {
  const uint64_t start = clock64();
  while (*release == 0) {
    if (clock64() - start > 4000000000ull) break;
  }
}

}  // namespace

DeviceTimer::DeviceTimer(cudaStream_t stream) : stream_(stream) {
  CUDA_CHECK(cudaEventCreate(&start_));
  CUDA_CHECK(cudaEventCreate(&stop_));
  int* flag = nullptr;
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped));
  release_ = flag;
  *release_ = 0;
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&release_device_), flag, 0));
}

DeviceTimer::~DeviceTimer() {
  if (exec_) cudaGraphExecDestroy(exec_);
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
  cudaFreeHost(const_cast<int*>(release_));
}

bool DeviceTimer::capture(const std::function<void(cudaStream_t)>& enqueue, int reps) {
  if (exec_) {
    CUDA_CHECK(cudaGraphExecDestroy(exec_));
    exec_ = nullptr;
  }
  reps_ = 0;
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  bool ok = true;
  try {
    for (int i = 0; i < reps; ++i) enqueue(stream_);
  } catch (...) {
    ok = false;  // e.g. a synchronisation inside enqueue: the capture is invalidated
  }
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  if (!ok || end != cudaSuccess || graph == nullptr) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // clear the capture error
    return false;
  }
  const cudaError_t inst = cudaGraphInstantiate(&exec_, graph, 0);
  cudaGraphDestroy(graph);
  if (inst != cudaSuccess) {
    exec_ = nullptr;
    cudaGetLastError();
    return false;
  }
  reps_ = reps;
  CUDA_CHECK(cudaGraphLaunch(exec_, stream_));  // warm-up of the graph itself
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return true;
}

double DeviceTimer::time_graph() {
  *release_ = 0;
  hold_kernel<<<1, 1, 0, stream_>>>(release_device_);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaEventRecord(start_, stream_));
  CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
  CUDA_CHECK(cudaEventRecord(stop_, stream_));
  *release_ = 1;  // everything is enqueued: let the device start
  CUDA_CHECK(cudaEventSynchronize(stop_));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return static_cast<double>(ms) / reps_;
}

double DeviceTimer::time_enqueue(const std::function<void(cudaStream_t)>& enqueue) {
  CUDA_CHECK(cudaEventRecord(start_, stream_));
  enqueue(stream_);
  CUDA_CHECK(cudaEventRecord(stop_, stream_));
  CUDA_CHECK(cudaEventSynchronize(stop_));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return static_cast<double>(ms);
}

}  // namespace moe::cuda::timing

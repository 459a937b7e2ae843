#include "base/cuda/device.h"

#include <cuda_runtime_api.h>

namespace moe::cuda {

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    if (why) {
      *why = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(status) + " (" +
             cudaGetErrorString(status) + ")";
    }
    return false;
  }
  if (count < 1) {
    if (why) *why = "no CUDA device (cudaGetDeviceCount returned 0)";
    return false;
  }
  return true;
}

}  // namespace moe::cuda

// Error checks for CUDA runtime and cuBLAS calls: they throw std::runtime_error naming the file and line.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace moe::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + call +
                           " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                            int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + call +
                           " failed: cublas status " + std::to_string(static_cast<int>(status)));
}

}  // namespace moe::cuda

#define CUDA_CHECK(call)                                                          \
  do {                                                                            \
    const cudaError_t moe_cuda_status_ = (call);                                  \
    if (moe_cuda_status_ != cudaSuccess) {                                        \
      ::moe::cuda::throw_cuda_error(moe_cuda_status_, #call, __FILE__, __LINE__); \
    }                                                                             \
  } while (0)

#define CUBLAS_CHECK(call)                                                            \
  do {                                                                                \
    const cublasStatus_t moe_cublas_status_ = (call);                                 \
    if (moe_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                \
      ::moe::cuda::throw_cublas_error(moe_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                                 \
  } while (0)

// The fast kind of the expert FFN on cuBLAS (see expert_ffn.h).
#include <cstddef>
#include <stdexcept>
#include <string>

#include "base/cuda/check.h"
#include "kernels/cuda/expert_ffn.h"

namespace moe::cuda {

CublasExpertFfn::CublasExpertFfn(const ExpertWeightsView& weights, int max_rows)
    : weights_(weights), max_rows_(max_rows) {
  const size_t h = static_cast<size_t>(max_rows) * weights.ffn;
  CUBLAS_CHECK(cublasCreate(&handle_));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&gate_), h * sizeof(float)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&up_), h * sizeof(float)));
  if (weights.type == kernels::DType::kBF16) {
    CUDA_CHECK(cudaMalloc(&x_bf16_, static_cast<size_t>(max_rows) * weights.hidden * 2));
    CUDA_CHECK(cudaMalloc(&h_bf16_, h * 2));
  }
  CUDA_CHECK(
      cudaMallocHost(reinterpret_cast<void**>(&host_offsets_), (weights.num_experts + 1) * sizeof(int32_t)));
}

CublasExpertFfn::~CublasExpertFfn() {
  cudaFree(gate_);
  cudaFree(up_);
  cudaFree(x_bf16_);
  cudaFree(h_bf16_);
  cudaFreeHost(host_offsets_);
  if (handle_) cublasDestroy(handle_);
}

// out [rows, n] (row-major) = x [rows, k] @ w[n, k]^T. In cuBLAS's column-major terms: out^T = w^T' x^T
// with w read transposed (op T on a k x n column-major matrix) and x as a k x rows column-major matrix.
void CublasExpertFfn::gemm(const void* w, int n, int k, const void* x, int rows, float* out) {
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t type = weights_.type == kernels::DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &alpha, w, type, k, x, type, k,
                            &beta, out, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CublasExpertFfn::forward(const float* x_rows, const int32_t* expert_offsets, float* y_rows,
                              cudaStream_t stream) {
  const int E = weights_.num_experts;
  CUDA_CHECK(cudaMemcpyAsync(host_offsets_, expert_offsets, (E + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                             stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));  // the one documented synchronisation of the fast path
  enqueue(x_rows, expert_offsets, host_offsets_, y_rows, stream);
}

void CublasExpertFfn::enqueue(const float* x_rows, const int32_t* expert_offsets, const int32_t* host_offsets,
                              float* y_rows, cudaStream_t stream) {
  const int E = weights_.num_experts, d = weights_.hidden, f = weights_.ffn;
  const bool bf16 = weights_.type == kernels::DType::kBF16;
  const size_t wsize = bf16 ? 2 : 4;
  const bool gelu_act = weights_.activation == kernels::Activation::kGELU;
  if (host_offsets[0] != 0 || host_offsets[E] > max_rows_) {
    throw std::invalid_argument("cublas expert ffn: offsets must start at 0 and end at <= max_rows (" +
                                std::to_string(max_rows_) + "), got " + std::to_string(host_offsets[0]) +
                                ".." + std::to_string(host_offsets[E]));
  }
  for (int e = 0; e < E; ++e) {
    if (host_offsets[e + 1] < host_offsets[e]) {
      throw std::invalid_argument("cublas expert ffn: offsets decrease at expert " + std::to_string(e));
    }
  }
  CUBLAS_CHECK(cublasSetStream(handle_, stream));
  const int total = host_offsets[E];
  const char* x = reinterpret_cast<const char*>(x_rows);
  if (bf16) {
    cast_to_bf16(x_rows, static_cast<size_t>(total) * d, x_bf16_, stream);
    x = static_cast<const char*>(x_bf16_);
  }
  const char* w1 = static_cast<const char*>(weights_.w1);
  const char* w3 = static_cast<const char*>(weights_.w3);
  const char* w2 = static_cast<const char*>(weights_.w2);
  const size_t expert_bytes = static_cast<size_t>(f) * d * wsize;
  for (int e = 0; e < E; ++e) {
    const int rows = host_offsets[e + 1] - host_offsets[e];
    if (rows == 0) continue;
    const size_t r0 = host_offsets[e];
    const int first = static_cast<int>(r0);
    if (gelu_act) {
      gemm(w1 + e * expert_bytes, f, d, x + r0 * d * wsize, rows, up_ + r0 * f);  // GELU: w1 is the up proj
      if (weights_.b1) add_bias_rows(up_, first, rows, f, weights_.b1 + static_cast<size_t>(e) * f, stream);
    } else {
      gemm(w1 + e * expert_bytes, f, d, x + r0 * d * wsize, rows, gate_ + r0 * f);
      gemm(w3 + e * expert_bytes, f, d, x + r0 * d * wsize, rows, up_ + r0 * f);
      if (weights_.b1) add_bias_rows(gate_, first, rows, f, weights_.b1 + static_cast<size_t>(e) * f, stream);
      if (weights_.b3) add_bias_rows(up_, first, rows, f, weights_.b3 + static_cast<size_t>(e) * f, stream);
    }
  }
  float* h_f32 = bf16 ? nullptr : up_;
  void* h_b16 = bf16 ? h_bf16_ : nullptr;
  switch (weights_.activation) {
    case kernels::Activation::kGELU:
      gelu_rows(up_, f, expert_offsets, E, max_rows_, h_f32, h_b16, stream);
      break;
    case kernels::Activation::kSwiGLU:
      swiglu_rows(gate_, up_, f, expert_offsets, E, max_rows_, h_f32, h_b16, stream);
      break;
    case kernels::Activation::kClampedSwiGLU:
      clamped_swiglu_rows(gate_, up_, f, expert_offsets, E, max_rows_, weights_.swiglu_alpha,
                          weights_.swiglu_limit, h_f32, h_b16, stream);
      break;
  }
  const char* h = bf16 ? static_cast<const char*>(h_bf16_) : reinterpret_cast<const char*>(up_);
  for (int e = 0; e < E; ++e) {
    const int rows = host_offsets[e + 1] - host_offsets[e];
    if (rows == 0) continue;
    const size_t r0 = host_offsets[e];
    gemm(w2 + e * expert_bytes, d, f, h + r0 * f * wsize, rows, y_rows + r0 * d);
    if (weights_.b2) {
      add_bias_rows(y_rows, static_cast<int>(r0), rows, d, weights_.b2 + static_cast<size_t>(e) * d, stream);
    }
  }
}

}  // namespace moe::cuda

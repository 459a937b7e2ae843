// Gather, invariant grouped GEMM (with fused SwiGLU), combine, and the fast path's element-wise kernels.
#include <cuda_bf16.h>

#include <stdexcept>
#include <string>

#include "base/cuda/check.h"
#include "base/splitmix64.h"
#include "kernels/activation_rules.h"
#include "kernels/cuda/expert_ffn.h"

namespace moe::cuda {
namespace {

constexpr int kBM = 64, kBN = 64, kBK = 16, kThreads = 256, kPad = 4;

__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

__device__ __forceinline__ float silu_mul(float gate, float up) {
  return gate / (1.0f + expf(-gate)) * up;
}

// gelu(x) = x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))), the tanh approximation in the CPU's form.
__device__ __forceinline__ float gelu(float x) {
  return x / (1.0f + expf(-1.5957691216057308f * (x + 0.044715f * (x * x * x))));
}

struct CudaExp {
  __host__ __device__ float operator()(float v) const { return expf(v); }
};

__device__ __forceinline__ float clamped_swiglu(float gate, float up, float alpha, float limit) {
  return kernels::rules::clamped_swiglu(gate, up, alpha, limit, CudaExp{});
}

// What the grouped GEMM's epilogue does with its accumulators (after adding the biases, if any).
enum Epilogue : int { kPlain = 0, kSwiGLUEpi = 1, kGeluEpi = 2, kClampedEpi = 3 };

// The epilogue's parameters: per-expert biases of the two accumulators ([E][N] each, null: none) and the
// clamped SwiGLU's constants.
struct EpilogueArgs {
  const float* bias0 = nullptr;
  const float* bias1 = nullptr;
  float alpha = 1.702f, limit = 7.0f;
};

__global__ void gather_kernel(const float* __restrict__ x, int hidden, const int32_t* __restrict__ slot_pairs,
                              const int32_t* __restrict__ offsets, int num_experts, int top_k,
                              const float* __restrict__ pair_weight, float* __restrict__ x_rows) {
  const int r = blockIdx.x;
  if (r >= offsets[num_experts]) return;
  const int64_t t = slot_pairs[r] / top_k;
  const float* src = x + t * hidden;
  float* dst = x_rows + static_cast<int64_t>(r) * hidden;
  if (pair_weight != nullptr) {
    const float w = pair_weight[slot_pairs[r]];
    for (int d = threadIdx.x; d < hidden; d += blockDim.x) dst[d] = w * src[d];
  } else {
    for (int d = threadIdx.x; d < hidden; d += blockDim.x) dst[d] = src[d];
  }
}

__global__ void row_bias_kernel(float* __restrict__ logits, int num_tokens, int num_experts,
                                const float* __restrict__ bias) {
  const size_t count = static_cast<size_t>(num_tokens) * num_experts;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    logits[i] += bias[i % num_experts];
  }
}

__global__ void bias_rows_kernel(float* __restrict__ rows, int first_row, int num_rows, int cols,
                                 const float* __restrict__ bias) {
  const size_t count = static_cast<size_t>(num_rows) * cols;
  float* base = rows + static_cast<size_t>(first_row) * cols;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    base[i] += bias[i % cols];
  }
}

__global__ void combine_kernel(const float* __restrict__ y_rows, int hidden,
                               const int32_t* __restrict__ pair_expert, const int32_t* __restrict__ pair_slot,
                               const float* __restrict__ pair_weight, const int32_t* __restrict__ offsets,
                               int top_k, const float* __restrict__ shared,
                               const float* __restrict__ shared_gate_logit, float* __restrict__ y) {
  const int64_t t = blockIdx.x;
  const float scale = shared_gate_logit ? 1.0f / (1.0f + expf(-shared_gate_logit[t])) : 1.0f;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      const int64_t p = t * top_k + j;
      const int e = pair_expert[p];
      if (e < 0) continue;
      const int64_t row = offsets[e] + pair_slot[p];
      acc = fmaf(pair_weight ? pair_weight[p] : 1.0f, y_rows[row * hidden + d], acc);
    }
    if (shared) acc = fmaf(scale, shared[t * hidden + d], acc);
    y[t * hidden + d] = acc;
  }
}

__global__ void single_group_kernel(int32_t* offsets, int num_rows) {
  offsets[0] = 0;
  offsets[1] = num_rows;
}

// tile_table[e] = first tile of expert e; tile_table[E] = total tiles. One thread: E is small.
__global__ void tile_table_kernel(const int32_t* __restrict__ offsets, int num_experts,
                                  int32_t* __restrict__ tiles) {
  int32_t total = 0;
  for (int e = 0; e < num_experts; ++e) {
    tiles[e] = total;
    total += (offsets[e + 1] - offsets[e] + kBM - 1) / kBM;
  }
  tiles[num_experts] = total;
}

// C[r, n] = sum_k A[r, k] * B_e[n, k] (+ bias0_e[n]) over the rows r of each expert e, with
// B_e = B + e * N * K.
// kSwiGLUEpi: C[r, n] = silu(A B0_e^T + bias0) * (A B1_e^T + bias1), both accumulated side by side.
// kClampedEpi: the same accumulators through the clamped SwiGLU.
// kGeluEpi: C[r, n] = gelu(A B0_e^T + bias0).
template <typename W, int kEpilogue>
__global__ void __launch_bounds__(kThreads)
    grouped_gemm_kernel(const float* __restrict__ A, const W* __restrict__ B0, const W* __restrict__ B1,
                        int N, int K, const int32_t* __restrict__ offsets, const int32_t* __restrict__ tiles,
                        int num_experts, EpilogueArgs epi, float* __restrict__ C) {
  constexpr bool kSwiGLU = kEpilogue == kSwiGLUEpi || kEpilogue == kClampedEpi;
  const int tile = blockIdx.x;
  if (tile >= tiles[num_experts]) return;
  int lo = 0, hi = num_experts - 1;  // the expert whose tiles hold `tile`
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tiles[mid] <= tile) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int e = lo;
  const int row0 = offsets[e] + (tile - tiles[e]) * kBM;
  const int row_end = offsets[e + 1];
  const int n0 = blockIdx.y * kBN;
  const W* b0 = B0 + static_cast<int64_t>(e) * N * K;
  const W* b1 = kSwiGLU ? B1 + static_cast<int64_t>(e) * N * K : nullptr;

  __shared__ float As[kBK][kBM + kPad];
  __shared__ float Bs0[kBK][kBN + kPad];
  __shared__ float Bs1[kSwiGLU ? kBK : 1][kBN + kPad];

  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  float acc0[4][4], acc1[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc0[i][j] = acc1[i][j] = 0.0f;
  }

  for (int k0 = 0; k0 < K; k0 += kBK) {
#pragma unroll
    for (int q = 0; q < (kBM * kBK) / kThreads; ++q) {
      const int idx = tid + q * kThreads;
      const int r = idx / kBK, kk = idx % kBK;
      const int k = k0 + kk;
      const int row = row0 + r;
      As[kk][r] = (row < row_end && k < K) ? A[static_cast<int64_t>(row) * K + k] : 0.0f;
      const int n = n0 + r;
      const bool in = n < N && k < K;
      Bs0[kk][r] = in ? to_float(b0[static_cast<int64_t>(n) * K + k]) : 0.0f;
      if constexpr (kSwiGLU) Bs1[kk][r] = in ? to_float(b1[static_cast<int64_t>(n) * K + k]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      float a[4], b[4], c[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        b[j] = Bs0[kk][tx + 16 * j];
        if constexpr (kSwiGLU) c[j] = Bs1[kk][tx + 16 * j];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc0[i][j] = fmaf(a[i], b[j], acc0[i][j]);
          if constexpr (kSwiGLU) acc1[i][j] = fmaf(a[i], c[j], acc1[i][j]);
        }
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = row0 + ty + 16 * i;
    if (row >= row_end) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx + 16 * j;
      if (n >= N) continue;
      float a0 = acc0[i][j], a1 = acc1[i][j];
      if (epi.bias0) a0 += epi.bias0[static_cast<int64_t>(e) * N + n];
      if (epi.bias1) a1 += epi.bias1[static_cast<int64_t>(e) * N + n];
      float v = a0;
      if constexpr (kEpilogue == kSwiGLUEpi) v = silu_mul(a0, a1);
      if constexpr (kEpilogue == kClampedEpi) v = clamped_swiglu(a0, a1, epi.alpha, epi.limit);
      if constexpr (kEpilogue == kGeluEpi) v = gelu(a0);
      C[static_cast<int64_t>(row) * N + n] = v;
    }
  }
}

template <typename W, int kEpilogue>
void launch_grouped(const void* w0, const void* w1, int num_experts, int n, int k, const float* x_rows,
                    const int32_t* offsets, int max_rows, float* out, int32_t* tiles, cudaStream_t stream,
                    EpilogueArgs epi = {}) {
  tile_table_kernel<<<1, 1, 0, stream>>>(offsets, num_experts, tiles);
  CUDA_CHECK(cudaGetLastError());
  // Upper bound on the tiles: sum_e ceil(rows_e / BM) <= max_rows / BM + E.
  const int max_tiles = (max_rows + kBM - 1) / kBM + num_experts;
  if (max_tiles <= 0 || n <= 0) return;
  const dim3 grid(max_tiles, (n + kBN - 1) / kBN);
  grouped_gemm_kernel<W, kEpilogue><<<grid, kThreads, 0, stream>>>(x_rows, static_cast<const W*>(w0),
                                                                   static_cast<const W*>(w1), n, k, offsets,
                                                                   tiles, num_experts, epi, out);
  CUDA_CHECK(cudaGetLastError());
}

__global__ void cast_bf16_kernel(const float* __restrict__ in, size_t count,
                                 __nv_bfloat16* __restrict__ out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16(in[i]);
  }
}

// NOTES: out_f32 may alias gate or up (the fast path activates in place, into up), so none of the three is
// __restrict__: a write through a pointer that aliases a __restrict__ input is undefined behaviour, and nvcc
// may then reorder or cache the loads. Each element is read before it is written, by the same thread.
__global__ void swiglu_kernel(const float* gate, const float* up, int ffn,
                              const int32_t* __restrict__ offsets, int num_experts, float* out_f32,
                              __nv_bfloat16* __restrict__ out_bf16) {
  const size_t count = static_cast<size_t>(offsets[num_experts]) * ffn;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float h = silu_mul(gate[i], up[i]);
    if (out_f32) out_f32[i] = h;
    if (out_bf16) out_bf16[i] = __float2bfloat16(h);
  }
}

// NOTES: out_f32 may alias gate or up, as in swiglu_kernel.
__global__ void clamped_swiglu_kernel(const float* gate, const float* up, int ffn,
                                      const int32_t* __restrict__ offsets, int num_experts, float alpha,
                                      float limit, float* out_f32, __nv_bfloat16* __restrict__ out_bf16) {
  const size_t count = static_cast<size_t>(offsets[num_experts]) * ffn;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float h = clamped_swiglu(gate[i], up[i], alpha, limit);
    if (out_f32) out_f32[i] = h;
    if (out_bf16) out_bf16[i] = __float2bfloat16(h);
  }
}

// NOTES: out_f32 may alias up (the fast path activates in place), so neither is __restrict__.
__global__ void gelu_kernel(const float* up, int ffn, const int32_t* __restrict__ offsets, int num_experts,
                            float* out_f32, __nv_bfloat16* __restrict__ out_bf16) {
  const size_t count = static_cast<size_t>(offsets[num_experts]) * ffn;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float h = gelu(up[i]);
    if (out_f32) out_f32[i] = h;
    if (out_bf16) out_bf16[i] = __float2bfloat16(h);
  }
}

__global__ void fill_kernel(bool bf16, void* data, size_t count, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint64_t z = mix64(seed + kGoldenGamma * i);
    const float v = (static_cast<float>(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;
    if (bf16) {
      static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16(v);
    } else {
      static_cast<float*>(data)[i] = v;
    }
  }
}

int grid_for(size_t count) {
  const size_t blocks = (count + 255) / 256;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

size_t align_up(size_t n) {
  return (n + 255) & ~size_t{255};
}

}  // namespace

void gather_rows(const float* x, int hidden, const int32_t* slot_pairs, const int32_t* expert_offsets,
                 int num_experts, int top_k, int max_rows, float* x_rows, cudaStream_t stream,
                 const float* pair_weight) {
  if (max_rows <= 0) return;
  gather_kernel<<<max_rows, 256, 0, stream>>>(x, hidden, slot_pairs, expert_offsets, num_experts, top_k,
                                              pair_weight, x_rows);
  CUDA_CHECK(cudaGetLastError());
}

void add_row_bias(float* logits, int num_tokens, int num_experts, const float* bias, cudaStream_t stream) {
  const size_t count = static_cast<size_t>(num_tokens) * num_experts;
  if (count == 0 || bias == nullptr) return;
  row_bias_kernel<<<grid_for(count), 256, 0, stream>>>(logits, num_tokens, num_experts, bias);
  CUDA_CHECK(cudaGetLastError());
}

void add_bias_rows(float* rows, int first_row, int num_rows, int cols, const float* bias,
                   cudaStream_t stream) {
  const size_t count = static_cast<size_t>(num_rows) * cols;
  if (count == 0 || bias == nullptr) return;
  bias_rows_kernel<<<grid_for(count), 256, 0, stream>>>(rows, first_row, num_rows, cols, bias);
  CUDA_CHECK(cudaGetLastError());
}

void combine_rows(const float* y_rows, int hidden, const int32_t* pair_expert, const int32_t* pair_slot,
                  const float* pair_weight, const int32_t* expert_offsets, int num_tokens, int top_k,
                  float* y, cudaStream_t stream) {
  if (num_tokens <= 0) return;
  combine_kernel<<<num_tokens, 256, 0, stream>>>(y_rows, hidden, pair_expert, pair_slot, pair_weight,
                                                 expert_offsets, top_k, nullptr, nullptr, y);
  CUDA_CHECK(cudaGetLastError());
}

void combine_rows_with_shared(const float* y_rows, int hidden, const int32_t* pair_expert,
                              const int32_t* pair_slot, const float* pair_weight,
                              const int32_t* expert_offsets, int num_tokens, int top_k, const float* shared,
                              const float* shared_gate_logit, float* y, cudaStream_t stream) {
  if (num_tokens <= 0) return;
  combine_kernel<<<num_tokens, 256, 0, stream>>>(y_rows, hidden, pair_expert, pair_slot, pair_weight,
                                                 expert_offsets, top_k, shared,
                                                 shared ? shared_gate_logit : nullptr, y);
  CUDA_CHECK(cudaGetLastError());
}

void single_group_offsets(int32_t* offsets, int num_rows, cudaStream_t stream) {
  single_group_kernel<<<1, 1, 0, stream>>>(offsets, num_rows);
  CUDA_CHECK(cudaGetLastError());
}

void grouped_linear_invariant(kernels::DType type, const void* w, int num_experts, int n, int k,
                              const float* x_rows, const int32_t* expert_offsets, int max_rows, float* out,
                              int32_t* tile_table, cudaStream_t stream) {
  if (type == kernels::DType::kF32) {
    launch_grouped<float, kPlain>(w, nullptr, num_experts, n, k, x_rows, expert_offsets, max_rows, out,
                                  tile_table, stream);
  } else {
    launch_grouped<__nv_bfloat16, kPlain>(w, nullptr, num_experts, n, k, x_rows, expert_offsets, max_rows,
                                          out, tile_table, stream);
  }
}

size_t expert_ffn_invariant_workspace_bytes(int num_experts, int max_rows, int ffn) {
  return align_up(static_cast<size_t>(max_rows) * ffn * sizeof(float)) +
         align_up((static_cast<size_t>(num_experts) + 1) * sizeof(int32_t));
}

void expert_ffn_invariant(const ExpertWeightsView& w, const float* x_rows, const int32_t* expert_offsets,
                          int max_rows, float* y_rows, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream) {
  const size_t needed = expert_ffn_invariant_workspace_bytes(w.num_experts, max_rows, w.ffn);
  if (workspace == nullptr || workspace_bytes < needed) {
    throw std::invalid_argument("expert_ffn_invariant: workspace of " + std::to_string(workspace_bytes) +
                                " bytes is below " + std::to_string(needed));
  }
  float* h = static_cast<float*>(workspace);
  int32_t* tiles = reinterpret_cast<int32_t*>(
      static_cast<char*>(workspace) + align_up(static_cast<size_t>(max_rows) * w.ffn * sizeof(float)));
  const EpilogueArgs up{w.b1, w.b3, w.swiglu_alpha, w.swiglu_limit};
  const EpilogueArgs down{w.b2, nullptr};
  auto first = [&](auto tag) {
    using W = decltype(tag);
    switch (w.activation) {
      case kernels::Activation::kGELU:
        launch_grouped<W, kGeluEpi>(w.w1, nullptr, w.num_experts, w.ffn, w.hidden, x_rows, expert_offsets,
                                    max_rows, h, tiles, stream, up);
        break;
      case kernels::Activation::kSwiGLU:
        launch_grouped<W, kSwiGLUEpi>(w.w1, w.w3, w.num_experts, w.ffn, w.hidden, x_rows, expert_offsets,
                                      max_rows, h, tiles, stream, up);
        break;
      case kernels::Activation::kClampedSwiGLU:
        launch_grouped<W, kClampedEpi>(w.w1, w.w3, w.num_experts, w.ffn, w.hidden, x_rows, expert_offsets,
                                       max_rows, h, tiles, stream, up);
        break;
    }
    launch_grouped<W, kPlain>(w.w2, nullptr, w.num_experts, w.hidden, w.ffn, h, expert_offsets, max_rows,
                              y_rows, tiles, stream, down);
  };
  if (w.type == kernels::DType::kF32) {
    first(float{});
  } else {
    first(__nv_bfloat16{});
  }
}

void fill_uniform(kernels::DType type, void* data, size_t count, uint64_t seed, float scale,
                  cudaStream_t stream) {
  if (count == 0) return;
  fill_kernel<<<grid_for(count), 256, 0, stream>>>(type == kernels::DType::kBF16, data, count, seed, scale);
  CUDA_CHECK(cudaGetLastError());
}

void cast_to_bf16(const float* in, size_t count, void* out_bf16, cudaStream_t stream) {
  if (count == 0) return;
  cast_bf16_kernel<<<grid_for(count), 256, 0, stream>>>(in, count, static_cast<__nv_bfloat16*>(out_bf16));
  CUDA_CHECK(cudaGetLastError());
}

void swiglu_rows(const float* gate, const float* up, int ffn, const int32_t* expert_offsets, int num_experts,
                 int max_rows, float* out_f32, void* out_bf16, cudaStream_t stream) {
  const size_t count = static_cast<size_t>(max_rows) * ffn;
  if (count == 0) return;
  swiglu_kernel<<<grid_for(count), 256, 0, stream>>>(gate, up, ffn, expert_offsets, num_experts, out_f32,
                                                     static_cast<__nv_bfloat16*>(out_bf16));
  CUDA_CHECK(cudaGetLastError());
}

void clamped_swiglu_rows(const float* gate, const float* up, int ffn, const int32_t* expert_offsets,
                         int num_experts, int max_rows, float alpha, float limit, float* out_f32,
                         void* out_bf16, cudaStream_t stream) {
  const size_t count = static_cast<size_t>(max_rows) * ffn;
  if (count == 0) return;
  clamped_swiglu_kernel<<<grid_for(count), 256, 0, stream>>>(gate, up, ffn, expert_offsets, num_experts,
                                                             alpha, limit, out_f32,
                                                             static_cast<__nv_bfloat16*>(out_bf16));
  CUDA_CHECK(cudaGetLastError());
}

void gelu_rows(const float* up, int ffn, const int32_t* expert_offsets, int num_experts, int max_rows,
               float* out_f32, void* out_bf16, cudaStream_t stream) {
  const size_t count = static_cast<size_t>(max_rows) * ffn;
  if (count == 0) return;
  gelu_kernel<<<grid_for(count), 256, 0, stream>>>(up, ffn, expert_offsets, num_experts, out_f32,
                                                   static_cast<__nv_bfloat16*>(out_bf16));
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace moe::cuda

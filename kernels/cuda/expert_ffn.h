// The expert half of the MoE layer on the GPU: gather rows per expert from a plan, SwiGLU expert FFN in two
// kinds (invariant: fixed tiles, fixed reduction order; fast: cuBLAS), combine in fixed j order.
//
// Rows grouped by expert: row r of a grouped buffer belongs to expert e when expert_offsets[e] <= r <
// expert_offsets[e + 1] (the plan's offsets, read on the device); max_rows (>= expert_offsets[E], usually
// num_tokens * top_k) only sizes launches and buffers. All pointers are device memory; every launcher is
// asynchronous on its stream and allocates nothing, except where a comment says otherwise.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/tensor.h"

namespace moe::cuda {

// The activation is kernels/tensor.h's, computed as kernels/cpu/activations.h defines it (the GPU uses CUDA's
// expf where the CPU uses its own polynomial exp, so the two agree to a few ulp, not bitwise).
// E experts, HuggingFace [out, in] layout, contiguous per expert:
//   w1 (gate; GELU: up) [E][ffn][hidden], w3 (up; GELU: unused) [E][ffn][hidden], w2 (down) [E][hidden][ffn]
// Elements are float (kF32) or bfloat16 (kBF16) bits (kF16 is not accepted); accumulation is always fp32.
// Optional fp32 biases (gpt-oss; null: none), contiguous per expert: b1 (after w1) and b3 (after w3)
// [E][ffn], b2 (after w2) [E][hidden], each added to its GEMM's fp32 accumulator before the activation
// (b1, b3) or as the output (b2). kClampedSwiGLU applies kernels/activation_rules.h's element rule with
// swiglu_alpha and swiglu_limit (the CPU's definition, with CUDA's expf).
struct ExpertWeightsView {
  kernels::DType type = kernels::DType::kF32;
  int num_experts = 0;
  int hidden = 0;
  int ffn = 0;
  const void* w1 = nullptr;
  const void* w3 = nullptr;
  const void* w2 = nullptr;
  kernels::Activation activation = kernels::Activation::kSwiGLU;
  const float* b1 = nullptr;
  const float* b3 = nullptr;
  const float* b2 = nullptr;
  float swiglu_alpha = 1.702f;
  float swiglu_limit = 7.0f;
};

// x_rows[r] = x[slot_pairs[r] / top_k] for r < expert_offsets[E] (slot_pairs and offsets from the plan);
// with pair_weight (Llama 4: the routing weight on the expert's input) x_rows[r] = pair_weight[p] * x[t],
// p = slot_pairs[r], in fp32 (the CPU's scale_row).
void gather_rows(const float* x, int hidden, const int32_t* slot_pairs, const int32_t* expert_offsets,
                 int num_experts, int top_k, int max_rows, float* x_rows, cudaStream_t stream,
                 const float* pair_weight = nullptr);

// logits[t][e] += bias[e] for num_tokens rows of num_experts (gpt-oss's router bias), fp32.
void add_row_bias(float* logits, int num_tokens, int num_experts, const float* bias, cudaStream_t stream);

// y[t] = sum over j = 0..top_k-1 in that order of pair_weight[p] * y_rows[expert_offsets[e] + pair_slot[p]],
// p = t * top_k + j, e = pair_expert[p]; dropped pairs (expert -1) add nothing. fmaf per term, no atomics:
// each y[t] depends only on its own pairs. pair_weight null: weight 1 (the weights were applied to the
// expert inputs, gather_rows).
void combine_rows(const float* y_rows, int hidden, const int32_t* pair_expert, const int32_t* pair_slot,
                  const float* pair_weight, const int32_t* expert_offsets, int num_tokens, int top_k,
                  float* y, cudaStream_t stream);

// combine_rows, then the shared expert: y[t] = fmaf(s(t), shared[t], routed sum), s(t) =
// 1 / (1 + expf(-shared_gate_logit[t])) (Qwen2-MoE's sigmoid gate) or 1 when shared_gate_logit is null
// (DeepSeek-V3). shared [num_tokens, hidden]; shared == nullptr is combine_rows.
void combine_rows_with_shared(const float* y_rows, int hidden, const int32_t* pair_expert,
                              const int32_t* pair_slot, const float* pair_weight,
                              const int32_t* expert_offsets, int num_tokens, int top_k, const float* shared,
                              const float* shared_gate_logit, float* y, cudaStream_t stream);

// offsets[0] = 0, offsets[1] = num_rows: the expert offsets of one group holding every row, so the grouped
// launchers below serve a plain (dense) layer, e.g. the router gate or a shared expert. Asynchronous.
void single_group_offsets(int32_t* offsets, int num_rows, cudaStream_t stream);

// ---- invariant kind ---------------------------------------------------------------------------------------
// NOTES: one fixed tile shape (64 x 64 x 16) and one code path for every row count; no split-K, no atomics.
// Each output element is accumulated by one thread as fmaf(x[k], w[k], acc) for k = 0, 1, ..., K-1 in that
// order, so its bits depend only on its own input row and the weights, not on how many rows the expert has,
// where the row sits in the buffer, or what else is in the batch.

// Grouped linear: out[r] = W_e @ x_rows[r] for the expert e of row r; W [E][n][k] of `type`, out [max_rows,
// n]. `tile_table` is device int32 [num_experts + 1] scratch.
void grouped_linear_invariant(kernels::DType type, const void* w, int num_experts, int n, int k,
                              const float* x_rows, const int32_t* expert_offsets, int max_rows, float* out,
                              int32_t* tile_table, cudaStream_t stream);

// Bytes of workspace expert_ffn_invariant needs (the [max_rows, ffn] activation and the tile table).
size_t expert_ffn_invariant_workspace_bytes(int num_experts, int max_rows, int ffn);

// y_rows[r] = expert FFN of x_rows[r] (the activation fused into the first GEMM's epilogue). x_rows
// [max_rows, hidden], y_rows [max_rows, hidden]. Throws std::invalid_argument for a short workspace.
void expert_ffn_invariant(const ExpertWeightsView& weights, const float* x_rows,
                          const int32_t* expert_offsets, int max_rows, float* y_rows, void* workspace,
                          size_t workspace_bytes, cudaStream_t stream);

// Fills count elements of `type` with uniform values in [-scale, scale), a pure function of (seed, index):
// for benchmarks and tests that need large weights without a host copy.
void fill_uniform(kernels::DType type, void* data, size_t count, uint64_t seed, float scale,
                  cudaStream_t stream);

// ---- fast kind --------------------------------------------------------------------------------------------
// Element-wise helpers of the fast path.
void cast_to_bf16(const float* in, size_t count, void* out_bf16, cudaStream_t stream);
// h[i] = silu(gate[i]) * up[i] for i < expert_offsets[E] * ffn; written as float (out_f32) or bfloat16 bits.
// out_f32 may be gate or up (in place, element by element); out_bf16 must not overlap the inputs.
void swiglu_rows(const float* gate, const float* up, int ffn, const int32_t* expert_offsets, int num_experts,
                 int max_rows, float* out_f32, void* out_bf16, cudaStream_t stream);
// h[i] = clamped SwiGLU (kernels/activation_rules.h) of gate[i] and up[i], as swiglu_rows.
void clamped_swiglu_rows(const float* gate, const float* up, int ffn, const int32_t* expert_offsets,
                         int num_experts, int max_rows, float alpha, float limit, float* out_f32,
                         void* out_bf16, cudaStream_t stream);
// rows[r][c] += bias[c] for r in [first_row, first_row + num_rows), c < cols (one expert's slice).
void add_bias_rows(float* rows, int first_row, int num_rows, int cols, const float* bias,
                   cudaStream_t stream);
// h[i] = gelu(up[i]) for i < expert_offsets[E] * ffn, as swiglu_rows (out_f32 may be up).
void gelu_rows(const float* up, int ffn, const int32_t* expert_offsets, int num_experts, int max_rows,
               float* out_f32, void* out_bf16, cudaStream_t stream);

// cuBLAS expert FFN: per expert, three cublasGemmEx calls (gate, up, down; GELU: two) with fp32
// accumulation, and an activation kernel between them. With bf16 weights the activations are rounded to bf16
// for the tensor cores. NOTES: cuBLAS picks its algorithm by shape, so results may change with the number of
// rows: this is the `fast` kind, never used where batch invariance is promised. forward() copies
// expert_offsets to the host and synchronises the stream once (per-expert GEMM shapes live on the host); it
// is not graph-capturable. enqueue() is the same computation when the caller already holds the offsets on the
// host (a benchmark, an engine that planned on the host): no copy, no synchronisation, capturable.
class CublasExpertFfn {
 public:
  // Allocates its buffers and cuBLAS handle (setup, not per forward). Throws std::runtime_error on CUDA
  // errors.
  CublasExpertFfn(const ExpertWeightsView& weights, int max_rows);
  ~CublasExpertFfn();
  CublasExpertFfn(const CublasExpertFfn&) = delete;
  CublasExpertFfn& operator=(const CublasExpertFfn&) = delete;

  void forward(const float* x_rows, const int32_t* expert_offsets, float* y_rows, cudaStream_t stream);
  // forward() with host_offsets (E + 1 values, equal to the device's expert_offsets; total <= max_rows)
  // already on the host: everything is enqueued on `stream`, nothing waits. std::invalid_argument for offsets
  // that do not fit max_rows or are not non-decreasing from 0.
  void enqueue(const float* x_rows, const int32_t* expert_offsets, const int32_t* host_offsets, float* y_rows,
               cudaStream_t stream);

 private:
  void gemm(const void* w, int n, int k, const void* x, int rows, float* out);

  ExpertWeightsView weights_;
  int max_rows_;
  cublasHandle_t handle_ = nullptr;
  float* gate_ = nullptr;  // [max_rows, ffn]
  float* up_ = nullptr;    // [max_rows, ffn]; also h in fp32 mode
  void* x_bf16_ = nullptr;
  void* h_bf16_ = nullptr;
  int32_t* host_offsets_ = nullptr;  // pinned [E + 1]
};

}  // namespace moe::cuda

// The library fast path for bf16 compute (KernelKind::kFast): oneDNN's bf16 matmul (Debian libdnnl-dev 2.6,
// library moe_kernels_cpu_onednn, built when oneDNN is found; MOE_HAVE_ONEDNN is then defined for its users).
//
// Computes the same function as the invariant bf16 linear - y = xb @ W^T, x rounded to bf16 with
// f32_to_bf16 (the caller's round_rows_to_bf16), bf16 weights, fp32 accumulation - with oneDNN's blocking,
// so a row's bits may depend on the number of rows (and on the ISA oneDNN dispatches: on CPUs with AMX it
// uses AMX tiles; DNNL_MAX_CPU_ISA=AVX512_CORE_BF16 caps it at vdpbf16ps).
//
// Weights: the outputs are cut into `slices` column blocks (multiples of 64, as even as possible), each
// reordered once, at construction, into the blocked layout oneDNN's matmul prefers for it. forward()
// runs slice s on thread s of the pool (one oneDNN thread each: the pool, not OpenMP, owns the cores), so
// `slices` should be the pool's thread count; fewer threads run several slices each, in order.
// Primitives: one per (slice, rows), created on the first call with that row count (~0.3-1.5 ms; oneDNN's
// JIT) and cached in the object for its lifetime; later calls with that row count make no allocation in
// this wrapper (oneDNN manages its own scratchpad).
// Thread safety: forward() may be called from several threads at once (the cache is locked).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cpu/bf16_linear_op.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"

namespace moe::kernels {

class OnednnBf16Linear final : public Bf16LinearOp {
 public:
  // w: fp32 (rounded with f32_to_bf16) or bf16, validated like linear()'s weights; slices >= 1.
  // Throws std::invalid_argument, or std::runtime_error if oneDNN fails.
  OnednnBf16Linear(const MatrixView& w, int slices);
  ~OnednnBf16Linear() override;

  KernelKind kind() const override { return KernelKind::kFast; }
  int64_t out() const override { return out_; }
  int64_t in() const override { return in_; }
  size_t weight_bytes() const override;
  void forward_rounded(const uint16_t* xb, int64_t rows, float* y, int64_t y_stride,
                       ThreadPool& pool) const override;
  // The oneDNN implementation a call with `rows` rows runs (e.g. "brg:avx512_core_bf16"), for reports.
  std::string implementation(int64_t rows) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t out_ = 0, in_ = 0;
};

// A Bf16LinearMaker for PackedFfnBf16: oneDNN ops with `slices` column slices.
Bf16LinearMaker onednn_bf16_linear_maker(int slices);

}  // namespace moe::kernels

// A layer's expert FFNs in its compute precision: the one definition of "run expert e on these rows" that
// MoELayer and ExpertParallelLayer share (MoELayerConfig::compute, expert_kernel and activation).
//
//   compute fp32   kernels::ffn_forward(expert_kernel) on the weights as stored (views, no copy)
//   compute bf16   kernels::ffn_bf16_forward on weights prepared once, at construction:
//                    invariant kind  the own vdpbf16ps kernel on packed bf16 panels (batch-invariant bits;
//                                    kernels/cpu/linear_bf16.h; the scalar emulation on CPUs without it)
//                    fast kind       oneDNN's bf16 matmul with one column slice per pool thread
//                                    (kernels/cpu/linear_onednn.h), or, in builds without oneDNN, Eigen's
//                                    fp32 GEMM on the bf16 values widened to fp32 (the same function)
//                  Prepared bf16 weights cost 2 bytes per element (padded to 64-output panels) on top of the
//                  stored weights, for the experts this object serves only.
//   quantized      an FFN with a quantized matrix (Q8_0, Q4_K, Q6_K, MXFP4, FP8: kernels/quant_formats.h)
//   runs storage        kernels::ffn_quant_forward on the weights as stored, whatever `compute` says: each
//   GEMM's
//                  input quantized per row by its weight type's rule (int8 blocks; bf16 for FP8), integer
//                  dots inside blocks, one fixed fp32 chain per output (kernels/cpu/linear_quant.h:
//                  batch-invariant bits in both kinds). Where the process runs a SIMD kernel the served
//                  experts' matrices are repacked once into its panels (the same bytes as stored, give or
//                  take the scales' layout).
// Gates are not here: the router gate and the shared-expert gate stay fp32 in every precision.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/expert_ffn.h"
#include "kernels/cpu/expert_ffn_bf16.h"
#include "kernels/cpu/expert_ffn_quant.h"
#include "kernels/cpu/thread_pool.h"
#include "moe/io/layer_weights.h"
#include "moe/layer/moe_layer_config.h"

namespace moe {

class ExpertFfns {
 public:
  // Serves the routed experts listed in `experts` (every expert for a single-process layer, a rank's own
  // under expert parallelism) and the shared expert when the weights have one. `config` is fitted to
  // `weights`. Throws std::invalid_argument for weights that do not fit the activation, or std::runtime_error
  // if the library of the fast bf16 kind fails.
  ExpertFfns(const MoELayerConfig& config, const io::LayerWeights& weights, std::span<const int> experts);
  ~ExpertFfns();
  ExpertFfns(const ExpertFfns&) = delete;
  ExpertFfns& operator=(const ExpertFfns&) = delete;

  bool has_shared() const { return has_shared_; }
  // When the weights point into a mapped checkpoint (LayerWeights::zero_copy): hints the OS that the mapped
  // blocks the quantized panels were copied from are not read again (io::release_pages), so a quantized layer
  // holds its bytes once, not twice, in its RSS. Their contents stay: hashing them later (a fingerprint)
  // faults them back in as reclaimable page cache. A layer calls it once it has hashed its weights.
  void release_mapped_sources() const;
  // Floats of scratch that run_expert (run_shared) needs for `rows` rows.
  size_t expert_scratch_floats(int64_t rows) const;
  size_t shared_scratch_floats(int64_t rows) const;

  // y = FFN_e(x) for `rows` contiguous rows of length hidden (x and y: [rows, hidden], not overlapping;
  // scratch: expert_scratch_floats(rows), clobbered). e must be one of the served experts. Runs on `pool`
  // (inline when called from one of its tasks); no allocation.
  void run_expert(int e, const float* x, int64_t rows, float* y, float* scratch,
                  kernels::ThreadPool& pool) const;
  // The same with the shared expert (requires has_shared()).
  void run_shared(const float* x, int64_t rows, float* y, float* scratch, kernels::ThreadPool& pool) const;

  // bf16 compute only (takes_rounded()): the same from rows already rounded to bf16
  // (kernels::round_rows_to_bf16's layout: rows of rounded_row_elems() elements, contiguous), with the bits
  // of run_expert / run_shared on the fp32 rows that round to them. A layer rounds each token once and
  // gathers the bf16 rows (half the bytes) instead of rounding a row again in each of its k experts.
  bool takes_rounded() const { return compute_ == kernels::ComputePrecision::kBF16 && !quantized_; }
  // Whether the routed experts run the quantized kernels.
  bool quantized() const { return quantized_; }
  int64_t rounded_row_elems() const { return 2 * kernels::bf16_pairs(hidden_); }
  void run_expert_rounded(int e, const uint16_t* xb, int64_t rows, float* y, float* scratch,
                          kernels::ThreadPool& pool) const;
  void run_shared_rounded(const uint16_t* xb, int64_t rows, float* y, float* scratch,
                          kernels::ThreadPool& pool) const;

 private:
  const kernels::PackedFfnBf16& packed_expert(int e) const;
  void run(const kernels::FfnWeights& w, const kernels::PackedFfnBf16* packed,
           const kernels::PackedFfnQuant* quant, const float* x, int64_t rows, float* y, float* scratch,
           kernels::ThreadPool& pool) const;

  kernels::ComputePrecision compute_;
  kernels::KernelKind kind_;
  kernels::Activation act_;
  int64_t hidden_ = 0, expert_ff_ = 0, shared_ff_ = 0;
  bool has_shared_ = false;
  std::vector<kernels::FfnWeights> experts_;  // every expert's views (fp32 compute reads them)
  kernels::FfnWeights shared_{};
  // bf16 compute: the prepared weights of the served experts (null for the others) and of the shared one.
  std::vector<std::unique_ptr<kernels::PackedFfnBf16>> packed_;
  std::unique_ptr<kernels::PackedFfnBf16> packed_shared_;
  // Quantized storage: the prepared weights of the served quantized experts (null for the others) and of a
  // quantized shared expert; the largest scratch any of them needs per row count is computed from them.
  bool quantized_ = false;
  std::vector<std::unique_ptr<kernels::PackedFfnQuant>> quant_;
  std::unique_ptr<kernels::PackedFfnQuant> quant_shared_;
  bool sources_mapped_ = false;  // the weights are a mapped checkpoint's (release_mapped_sources)
};

}  // namespace moe

// The batch-invariant linear on quantized weights: y = x @ W^T for W a quantized MatrixView (kernels/
// quant_formats.h: Q8_0, Q4_K, Q6_K, MXFP4 blocks, FP8 with 2-D block scales), computed from the weights as
// stored: integer dot products inside blocks, the block partial sums combined in one fixed order.
//
// Contract (every y[r][o], whatever the number of rows, the row's place, strides, alignment, thread count or
// implementation): an input row is first quantized by its weight type's activation rule, which reads that
// row alone (never another row, never a batch statistic):
//   int8 rules, block n = 32 (Q8_0, MXFP4) or n = 256 (Q4_K, Q6_K): for each n-element block of the row,
//     amax = max_i |x_i|; amax == 0: dx = 0, q_i = 0; a non-finite element in the block (Inf, NaN): dx = NaN,
//     q_i = 0; otherwise dx = amax / 127 and inv = 127 / amax (fp32 divisions, round to nearest even), q_i =
//     nearbyint(x_i * inv) (the fp32 product rounded to nearest even, then to the nearest integer, ties to
//     even: |q_i| <= 127). B_g = the sum of q over each 16-element group g (exact).
//   bf16 rule (FP8): xb = f32_to_bf16(x) (round to nearest even), a zero appended to an odd row.
// Then, with acc = +0 and every step an fp32 operation rounded to nearest even (fma: one rounding; no flush
// of subnormals), over the row's blocks in ascending order:
//   Q8_0  block b: I = sum_i qs_i q_i (exact int32); s = f16(d) * dx_b; acc = fma(float(I), s, acc)
//   MXFP4 block b: I = sum_i v_i q_i (v = kMxfp4Values: twice the e2m1 value); s = 2^(e - 128) * dx_b;
//         acc = fma(float(I), s, acc)
//   Q4_K  super-block s, sub-blocks j < 8 (32 elements, 6-bit sc_j, m_j): I_j = sum_i q4_i q_i,
//         A = sum_j sc_j I_j, M = sum_j m_j (B_2j + B_2j+1) (exact int32);
//         acc = fma(float(A), f16(d) * dx_s, acc);  acc = fma(float(-M), f16(dmin) * dx_s, acc)
//   Q6_K  super-block s, sub-blocks j < 16 (16 elements, int8 sc_j): I_j = sum_i c_i q_i with the signed
//         6-bit codes c in [-32, 31], A = sum_j sc_j I_j (exact int32); acc = fma(float(A), f16(d) * dx_s,
//         acc)
//   FP8   scale block c (scale_block_cols elements, even): P = +0, then for each pair p of the block
//         P = dpbf16(P, xb[2p], xb[2p+1], w[2p], w[2p+1]) (one lane of vdpbf16ps, kernels/cpu/dpbf16.h; w the
//         e4m3 values, exact in bf16); acc = fma(P, scale(o, c), acc)
//   y[r][o] = acc.
// float(n) of an int32 rounds to nearest even (exact below 2^24: every I and M; a Q4_K A can reach 3e7).
// Integer sums are exact in any order, so only the fp32 chain fixes the bits: every implementation runs this
// chain, one per output, in this order.
//
// Accuracy (tests/kernels_cpu_quant_accuracy_test.cc), against float64 on the dequantized weights w:
//   with the activation rule (x replaced by its quantized values q_i dx), each chain step's product and sum
//   round once: |y - ref_q| <= gamma(2 K + 1) sum_k |terms| for K scale steps, gamma(n) = n u / (1 - n u),
//   u = 2^-24 (plus s's own rounding: one more u per term);
//   without it (the fp32 x), quantizing x adds at most dx / 2 per element: |y - ref| <= |y - ref_q| +
//   sum_i |w_i| dx_(block of i) / 2 (int8 rules), or 2^-9 sum_i |w_i x_i| (bf16 rule).
// The tests assert both bounds and print the measured errors.
//
// Implementations (QuantKernel below): the portable scalar emulation (this file's reference, any CPU), and
// the SIMD kernels (kernels/cpu/linear_quant_*.cc) on weights repacked once into panels of 16 outputs
// (kernels/cpu/linear_quant_pack.h). All of them give the same bits: the integer parts are exact whatever
// the instruction (vpdpbusd, scalar) or grouping, and each then runs the fp32 chain above with the same
// operations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"

namespace moe::kernels {

// The activation rule of a quantized weight type.
enum class QuantRule : uint8_t { kInt8Block32, kInt8Block256, kBf16 };
QuantRule quant_rule(DType weights);  // std::invalid_argument for a plain type
const char* to_string(QuantRule r);

// Where the parts of one quantized input row of length `in` lie (bytes from the row's start); rows of a
// batch are `stride` bytes apart (a multiple of 64). int8 rules: q (in int8), dx (in / n fp32), bsum (in / 16
// int16); bf16 rule: xb (2 * pairs(in) bf16 bits) at 0.
struct QuantRowLayout {
  size_t q = 0, dx = 0, bsum = 0, stride = 0;
};
QuantRowLayout quant_row_layout(QuantRule rule, int64_t in);

// Quantizes `rows` rows of x (row r at x + r * x_stride, in elements) by `rule` into `out` (rows x
// quant_row_layout(rule, in).stride bytes, 64-byte aligned). `in` must be a multiple of the rule's block
// (int8 rules). Rows are split over `pool` when there are many. The scalar emulation
// (quantize_rows_portable) gives the same bytes.
void quantize_rows(QuantRule rule, const float* x, int64_t rows, int64_t x_stride, int64_t in, std::byte* out,
                   ThreadPool& pool);
void quantize_rows_portable(QuantRule rule, const float* x, int64_t rows, int64_t x_stride, int64_t in,
                            std::byte* out);

// The implementations; all give the same bits (tested), they differ in speed:
//   kPortable   the scalar emulation of the contract on the stored blocks (any CPU)
//   kAvx512     AVX-512 (F/BW/VL/DQ) with VNNI vpdpbusd / vpdpwssd on packed panels of 16 outputs
//               (kernels/cpu/linear_quant_simd.h); FP8 with vpermi2b and vdpbf16ps where the CPU also has
//               AVX512_VBMI and AVX512_BF16, else by the emulation
//   kAvxVnni    the same kernels on 256-bit AVX-VNNI (CPUs with AVX-VNNI and no AVX-512); FP8 by the
//               emulation
// Every integer product and sum is exact in any order and grouping, and each kernel runs the fp32 chain above
// per output, blocks ascending, with the same operations (the SIMD fma is IEEE fused multiply-add under the
// default MXCSR, as std::fma; vdpbf16ps is dpbf16's definition), so all give the emulation's bits: tested on
// random blocks of every code and on extreme rows (kernels_cpu_quant_invariance_test).
enum class QuantKernel : uint8_t { kPortable, kAvx512, kAvxVnni };
const char* to_string(QuantKernel k);
bool quant_kernel_available(QuantKernel k);
// Whether kernel k (available) runs code of its own for weights of type t, rather than the emulation.
bool quant_kernel_covers(QuantKernel k, DType t);
// The implementation QuantLinear runs, chosen once per process: MOE_QUANT_KERNEL=portable|avx512|avxvnni
// forces one (if this CPU has it); otherwise AVX-512 VNNI where available, then AVX-VNNI, then the portable
// emulation.
QuantKernel quant_kernel();

// A quantized weight matrix prepared once (validated: every FP8 code and e8m0 scale checked, NaN refused by
// name; repacked into the SIMD kernels' panels when the process runs one), and the linear y = x @ W^T on it.
// Immutable after construction; safe to share between threads.
class QuantLinear {
 public:
  // Throws std::invalid_argument naming `what` for a view that is not a valid quantized matrix or holds a
  // NaN code or scale.
  QuantLinear(const MatrixView& w, const std::string& what);
  ~QuantLinear();
  QuantLinear(const QuantLinear&) = delete;
  QuantLinear& operator=(const QuantLinear&) = delete;

  int64_t out() const { return w_.rows; }
  int64_t in() const { return w_.cols; }
  DType type() const { return w_.dtype; }
  QuantRule rule() const { return quant_rule(w_.dtype); }
  // Bytes the kernel streams for one row (the packed panels, or the stored blocks for the emulation).
  size_t weight_bytes() const;

  // Bytes of input workspace forward() needs for `rows` rows (quant_row_layout(rule, in).stride * rows + 64).
  size_t workspace_bytes(int64_t rows) const;

  // y = x @ W^T by the contract. x: rows x in fp32 (row r at x + r * x_stride); y: rows x out fp32 (row r at
  // y + r * y_stride), overwritten; must not overlap x. workspace: workspace_bytes(rows) bytes, or null for a
  // buffer of the calling thread (grown to the largest call, then reused). Runs on `pool`; no allocation
  // after warm-up. std::invalid_argument for negative rows, short strides, null pointers with nonzero sizes.
  void forward(const float* x, int64_t rows, int64_t x_stride, float* y, int64_t y_stride,
               std::byte* workspace, ThreadPool& pool) const;
  // The same from rows already quantized by rule() (quantize_rows' layout).
  void forward_quantized(const std::byte* xq, int64_t rows, float* y, int64_t y_stride,
                         ThreadPool& pool) const;
  // The same with a given implementation (tests and benchmarks); std::invalid_argument if unavailable.
  void forward_quantized_with(QuantKernel k, const std::byte* xq, int64_t rows, float* y, int64_t y_stride,
                              ThreadPool& pool) const;
  // Outputs are computed in panels of 16 (the last one partial); forward_quantized splits whole panels over
  // its pool's threads. This runs panels [j_begin, j_end) (outputs [16 j_begin, min(out, 16 j_end)), their
  // columns of y) on the calling thread, with the same bits: for callers that split the work themselves.
  // std::invalid_argument for a range outside [0, panels()) and as forward_quantized.
  int64_t panels() const { return (out() + 15) / 16; }
  void forward_quantized_panels(const std::byte* xq, int64_t rows, int64_t j_begin, int64_t j_end, float* y,
                                int64_t y_stride) const;

  const MatrixView& view() const { return w_; }

  struct Packed;  // the SIMD kernels' panels (linear_quant_pack.h)

 private:
  void run_panels(QuantKernel k, const Packed* packed, const std::byte* xq, int64_t rows, int64_t j0,
                  int64_t j1, float* y, int64_t y_stride) const;

  MatrixView w_;
  std::unique_ptr<Packed> packed_;
};

// The oracle: float64 on the exactly dequantized weights (kernels::reference_row), i ascending. With
// `quantize_input`, x is first replaced by its quantized values (q_i dx, or bf16(x)) under the weights' rule:
// the kernel's operands exactly, so only the fp32 chain's roundings separate them. x contiguous [rows, in],
// y contiguous [rows, out]. If `scale` is not null it receives sum_i |x'_i w_i| per output (x' the input
// used).
void linear_quant_reference_f64(const float* x, int64_t rows, const MatrixView& w, bool quantize_input,
                                double* y, double* scale = nullptr);

}  // namespace moe::kernels

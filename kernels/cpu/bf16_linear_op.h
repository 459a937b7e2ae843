// A bf16-compute linear whose weights were prepared once at load time, behind one interface so that the FFN
// (and later the layer) runs either kind:
//   KernelKind::kInvariant  the own vdpbf16ps kernel on PackedBf16Weights (linear_bf16.h: one fixed chain
//                           per output, batch-invariant bits)
//   KernelKind::kFast       a library GEMM (oneDNN's bf16 matmul, linear_onednn.h; its blocking, and so a
//                           row's bits, may depend on the number of rows)
// Both compute y = xb @ W^T from an input already rounded to bf16 (round_rows_to_bf16's layout: row r at
// xb + r * 2 * pairs(in)) with bf16 weights and fp32 accumulation; they differ only in the order of the
// fp32 additions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"

namespace moe::kernels {

class Bf16LinearOp {
 public:
  virtual ~Bf16LinearOp() = default;
  virtual KernelKind kind() const = 0;
  virtual int64_t out() const = 0;
  virtual int64_t in() const = 0;
  // Bytes of prepared weights (what a one-row product streams).
  virtual size_t weight_bytes() const = 0;
  // y = xb @ W^T for `rows` rows; y row r at y + r * y_stride (y_stride >= out), overwritten. Runs on
  // `pool`; safe to call from several threads at once on different pools.
  virtual void forward_rounded(const uint16_t* xb, int64_t rows, float* y, int64_t y_stride,
                               ThreadPool& pool) const = 0;
  // Panels of kBf16PanelOutputs outputs that forward_rounded_panels can run one range at a time, or 0 when
  // the op runs only whole products (the fast kinds: a library GEMM).
  virtual int64_t panels() const { return 0; }
  // Outputs [64 j0, min(out, 64 j1)) of every row (y row r at y + r * y_stride, as forward_rounded
  // writes them, the same bits) on the calling thread, 0 <= j0 <= j1 <= panels(). Lets an FFN run the
  // gate and up products of one range of panels and their activation in one task. Throws
  // std::invalid_argument for a bad range (every range is bad when panels() is 0).
  virtual void forward_rounded_panels(const uint16_t* xb, int64_t rows, int64_t j0, int64_t j1, float* y,
                                      int64_t y_stride) const;
};

// Builds the op for one weight matrix (fp32 weights are rounded to bf16, RNE).
using Bf16LinearMaker = std::function<std::unique_ptr<Bf16LinearOp>(const MatrixView& w)>;

// The invariant kind: linear_bf16_rounded on PackedBf16Weights.
class InvariantBf16Linear final : public Bf16LinearOp {
 public:
  explicit InvariantBf16Linear(const MatrixView& w) : packed_(w) {}
  KernelKind kind() const override { return KernelKind::kInvariant; }
  int64_t out() const override { return packed_.out(); }
  int64_t in() const override { return packed_.in(); }
  size_t weight_bytes() const override { return packed_.bytes(); }
  void forward_rounded(const uint16_t* xb, int64_t rows, float* y, int64_t y_stride,
                       ThreadPool& pool) const override;
  int64_t panels() const override { return packed_.panels(); }
  void forward_rounded_panels(const uint16_t* xb, int64_t rows, int64_t j0, int64_t j1, float* y,
                              int64_t y_stride) const override;
  const PackedBf16Weights& packed() const { return packed_; }

 private:
  PackedBf16Weights packed_;
};

inline std::unique_ptr<Bf16LinearOp> make_invariant_bf16_linear(const MatrixView& w) {
  return std::make_unique<InvariantBf16Linear>(w);
}

// The fast kind without oneDNN: W rounded to bf16 and widened back to fp32 once (exact), xb widened to fp32
// per call (exact), then linear(kFast) - Eigen's fp32 GEMM. The products of two bf16 values are exact in
// fp32, so this computes the same function as the other kinds (fp32 accumulation in Eigen's order) at the
// fp32 GEMM's speed and twice the weight memory. Allocation: a per-thread fp32 input buffer, grown then
// reused.
std::unique_ptr<Bf16LinearOp> make_eigen_bf16_linear(const MatrixView& w);

}  // namespace moe::kernels

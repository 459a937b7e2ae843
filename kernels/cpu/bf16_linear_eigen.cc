// The fast bf16-compute linear of builds without oneDNN (bf16_linear_op.h: make_eigen_bf16_linear).
#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/bf16_linear_op.h"
#include "kernels/cpu/linear.h"

namespace moe::kernels {
namespace {

class EigenBf16Linear final : public Bf16LinearOp {
 public:
  explicit EigenBf16Linear(const MatrixView& w) : out_(w.rows), in_(w.cols) {
    validate_weights(w, "EigenBf16Linear: w");
    widened_.resize(static_cast<size_t>(out_ * in_));
    for (int64_t o = 0; o < out_; ++o) {
      for (int64_t i = 0; i < in_; ++i) {
        const int64_t at = o * w.row_stride + i;
        const uint16_t b = w.dtype == DType::kBF16 ? static_cast<const uint16_t*>(w.data)[at]
                                                   : f32_to_bf16(static_cast<const float*>(w.data)[at]);
        widened_[static_cast<size_t>(o * in_ + i)] = bf16_to_f32(b);
      }
    }
  }
  KernelKind kind() const override { return KernelKind::kFast; }
  int64_t out() const override { return out_; }
  int64_t in() const override { return in_; }
  size_t weight_bytes() const override { return widened_.size() * sizeof(float); }

  void forward_rounded(const uint16_t* xb, int64_t rows, float* y, int64_t y_stride,
                       ThreadPool& pool) const override {
    if (rows <= 0 || out_ == 0) return;
    const int64_t xs = 2 * bf16_pairs(in_);
    thread_local std::vector<float> x;
    if (x.size() < static_cast<size_t>(rows * in_)) x.resize(static_cast<size_t>(rows * in_));
    for (int64_t r = 0; r < rows; ++r) bf16_to_f32(xb + r * xs, x.data() + r * in_, static_cast<size_t>(in_));
    const MatrixView w{widened_.data(), DType::kF32, out_, in_, in_};
    linear(KernelKind::kFast, x.data(), rows, in_, w, y, y_stride, pool);
  }

 private:
  int64_t out_ = 0, in_ = 0;
  std::vector<float> widened_;
};

}  // namespace

std::unique_ptr<Bf16LinearOp> make_eigen_bf16_linear(const MatrixView& w) {
  return std::make_unique<EigenBf16Linear>(w);
}

}  // namespace moe::kernels

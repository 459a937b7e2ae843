#include "kernels/cpu/linear.h"

// clang-format off
#include "kernels/cpu/simd.h"  // before Eigen: see the note in simd.h
// clang-format on
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/linear_invariant.h"

namespace moe::kernels {
namespace {

std::string shape_str(int64_t r, int64_t c) {
  return "[" + std::to_string(r) + ", " + std::to_string(c) + "]";
}

void validate_linear(const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, const float* y,
                     int64_t y_stride) {
  validate_weights(w, "linear: w");
  if (rows < 0) throw std::invalid_argument("linear: rows (" + std::to_string(rows) + ") is negative");
  if (x_stride < w.cols) {
    throw std::invalid_argument("linear: x_stride (" + std::to_string(x_stride) + ") is less than in (" +
                                std::to_string(w.cols) + ")");
  }
  if (y_stride < w.rows) {
    throw std::invalid_argument("linear: y_stride (" + std::to_string(y_stride) + ") is less than out (" +
                                std::to_string(w.rows) + ")");
  }
  if (x == nullptr && rows > 0 && w.cols > 0) {
    throw std::invalid_argument("linear: x is null with shape " + shape_str(rows, w.cols));
  }
  if (y == nullptr && rows > 0 && w.rows > 0) {
    throw std::invalid_argument("linear: y is null with shape " + shape_str(rows, w.rows));
  }
}

// ---- kFast: Eigen ---------------------------------------------------------------------------------
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;
using MutMap = Eigen::Map<RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;

// Per-thread fp32 copy of a block of bf16 weight rows; grows to the largest block and is reused.
std::vector<float>& fast_scratch() {
  thread_local std::vector<float> buffer;
  return buffer;
}

void linear_fast(const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, float* y,
                 int64_t y_stride, ThreadPool& pool) {
  const int64_t in = w.cols, out = w.rows;
  const int num_threads =
      static_cast<int>(std::min<int64_t>(pool.num_threads(), std::max<int64_t>(out / 16, 1)));
  pool.parallel_for(num_threads, [&](int64_t task, int) {
    int64_t o_begin = 0, o_end = 0;
    ThreadPool::task_range(out, num_threads, static_cast<int>(task), &o_begin, &o_end);
    if (o_end <= o_begin) return;
    const ConstMap X(x, rows, in, Eigen::OuterStride<>(x_stride));
    MutMap Y(y, rows, out, Eigen::OuterStride<>(y_stride));
    if (w.dtype == DType::kF32) {
      const ConstMap W(static_cast<const float*>(w.data) + o_begin * w.row_stride, o_end - o_begin, in,
                       Eigen::OuterStride<>(w.row_stride));
      Y.middleCols(o_begin, o_end - o_begin).noalias() = X * W.transpose();
      return;
    }
    // bf16: widen a block of W rows into the per-thread buffer, then multiply. Small batches keep the
    // block in L2; large batches take the whole range at once so that Eigen packs x only once.
    const int64_t block = rows >= 64 ? (o_end - o_begin) : std::max<int64_t>(16, (256 << 10) / (4 * in));
    std::vector<float>& scratch = fast_scratch();
    const size_t need = static_cast<size_t>(std::min(block, o_end - o_begin) * in);
    if (scratch.size() < need) scratch.resize(need);
    const uint16_t* wb = static_cast<const uint16_t*>(w.data);
    for (int64_t o0 = o_begin; o0 < o_end; o0 += block) {
      const int64_t n = std::min(block, o_end - o0);
      for (int64_t o = 0; o < n; ++o) bf16_to_f32(wb + (o0 + o) * w.row_stride, scratch.data() + o * in, in);
      const ConstMap W(scratch.data(), n, in, Eigen::OuterStride<>(in));
      Y.middleCols(o0, n).noalias() = X * W.transpose();
    }
  });
}

}  // namespace

void validate_weights(const MatrixView& w, const char* what) {
  const std::string name(what);
  if (w.dtype != DType::kF32 && w.dtype != DType::kBF16) {
    throw std::invalid_argument(name + ": unsupported dtype " + std::string(to_string(w.dtype)) +
                                " (expected f32 or bf16)");
  }
  if (w.rows < 0 || w.cols < 0) {
    throw std::invalid_argument(name + ": negative shape " + shape_str(w.rows, w.cols));
  }
  if (w.row_stride < w.cols) {
    throw std::invalid_argument(name + ": row_stride (" + std::to_string(w.row_stride) +
                                ") is less than cols (" + std::to_string(w.cols) + ")");
  }
  if (w.data == nullptr && w.rows > 0 && w.cols > 0) {
    throw std::invalid_argument(name + ": data is null with shape " + shape_str(w.rows, w.cols));
  }
}

void linear(KernelKind kind, const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, float* y,
            int64_t y_stride, ThreadPool& pool) {
  validate_linear(x, rows, x_stride, w, y, y_stride);
  if (rows == 0 || w.rows == 0) return;
  if (w.cols == 0) {
    for (int64_t r = 0; r < rows; ++r) std::fill_n(y + r * y_stride, w.rows, 0.0f);
    return;
  }
  if (kind == KernelKind::kFast) {
    linear_fast(x, rows, x_stride, w, y, y_stride, pool);
  } else {
    detail::linear_invariant(x, rows, x_stride, w, y, y_stride, pool);
  }
}

void linear_invariant_portable(const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, float* y,
                               int64_t y_stride) {
  validate_linear(x, rows, x_stride, w, y, y_stride);
  if (rows == 0 || w.rows == 0) return;
  detail::linear_invariant_portable(x, rows, x_stride, w, y, y_stride);
}

bool linear_invariant_uses_avx512() {
  return detail::invariant_uses_avx512();
}

void linear_reference_f64(const float* x, int64_t rows, const MatrixView& w, double* y) {
  if (x == nullptr && rows > 0 && w.cols > 0) {
    throw std::invalid_argument("linear_reference_f64: x is null with shape " + shape_str(rows, w.cols));
  }
  validate_weights(w, "linear_reference_f64: w");
  if (rows < 0)
    throw std::invalid_argument("linear_reference_f64: rows (" + std::to_string(rows) + ") is negative");
  if (y == nullptr && rows > 0 && w.rows > 0) {
    throw std::invalid_argument("linear_reference_f64: y is null with shape " + shape_str(rows, w.rows));
  }
  const int64_t in = w.cols, out = w.rows;
  // Each y[r][o] is the sum over i = 0, 1, ... in order, one rounding per product and per add; the loops run
  // over outputs innermost (W transposed to double once), which keeps every output's order and lets the
  // independent sums of a row proceed together.
  std::vector<double> wt(static_cast<size_t>(in * out));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      wt[static_cast<size_t>(i * out + o)] =
          w.dtype == DType::kF32 ? static_cast<const float*>(w.data)[o * w.row_stride + i]
                                 : bf16_to_f32(static_cast<const uint16_t*>(w.data)[o * w.row_stride + i]);
    }
  }
  std::fill_n(y, rows * out, 0.0);
  constexpr int64_t kRowBlock = 16;  // rows that share each transposed weight row while it is in cache
  for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int64_t r1 = std::min(rows, r0 + kRowBlock);
    for (int64_t i = 0; i < in; ++i) {
      const double* wr = wt.data() + i * out;
      for (int64_t r = r0; r < r1; ++r) {
        const double xv = x[r * in + i];
        double* yr = y + r * out;
        for (int64_t o = 0; o < out; ++o) yr[o] += xv * wr[o];
      }
    }
  }
}

}  // namespace moe::kernels

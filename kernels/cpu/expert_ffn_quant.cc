#include "kernels/cpu/expert_ffn_quant.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cpu/linear.h"

namespace moe::kernels {
namespace {

size_t align64(size_t n) {
  return (n + 63) / 64 * 64;
}

// Byte offsets of the scratch parts from its first 64-byte boundary.
struct Layout {
  size_t h1, h3, xq, x3q, hq, total;
};

size_t input_bytes(const QuantLinear* q, int64_t rows) {
  return q ? align64(q->workspace_bytes(rows)) : 0;
}

Layout layout(const PackedFfnQuant& w, int64_t rows) {
  const size_t h = align64(static_cast<size_t>(rows * w.ff) * sizeof(float));
  Layout l{};
  l.h1 = 0;
  l.h3 = h;
  l.xq = 2 * h;
  // x is quantized once for W1 and W3 when their rules agree; otherwise W3 gets its own.
  const bool shared_x = w.w1 && w.w3 && w.w1->rule() == w.w3->rule();
  l.x3q = l.xq + input_bytes(w.w1.get(), rows);
  l.hq = l.x3q + (shared_x ? 0 : input_bytes(w.w3.get(), rows));
  l.total = l.hq + input_bytes(w.w2.get(), rows) + 64;
  return l;
}

std::byte* aligned(float* scratch) {
  auto* p = reinterpret_cast<std::byte*>(scratch);
  while (reinterpret_cast<uintptr_t>(p) % 64 != 0) ++p;
  return p;
}

std::unique_ptr<QuantLinear> prepare(const MatrixView& m, const std::string& what) {
  if (!is_quantized(m.dtype)) return nullptr;
  return std::make_unique<QuantLinear>(m, what);
}

// y = x @ W^T through the QuantLinear (its input quantized into xq unless `quantized` says xq holds it) or
// the plain linear.
void gemm(const QuantLinear* q, const MatrixView& plain, KernelKind kind, const float* x, int64_t rows,
          int64_t x_stride, std::byte* xq, bool quantized, float* y, int64_t y_stride, ThreadPool& pool) {
  if (q == nullptr) {
    linear(kind, x, rows, x_stride, plain, y, y_stride, pool);
    return;
  }
  if (!quantized) quantize_rows(q->rule(), x, rows, x_stride, q->in(), xq, pool);
  q->forward_quantized(xq, rows, y, y_stride, pool);
}

}  // namespace

bool ffn_has_quantized(Activation act, const FfnWeights& w) {
  return is_quantized(w.w1.dtype) || is_quantized(w.w2.dtype) || (is_gated(act) && is_quantized(w.w3.dtype));
}

PackedFfnQuant::PackedFfnQuant(Activation activation, const FfnWeights& w, KernelKind k,
                               const std::string& what)
    : act(activation), kind(k), params(w) {
  validate_ffn_weights(activation, w, &d, &ff, true);
  w1 = prepare(w.w1, what + ".w1");
  if (is_gated(activation)) w3 = prepare(w.w3, what + ".w3");
  w2 = prepare(w.w2, what + ".w2");
}

size_t PackedFfnQuant::weight_bytes() const {
  const auto bytes = [](const QuantLinear* q, const MatrixView& m) {
    return q ? q->weight_bytes() : static_cast<size_t>(m.rows * m.cols) * dtype_size(m.dtype);
  };
  return bytes(w1.get(), params.w1) + (is_gated(act) ? bytes(w3.get(), params.w3) : 0) +
         bytes(w2.get(), params.w2);
}

size_t ffn_quant_scratch_floats(const PackedFfnQuant& w, int64_t rows) {
  if (rows < 0) throw std::invalid_argument("ffn_quant_scratch_floats: rows is negative");
  return (layout(w, rows).total + sizeof(float) - 1) / sizeof(float);
}

void ffn_quant_forward(const float* x, int64_t rows, int64_t x_stride, const PackedFfnQuant& w, float* y,
                       int64_t y_stride, float* scratch, ThreadPool& pool) {
  const auto fail = [](const std::string& m) { throw std::invalid_argument("ffn_quant_forward: " + m); };
  if (rows < 0) fail("rows (" + std::to_string(rows) + ") is negative");
  if (x_stride < w.d || y_stride < w.d)
    fail("x_stride and y_stride must be at least d (" + std::to_string(w.d) + ")");
  if ((x == nullptr || y == nullptr || scratch == nullptr) && rows > 0) fail("x, y or scratch is null");
  if (rows == 0) return;
  const Layout l = layout(w, rows);
  std::byte* base = aligned(scratch);
  auto* h1 = reinterpret_cast<float*>(base + l.h1);
  auto* h3 = reinterpret_cast<float*>(base + l.h3);
  const int64_t ff = w.ff;
  // Columns [c0, c0 + n) of every row: the biases, then the activation (elementwise: its bits do not depend
  // on how the columns are cut).
  const auto activate = [&](int64_t c0, int64_t n) {
    for (int64_t r = 0; r < rows; ++r)
      bias_and_activate(w.act, w.params, h1 + r * ff + c0, h3 + r * ff + c0, c0, n);
  };
  if (is_gated(w.act) && w.w1 && w.w3 && w.w1->rule() == w.w3->rule()) {
    // The gate and up GEMMs and the activation in one pass over the pool: each thread computes the same
    // panels of W1 and W3 (ff outputs both) and activates those columns (one synchronisation, not three:
    // at a few rows each GEMM is tens of microseconds).
    quantize_rows(w.w1->rule(), x, rows, x_stride, w.d, base + l.xq, pool);
    const int64_t panels = w.w1->panels();
    const int tasks = static_cast<int>(std::min<int64_t>(pool.num_threads(), panels));
    pool.parallel_for(tasks, [&](int64_t task, int) {
      int64_t j0 = 0, j1 = 0;
      ThreadPool::task_range(panels, tasks, static_cast<int>(task), &j0, &j1);
      if (j1 <= j0) return;
      w.w1->forward_quantized_panels(base + l.xq, rows, j0, j1, h1, ff);
      w.w3->forward_quantized_panels(base + l.xq, rows, j0, j1, h3, ff);
      activate(16 * j0, std::min(ff, 16 * j1) - 16 * j0);
    });
  } else {
    gemm(w.w1.get(), w.params.w1, w.kind, x, rows, x_stride, base + l.xq, false, h1, ff, pool);
    if (is_gated(w.act)) {
      const bool shared_x = w.w1 && w.w3 && w.w1->rule() == w.w3->rule();
      gemm(w.w3.get(), w.params.w3, w.kind, x, rows, x_stride, shared_x ? base + l.xq : base + l.x3q,
           shared_x, h3, ff, pool);
    }
    const int tasks = static_cast<int>(std::min<int64_t>(pool.num_threads(), ff));
    pool.parallel_for(tasks, [&](int64_t task, int) {
      int64_t c0 = 0, c1 = 0;
      ThreadPool::task_range(ff, tasks, static_cast<int>(task), &c0, &c1);
      activate(c0, c1 - c0);
    });
  }
  gemm(w.w2.get(), w.params.w2, w.kind, h1, rows, ff, base + l.hq, false, y, y_stride, pool);
  if (w.params.b2 != nullptr) {
    const int tasks = static_cast<int>(std::min<int64_t>(pool.num_threads(), rows));
    pool.parallel_for(tasks, [&](int64_t task, int) {
      int64_t r0 = 0, r1 = 0;
      ThreadPool::task_range(rows, tasks, static_cast<int>(task), &r0, &r1);
      for (int64_t r = r0; r < r1; ++r) add_bias(y + r * y_stride, w.params.b2, w.d);
    });
  }
}

}  // namespace moe::kernels

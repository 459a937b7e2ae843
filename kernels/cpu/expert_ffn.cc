#include "kernels/cpu/expert_ffn.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/activations.h"
#include "kernels/quant_formats.h"

namespace moe::kernels {
namespace {

std::string shape(const MatrixView& m) {
  return "[" + std::to_string(m.rows) + ", " + std::to_string(m.cols) + "]";
}

// Every element of m (any type, quantized ones dequantized exactly: kernels::reference_row), [rows][cols].
std::vector<double> widened(const MatrixView& m) {
  std::vector<double> v(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) reference_row(m, r, v.data() + r * m.cols);
  return v;
}

void validate_matrix(const MatrixView& m, const char* what, bool allow_quantized) {
  if (allow_quantized && is_quantized(m.dtype)) {
    validate_view(m, what);
  } else {
    validate_weights(m, what);
  }
}

}  // namespace

double activation_f64(Activation act, const FfnWeights& w, double gate, double up) {
  switch (act) {
    case Activation::kSwiGLU:
      return silu_f64(gate) * up;
    case Activation::kGELU:
      return gelu_f64(gate);
    case Activation::kClampedSwiGLU:
      return clamped_swiglu_f64(gate, up, w.swiglu_alpha, w.swiglu_limit);
  }
  return 0.0;
}

void activate_row(Activation act, const FfnWeights& w, float* h1, const float* h3, float* out, int64_t ff) {
  switch (act) {
    case Activation::kSwiGLU:
      swiglu(h1, h3, out, ff);
      break;
    case Activation::kGELU:
      gelu(h1, out, ff);
      break;
    case Activation::kClampedSwiGLU:
      clamped_swiglu(h1, h3, out, ff, w.swiglu_alpha, w.swiglu_limit);
      break;
  }
}

void add_bias(float* y, const float* b, int64_t n) {
  if (b == nullptr) return;
  for (int64_t c = 0; c < n; ++c) y[c] += b[c];
}

void bias_and_activate(Activation act, const FfnWeights& w, float* g, float* u, int64_t c0, int64_t n) {
  if (w.b1 != nullptr) add_bias(g, w.b1 + c0, n);
  if (is_gated(act) && w.b3 != nullptr) add_bias(u, w.b3 + c0, n);
  activate_row(act, w, g, u, g, n);
}

void validate_ffn_weights(Activation act, const FfnWeights& w, int64_t* d, int64_t* ff,
                          bool allow_quantized) {
  validate_matrix(w.w1, "ffn: w1", allow_quantized);
  validate_matrix(w.w2, "ffn: w2", allow_quantized);
  if (act == Activation::kClampedSwiGLU &&
      (!(w.swiglu_limit > 0.0f) || !std::isfinite(w.swiglu_limit) || !std::isfinite(w.swiglu_alpha))) {
    throw std::invalid_argument(
        "ffn: clamped SwiGLU needs a finite limit > 0 and a finite alpha (got limit " +
        std::to_string(w.swiglu_limit) + ", alpha " + std::to_string(w.swiglu_alpha) + ")");
  }
  if (!is_gated(act) && w.b3 != nullptr)
    throw std::invalid_argument("ffn: b3 given for an ungated activation");
  if (is_gated(act)) {
    validate_matrix(w.w3, "ffn: w3", allow_quantized);
    if (w.w3.rows != w.w1.rows || w.w3.cols != w.w1.cols) {
      throw std::invalid_argument("ffn: w3 shape " + shape(w.w3) + " differs from w1 shape " + shape(w.w1) +
                                  " (both must be [ff, d])");
    }
  }
  if (w.w2.rows != w.w1.cols || w.w2.cols != w.w1.rows) {
    throw std::invalid_argument("ffn: w2 shape " + shape(w.w2) + " does not match w1 shape " + shape(w.w1) +
                                " (w1 is [ff, d], w2 must be [d, ff])");
  }
  *d = w.w1.cols;
  *ff = w.w1.rows;
}

size_t ffn_scratch_floats(int64_t rows, int64_t ff) {
  if (rows < 0 || ff < 0) {
    throw std::invalid_argument("ffn_scratch_floats: negative size (rows " + std::to_string(rows) + ", ff " +
                                std::to_string(ff) + ")");
  }
  return 2 * static_cast<size_t>(rows) * static_cast<size_t>(ff);
}

void ffn_forward(KernelKind kind, Activation act, const float* x, int64_t rows, int64_t x_stride,
                 const FfnWeights& w, float* y, int64_t y_stride, float* scratch, ThreadPool& pool) {
  int64_t d = 0, ff = 0;
  validate_ffn_weights(act, w, &d, &ff);
  if (rows < 0) throw std::invalid_argument("ffn_forward: rows (" + std::to_string(rows) + ") is negative");
  if (x_stride < d) {
    throw std::invalid_argument("ffn_forward: x_stride (" + std::to_string(x_stride) + ") is less than d (" +
                                std::to_string(d) + ")");
  }
  if (y_stride < d) {
    throw std::invalid_argument("ffn_forward: y_stride (" + std::to_string(y_stride) + ") is less than d (" +
                                std::to_string(d) + ")");
  }
  if (x == nullptr && rows > 0 && d > 0) {
    throw std::invalid_argument("ffn_forward: x is null with rows " + std::to_string(rows));
  }
  if (y == nullptr && rows > 0 && d > 0) {
    throw std::invalid_argument("ffn_forward: y is null with rows " + std::to_string(rows));
  }
  if (scratch == nullptr && rows > 0 && ff > 0) {
    throw std::invalid_argument("ffn_forward: scratch is null, need " +
                                std::to_string(ffn_scratch_floats(rows, ff)) + " floats");
  }
  if (rows == 0) return;
  float* h1 = scratch;
  float* h3 = scratch + rows * ff;
  linear(kind, x, rows, x_stride, w.w1, h1, ff, pool);
  if (is_gated(act)) linear(kind, x, rows, x_stride, w.w3, h3, ff, pool);
  // Elementwise biases and activation: each thread takes a contiguous block of rows.
  const int num_tasks = static_cast<int>(std::min<int64_t>(pool.num_threads(), rows));
  pool.parallel_for(num_tasks, [&](int64_t task, int) {
    int64_t r0 = 0, r1 = 0;
    ThreadPool::task_range(rows, num_tasks, static_cast<int>(task), &r0, &r1);
    if (w.b1 == nullptr && w.b3 == nullptr && act == Activation::kSwiGLU) {  // the common case, one call
      swiglu(h1 + r0 * ff, h3 + r0 * ff, h1 + r0 * ff, (r1 - r0) * ff);
      return;
    }
    for (int64_t r = r0; r < r1; ++r) bias_and_activate(act, w, h1 + r * ff, h3 + r * ff, 0, ff);
  });
  linear(kind, h1, rows, ff, w.w2, y, y_stride, pool);
  if (w.b2 != nullptr) {
    pool.parallel_for(num_tasks, [&](int64_t task, int) {
      int64_t r0 = 0, r1 = 0;
      ThreadPool::task_range(rows, num_tasks, static_cast<int>(task), &r0, &r1);
      for (int64_t r = r0; r < r1; ++r) add_bias(y + r * y_stride, w.b2, d);
    });
  }
}

void ffn_reference_f64(Activation act, const float* x, int64_t rows, const FfnWeights& w, double* y) {
  int64_t d = 0, ff = 0;
  validate_ffn_weights(act, w, &d, &ff, true);
  if (rows < 0)
    throw std::invalid_argument("ffn_reference_f64: rows (" + std::to_string(rows) + ") is negative");
  if ((x == nullptr || y == nullptr) && rows > 0 && d > 0) {
    throw std::invalid_argument("ffn_reference_f64: x or y is null with rows " + std::to_string(rows));
  }
  const std::vector<double> w1 = widened(w.w1), w2 = widened(w.w2);
  const std::vector<double> w3 = is_gated(act) ? widened(w.w3) : std::vector<double>();
  std::vector<double> h(static_cast<size_t>(ff));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    for (int64_t j = 0; j < ff; ++j) {
      double gate = w.b1 ? w.b1[j] : 0.0, up = w.b3 ? w.b3[j] : 0.0;
      for (int64_t i = 0; i < d; ++i) gate += static_cast<double>(xr[i]) * w1[static_cast<size_t>(j * d + i)];
      if (is_gated(act)) {
        for (int64_t i = 0; i < d; ++i) up += static_cast<double>(xr[i]) * w3[static_cast<size_t>(j * d + i)];
      }
      h[static_cast<size_t>(j)] = activation_f64(act, w, gate, up);
    }
    for (int64_t o = 0; o < d; ++o) {
      double sum = w.b2 ? w.b2[o] : 0.0;
      for (int64_t j = 0; j < ff; ++j) sum += h[static_cast<size_t>(j)] * w2[static_cast<size_t>(o * ff + j)];
      y[r * d + o] = sum;
    }
  }
}

}  // namespace moe::kernels

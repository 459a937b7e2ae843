#include "kernels/cpu/expert_ffn_bf16.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/activations.h"

namespace moe::kernels {
namespace {

// Scratch parts, in floats, each rounded up to 16 floats (64 bytes).
struct ScratchLayout {
  size_t h1, h3, xb, hb, total;  // offsets of the parts (from the first 64-byte boundary) and the size
};

size_t round16(size_t n) {
  return (n + 15) / 16 * 16;
}

ScratchLayout layout(int64_t rows, int64_t d, int64_t ff) {
  const size_t r = static_cast<size_t>(rows);
  ScratchLayout s{};
  s.h1 = 0;
  s.h3 = s.h1 + round16(r * static_cast<size_t>(ff));
  s.xb = s.h3 + round16(r * static_cast<size_t>(ff));
  s.hb = s.xb + round16(r * static_cast<size_t>(bf16_pairs(d)));           // a float holds one bf16 pair
  s.total = s.hb + round16(r * static_cast<size_t>(bf16_pairs(ff))) + 16;  // + 16: room to align the start
  return s;
}

}  // namespace

PackedFfnBf16::PackedFfnBf16(Activation activation, const FfnWeights& w, const Bf16LinearMaker& make)
    : act(activation), params(w) {
  int64_t d = 0, ff = 0;
  validate_ffn_weights(activation, w, &d, &ff);
  w1 = make(w.w1);
  if (is_gated(activation)) w3 = make(w.w3);
  w2 = make(w.w2);
}

size_t ffn_bf16_scratch_floats(int64_t rows, int64_t d, int64_t ff) {
  if (rows < 0 || d < 0 || ff < 0) {
    throw std::invalid_argument("ffn_bf16_scratch_floats: negative size (rows " + std::to_string(rows) +
                                ", d " + std::to_string(d) + ", ff " + std::to_string(ff) + ")");
  }
  return layout(rows, d, ff).total;
}

namespace {

// ffn_bf16_forward's argument checks, shared by both entry points (`what` names the function).
void check_forward(const char* what, const void* x, int64_t rows, const PackedFfnBf16& w, const float* y,
                   int64_t y_stride, const float* scratch) {
  const int64_t d = w.d(), ff = w.ff();
  if (rows < 0)
    throw std::invalid_argument(std::string(what) + ": rows (" + std::to_string(rows) + ") is negative");
  if (y_stride < d) {
    throw std::invalid_argument(std::string(what) + ": y_stride (" + std::to_string(y_stride) +
                                ") is less than d (" + std::to_string(d) + ")");
  }
  if ((x == nullptr || y == nullptr) && rows > 0 && d > 0) {
    throw std::invalid_argument(std::string(what) + ": x or y is null with rows " + std::to_string(rows));
  }
  if (scratch == nullptr && rows > 0) {
    throw std::invalid_argument(std::string(what) + ": scratch is null, need " +
                                std::to_string(ffn_bf16_scratch_floats(rows, d, ff)) + " floats");
  }
}

float* aligned_scratch(float* scratch) {
  while (reinterpret_cast<uintptr_t>(scratch) % 64 != 0) ++scratch;
  return scratch;
}

// The FFN from xb (bf16 rows of 2 * pairs(d) elements) on; base is the aligned scratch.
void forward_from_rounded(const uint16_t* xb, int64_t rows, const PackedFfnBf16& w, float* y,
                          int64_t y_stride, const ScratchLayout& s, float* base, ThreadPool& pool) {
  const int64_t ff = w.ff();
  float* h1 = base + s.h1;
  float* h3 = base + s.h3;
  auto* hb = reinterpret_cast<uint16_t*>(base + s.hb);
  const int64_t hb_len = 2 * bf16_pairs(ff);
  // Columns [c0, c1) of every row: the biases, the activation and the rounding of h to bf16 (each is
  // elementwise, so its bits do not depend on how the columns are cut), and the zero past an odd ff.
  const auto activate = [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < rows; ++r) {
      float* g = h1 + r * ff + c0;
      bias_and_activate(w.act, w.params, g, h3 + r * ff + c0, c0, c1 - c0);
      round_to_bf16_span(g, c1 - c0, hb + r * hb_len + c0);
      if (c1 == ff && hb_len > ff) hb[r * hb_len + ff] = 0;
    }
  };
  const int64_t panels = w.w1->panels();
  if (is_gated(w.act) && panels > 0 && w.w3->panels() == panels) {
    // The gate and up products and the activation in one pass over the pool: each task computes the same
    // panels of W1 and W3 and activates those columns (one synchronisation where there were three; at a few
    // rows each product takes tens of microseconds).
    const int tasks = static_cast<int>(std::min<int64_t>(pool.num_threads(), panels));
    pool.parallel_for(tasks, [&](int64_t task, int) {
      int64_t j0 = 0, j1 = 0;
      ThreadPool::task_range(panels, tasks, static_cast<int>(task), &j0, &j1);
      if (j1 <= j0) return;
      w.w1->forward_rounded_panels(xb, rows, j0, j1, h1, ff);
      w.w3->forward_rounded_panels(xb, rows, j0, j1, h3, ff);
      activate(j0 * kBf16PanelOutputs, std::min(ff, j1 * kBf16PanelOutputs));
    });
  } else {
    w.w1->forward_rounded(xb, rows, h1, ff, pool);
    if (is_gated(w.act)) w.w3->forward_rounded(xb, rows, h3, ff, pool);
    const int tasks = static_cast<int>(std::min<int64_t>(pool.num_threads(), ff));
    pool.parallel_for(tasks, [&](int64_t task, int) {
      int64_t c0 = 0, c1 = 0;
      ThreadPool::task_range(ff, tasks, static_cast<int>(task), &c0, &c1);
      if (c1 > c0) activate(c0, c1);
    });
  }
  w.w2->forward_rounded(hb, rows, y, y_stride, pool);
  const int num_tasks = static_cast<int>(std::min<int64_t>(pool.num_threads(), rows));
  if (w.params.b2 != nullptr) {
    pool.parallel_for(num_tasks, [&](int64_t task, int) {
      int64_t r0 = 0, r1 = 0;
      ThreadPool::task_range(rows, num_tasks, static_cast<int>(task), &r0, &r1);
      for (int64_t r = r0; r < r1; ++r) add_bias(y + r * y_stride, w.params.b2, w.d());
    });
  }
}

}  // namespace

void ffn_bf16_forward(const float* x, int64_t rows, int64_t x_stride, const PackedFfnBf16& w, float* y,
                      int64_t y_stride, float* scratch, ThreadPool& pool) {
  check_forward("ffn_bf16_forward", x, rows, w, y, y_stride, scratch);
  if (x_stride < w.d()) {
    throw std::invalid_argument("ffn_bf16_forward: x_stride (" + std::to_string(x_stride) +
                                ") is less than d (" + std::to_string(w.d()) + ")");
  }
  if (rows == 0) return;
  const ScratchLayout s = layout(rows, w.d(), w.ff());
  float* base = aligned_scratch(scratch);
  auto* xb = reinterpret_cast<uint16_t*>(base + s.xb);
  round_rows_to_bf16(x, rows, x_stride, w.d(), xb, pool);
  forward_from_rounded(xb, rows, w, y, y_stride, s, base, pool);
}

void ffn_bf16_forward_rounded(const uint16_t* xb, int64_t rows, const PackedFfnBf16& w, float* y,
                              int64_t y_stride, float* scratch, ThreadPool& pool) {
  check_forward("ffn_bf16_forward_rounded", xb, rows, w, y, y_stride, scratch);
  if (rows == 0) return;
  forward_from_rounded(xb, rows, w, y, y_stride, layout(rows, w.d(), w.ff()), aligned_scratch(scratch), pool);
}

namespace {

// The fp32 activation's error relative to its value: twice what tests/kernels_cpu_activations_test.cc
// requires (the header's `a`).
double activation_relative_error(Activation act, const FfnWeights& w, double gate) {
  switch (act) {
    case Activation::kSwiGLU:
      return 2 * 1.2e-6;
    case Activation::kGELU: {
      const double v = 2.0 * std::sqrt(2.0 / std::numbers::pi) * (gate + 0.044715 * gate * gate * gate);
      return 2 * (1e-6 + 4e-7 * std::fabs(v));
    }
    case Activation::kClampedSwiGLU:
      return 2 * (2e-6 + 0x1p-24 * std::fabs(w.swiglu_alpha * std::min<double>(gate, w.swiglu_limit)));
  }
  return 0.0;
}

// The header's bound e on |h_fp32 - act(gate, up)|, from the exact pre-activations and their scales
// (sum |xb_i w_ji| + |b_j|).
double hidden_error_bound(Activation act, const FfnWeights& w, double gate, double up, double gate_scale,
                          double up_scale, int64_t d) {
  const double n = 2.0 * static_cast<double>(bf16_pairs(d)) + 1.0;  // the chain's roundings, the bias add
  const double gamma = n * 0x1p-24 / (1.0 - n * 0x1p-24);
  const double dg = gamma * gate_scale + n * 0x1p-126, du = gamma * up_scale + n * 0x1p-126;
  const double h = activation_f64(act, w, gate, up);
  double moved = 0.0;
  for (const double sg : {-1.0, 1.0}) {
    for (const double su : {-1.0, 1.0}) {
      moved = std::max(moved, std::fabs(activation_f64(act, w, gate + sg * dg, up + su * du) - h));
    }
  }
  return moved + activation_relative_error(act, w, gate) * (std::fabs(h) + moved) + 0x1p-126;
}

}  // namespace

void ffn_bf16_reference_f64(Activation act, const float* x, int64_t rows, const FfnWeights& w, double* y,
                            double* scale, bool round_hidden, std::vector<UndeterminedHidden>* undetermined,
                            double* hidden) {
  int64_t d = 0, ff = 0;
  validate_ffn_weights(act, w, &d, &ff);
  if (rows < 0) throw std::invalid_argument("ffn_bf16_reference_f64: rows is negative");
  if ((x == nullptr || y == nullptr) && rows > 0 && d > 0) {
    throw std::invalid_argument("ffn_bf16_reference_f64: x or y is null");
  }
  // The bf16 values of the weights, widened to double once.
  const auto widen = [](const MatrixView& m) {
    std::vector<double> v(static_cast<size_t>(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) {
      for (int64_t c = 0; c < m.cols; ++c) {
        const uint16_t b = m.dtype == DType::kBF16
                               ? static_cast<const uint16_t*>(m.data)[r * m.row_stride + c]
                               : f32_to_bf16(static_cast<const float*>(m.data)[r * m.row_stride + c]);
        v[static_cast<size_t>(r * m.cols + c)] = bf16_to_f32(b);
      }
    }
    return v;
  };
  const std::vector<double> w1 = widen(w.w1), w2 = widen(w.w2);
  const std::vector<double> w3 = is_gated(act) ? widen(w.w3) : std::vector<double>();
  std::vector<double> xr(static_cast<size_t>(d)), h(static_cast<size_t>(ff));
  // sum += xr . wm[j], scale += sum_i |xr_i wm[j][i]| (the pre-activation and its scale).
  const auto pre_activation = [&](const std::vector<double>& wm, int64_t j, double& sum, double& scale) {
    for (int64_t i = 0; i < d; ++i) {
      const double t = xr[static_cast<size_t>(i)] * wm[static_cast<size_t>(j * d + i)];
      sum += t;
      scale += std::fabs(t);
    }
  };
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < d; ++i) xr[static_cast<size_t>(i)] = round_to_bf16(x[r * d + i]);
    for (int64_t j = 0; j < ff; ++j) {
      double gate = w.b1 ? w.b1[j] : 0.0, up = w.b3 ? w.b3[j] : 0.0;
      double gate_scale = std::fabs(gate), up_scale = std::fabs(up);
      pre_activation(w1, j, gate, gate_scale);
      if (is_gated(act)) pre_activation(w3, j, up, up_scale);
      const double exact = activation_f64(act, w, gate, up);
      h[static_cast<size_t>(j)] = exact;
      if (!round_hidden) continue;
      const double rounded = round_to_bf16(static_cast<float>(exact));
      h[static_cast<size_t>(j)] = rounded;
      if (undetermined == nullptr) continue;
      const double e = hidden_error_bound(act, w, gate, up, gate_scale, up_scale, d);
      const double lo = round_to_bf16(static_cast<float>(exact - e));
      const double hi = round_to_bf16(static_cast<float>(exact + e));
      if (lo == hi) continue;
      UndeterminedHidden u{r, j, rounded, lo, hi, std::vector<double>(static_cast<size_t>(d))};
      for (int64_t o = 0; o < d; ++o) u.down[static_cast<size_t>(o)] = w2[static_cast<size_t>(o * ff + j)];
      undetermined->push_back(std::move(u));
    }
    if (hidden != nullptr) std::copy(h.begin(), h.end(), hidden + r * ff);
    for (int64_t o = 0; o < d; ++o) {
      double sum = w.b2 ? w.b2[o] : 0.0, abs_sum = 0.0;
      for (int64_t j = 0; j < ff; ++j) {
        const double t = h[static_cast<size_t>(j)] * w2[static_cast<size_t>(o * ff + j)];
        sum += t;
        abs_sum += std::fabs(t);
      }
      y[r * d + o] = sum;
      if (scale != nullptr) scale[r * d + o] = abs_sum;
    }
  }
}

}  // namespace moe::kernels

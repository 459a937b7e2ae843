#include "moe/model/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace moe::model {

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * inv) * weight[i];
}

void rms_norm_reference_f64(const float* x, const float* weight, int64_t n, double eps, double* y) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<double>(x[i]) * inv * weight[i];
}

void apply_rope(float* row, int num_heads, int head_dim, uint32_t position, float theta) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double angle =
        static_cast<double>(position) * std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
    const float c = static_cast<float>(std::cos(angle));
    const float s = static_cast<float>(std::sin(angle));
    for (int h = 0; h < num_heads; ++h) {
      float* x = row + static_cast<int64_t>(h) * head_dim;
      const float a = x[i];
      const float b = x[i + half];
      x[i] = a * c - b * s;
      x[i + half] = b * c + a * s;
    }
  }
}

void apply_rope_reference_f64(double* row, int num_heads, int head_dim, uint32_t position, double theta) {
  const int half = head_dim / 2;
  for (int h = 0; h < num_heads; ++h) {
    double* x = row + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const double angle = static_cast<double>(position) * std::pow(theta, -2.0 * i / head_dim);
      const double a = x[i];
      const double b = x[i + half];
      x[i] = a * std::cos(angle) - b * std::sin(angle);
      x[i + half] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
}

void attention_row(const float* q, const float* keys, const float* values, int64_t num_keys, int num_heads,
                   int head_dim, float* out, float* scratch) {
  const int64_t width = static_cast<int64_t>(num_heads) * head_dim;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  for (int h = 0; h < num_heads; ++h) {
    const float* qh = q + static_cast<int64_t>(h) * head_dim;
    float max_score = -INFINITY;
    for (int64_t j = 0; j < num_keys; ++j) {
      const float* kh = keys + j * width + static_cast<int64_t>(h) * head_dim;
      float dot = 0.0f;
      for (int i = 0; i < head_dim; ++i) dot += qh[i] * kh[i];
      const float s = dot * scale;
      scratch[j] = s;
      if (s > max_score) max_score = s;
    }
    float* oh = out + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < head_dim; ++i) oh[i] = 0.0f;
    float sum = 0.0f;
    for (int64_t j = 0; j < num_keys; ++j) {
      const float p = std::exp(scratch[j] - max_score);
      sum += p;
      const float* vh = values + j * width + static_cast<int64_t>(h) * head_dim;
      for (int i = 0; i < head_dim; ++i) oh[i] += p * vh[i];
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < head_dim; ++i) oh[i] *= inv;
  }
}

void attention_row_reference_f64(const double* q, const double* keys, const double* values, int64_t num_keys,
                                 int num_heads, int head_dim, double* out) {
  const int64_t width = static_cast<int64_t>(num_heads) * head_dim;
  std::vector<double> s(static_cast<size_t>(num_keys));
  for (int h = 0; h < num_heads; ++h) {
    double max_score = -INFINITY;
    for (int64_t j = 0; j < num_keys; ++j) {
      double dot = 0.0;
      for (int i = 0; i < head_dim; ++i) dot += q[h * head_dim + i] * keys[j * width + h * head_dim + i];
      s[j] = dot / std::sqrt(static_cast<double>(head_dim));
      max_score = std::max(max_score, s[j]);
    }
    double sum = 0.0;
    for (int64_t j = 0; j < num_keys; ++j) sum += std::exp(s[j] - max_score);
    for (int i = 0; i < head_dim; ++i) {
      double acc = 0.0;
      for (int64_t j = 0; j < num_keys; ++j)
        acc += std::exp(s[j] - max_score) * values[j * width + h * head_dim + i];
      out[h * head_dim + i] = acc / sum;
    }
  }
}

}  // namespace moe::model

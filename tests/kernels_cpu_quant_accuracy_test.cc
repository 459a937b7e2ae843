// Accuracy of the quantized kernels (kernels/cpu/linear_quant.h, expert_ffn_quant.h) against float64 on the
// exactly dequantized weights, with and without the activation rule (both errors printed, both bounded):
//
//   with the rule      ref_q = sum_i x'_i w_i, x' = the rule's values of x (q_i dx, or bf16(x)): the kernel's
//                      operands exactly, so only its fp32 chain separates them. Each term of the chain passes
//                      through at most n roundings (s = scale * dx: 1; each fma of the chain: 1 per step; the
//                      int32 -> fp32 conversion of a Q4_K sum: 1; FP8: the block's dpbf16 chain, 1 per
//                      element), so |y - ref_q| <= gamma(n) * S, gamma(n) = n u / (1 - n u), u = 2^-24, with
//                      S = sum over the chain's terms of their magnitudes (sum_i |x'_i w_i|; Q4_K's scale and
//                      min parts counted apart: sum_i |x'_i| (|d sc q| + |dmin m|)).
//   without the rule   ref = sum_i x_i w_i on the fp32 x: |y - ref| <= |y - ref_q| + sum_i |w_i| |x_i -
//   x'_i|,
//                      where |x_i - x'_i| <= dx / 2 + 2 u |x_i| (int8 rules: q = nearbyint(x * inv) with inv
//                      and the product rounded) or 2^-9 |x_i| (bf16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/expert_ffn_quant.h"
#include "kernels/cpu/linear_quant.h"
#include "kernels/quant_formats.h"
#include "tests/support/quant_operands.h"

namespace moe::kernels {
namespace {

using test_util::kQuantTypes;
using test_util::QuantWeights;
using test_util::random_floats;

constexpr double kU = 0x1p-24;

double gamma(double n) {
  return n * kU / (1.0 - n * kU);
}

// Roundings a term of output o's chain passes through at most (the header above).
double chain_roundings(const MatrixView& w) {
  switch (w.dtype) {
    case DType::kQ8_0:
    case DType::kMXFP4:
      return static_cast<double>(w.cols / 32) + 1;
    case DType::kQ4_K:
      return 2.0 * static_cast<double>(w.cols / 256) + 2;
    case DType::kQ6_K:
      return static_cast<double>(w.cols / 256) + 2;
    case DType::kFP8:
      return static_cast<double>(fp8_scale_cols(w)) + w.scale_block_cols + 1;
    default:
      return 0;
  }
}

// |w_i| per element, and for Q4_K the magnitudes of its scale and min parts (|d sc q| + |dmin m|).
std::vector<double> term_magnitudes(const MatrixView& w, int64_t o) {
  std::vector<double> a(static_cast<size_t>(w.cols));
  reference_row(w, o, a.data());
  for (double& v : a) v = std::fabs(v);
  if (w.dtype != DType::kQ4_K) return a;
  for (int64_t s = 0; s < w.cols / 256; ++s) {
    BlockQ4_K blk;
    std::memcpy(&blk, static_cast<const std::byte*>(view_row(w, o)) + s * sizeof(blk), sizeof(blk));
    for (int j = 0; j < 8; ++j) {
      int sc = 0, m = 0;
      q4k_scale_min(j, blk.scales, &sc, &m);
      for (int l = 0; l < 32; ++l) {
        const int64_t i = s * 256 + 64 * (j / 2) + 32 * (j % 2) + l;
        const int q = j % 2 ? blk.qs[32 * (j / 2) + l] >> 4 : blk.qs[32 * (j / 2) + l] & 15;
        a[static_cast<size_t>(i)] =
            std::fabs(f16_to_f32(blk.d) * sc * q) + std::fabs(f16_to_f32(blk.dmin) * m);
      }
    }
  }
  return a;
}

TEST(QuantLinearAccuracy, WithAndWithoutTheActivationRule) {
  ThreadPool pool(2);
  const int64_t out = 48, rows = 6;
  for (DType t : kQuantTypes) {
    for (int64_t in : {int64_t{512}, int64_t{2048}}) {
      const int64_t cols = t == DType::kFP8 ? in + 70 : in;
      const QuantWeights qw(t, out, cols, static_cast<uint32_t>(cols));
      const QuantLinear w(qw.view, "w");
      const std::vector<float> x = random_floats(static_cast<size_t>(rows * cols), 3, -2.0f, 2.0f);
      std::vector<float> y(static_cast<size_t>(rows * out));
      w.forward(x.data(), rows, cols, y.data(), out, nullptr, pool);
      std::vector<double> ref(y.size()), ref_q(y.size());
      linear_quant_reference_f64(x.data(), rows, qw.view, false, ref.data());
      linear_quant_reference_f64(x.data(), rows, qw.view, true, ref_q.data());
      // x' of each row, and the step of each element's rule.
      const QuantRule rule = w.rule();
      const QuantRowLayout l = quant_row_layout(rule, cols);
      std::vector<std::byte> xq(l.stride);
      double worst_q = 0, worst = 0, worst_rel = 0;  // error / bound, and the plain relative error
      for (int64_t r = 0; r < rows; ++r) {
        quantize_rows_portable(rule, x.data() + r * cols, 1, cols, cols, xq.data());
        std::vector<double> xr(static_cast<size_t>(cols)), err(static_cast<size_t>(cols));
        const int64_t n = rule == QuantRule::kInt8Block256 ? 256 : 32;
        for (int64_t i = 0; i < cols; ++i) {
          const double xi = x[r * cols + i];
          if (rule == QuantRule::kBf16) {
            uint16_t b;
            std::memcpy(&b, xq.data() + 2 * i, 2);
            xr[i] = bf16_to_f32(b);
            err[i] = 0x1p-9 * std::fabs(xi);
          } else {
            const double dx = reinterpret_cast<const float*>(xq.data() + l.dx)[i / n];
            xr[i] = reinterpret_cast<const int8_t*>(xq.data() + l.q)[i] * dx;
            err[i] = dx / 2 * (1 + 4 * kU) + 2 * kU * std::fabs(xi);
          }
        }
        for (int64_t o = 0; o < out; ++o) {
          const std::vector<double> a = term_magnitudes(qw.view, o);
          std::vector<double> wv(static_cast<size_t>(cols));
          reference_row(qw.view, o, wv.data());
          double s = 0, rule_err = 0, norm = 0;
          for (int64_t i = 0; i < cols; ++i) {
            s += std::fabs(xr[i]) * a[i];
            rule_err += std::fabs(wv[i]) * err[i];
            norm += std::fabs(wv[i] * x[r * cols + i]);
          }
          const size_t k = static_cast<size_t>(r * out + o);
          const double bound_q = gamma(chain_roundings(qw.view)) * s + 1e-300;
          const double e_q = std::fabs(y[k] - ref_q[k]), e = std::fabs(y[k] - ref[k]);
          ASSERT_LE(e_q, bound_q) << to_string(t) << " row " << r << " output " << o;
          ASSERT_LE(e, bound_q + rule_err) << to_string(t) << " row " << r << " output " << o;
          worst_q = std::max(worst_q, e_q / bound_q);
          worst = std::max(worst, e / (bound_q + rule_err));
          worst_rel = std::max(worst_rel, e / norm);
        }
      }
      std::printf(
          "  %-5s in %5lld: with the rule %.2f of its bound, without %.2f of its bound (%.2e of "
          "sum |w x|)\n",
          std::string(to_string(t)).c_str(), static_cast<long long>(cols), worst_q, worst, worst_rel);
    }
  }
}

// The FFN against ffn_reference_f64 on the exactly dequantized weights. The rule's error at x and at h: per
// output of a GEMM at most 2^-7 (int8: dx / 2 is 1/254 of a block's largest, which these uniform rows keep
// within ~2x of each element's rms) or 2^-9 (bf16) of sum |w x|, and for these random weights sum |w x| ~
// sqrt(in) |y|: the row's relative error stays below 2^-7 sqrt(d) x 2 GEMMs ~ 0.03 (int8) and a quarter of
// that in bf16. The printed errors are what is measured.
TEST(QuantFfnAccuracy, MatchesTheFloat64ReferenceOnTheDequantizedWeights) {
  ThreadPool pool(2);
  const int64_t d = 256, ff = 512, rows = 8;
  for (DType t : kQuantTypes) {
    const QuantWeights w1(t, ff, d, 1), w3(t, ff, d, 2), w2(t, d, ff, 3);
    const FfnWeights fw{w1.view, w3.view, w2.view};
    const PackedFfnQuant packed(Activation::kSwiGLU, fw, KernelKind::kInvariant, "ffn");
    const std::vector<float> x = random_floats(static_cast<size_t>(rows * d), 8, -2.0f, 2.0f);
    std::vector<float> y(static_cast<size_t>(rows * d)), scratch(ffn_quant_scratch_floats(packed, rows));
    ffn_quant_forward(x.data(), rows, d, packed, y.data(), d, scratch.data(), pool);
    std::vector<double> ref(y.size());
    ffn_reference_f64(Activation::kSwiGLU, x.data(), rows, fw, ref.data());
    double worst = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double err = 0, norm = 0;
      for (int64_t i = 0; i < d; ++i) {
        err += (y[r * d + i] - ref[r * d + i]) * (y[r * d + i] - ref[r * d + i]);
        norm += ref[r * d + i] * ref[r * d + i];
      }
      worst = std::max(worst, std::sqrt(err / norm));
    }
    const double bound = t == DType::kFP8 ? 0.03 / 4 : 0.03;
    std::printf("  %-5s FFN: worst row relative error %.2e (bound %.2e)\n", std::string(to_string(t)).c_str(),
                worst, bound);
    EXPECT_LE(worst, bound) << to_string(t);
  }
}

}  // namespace
}  // namespace moe::kernels

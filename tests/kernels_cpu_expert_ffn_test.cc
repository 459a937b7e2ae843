// Accuracy of ffn_forward() against the float64 oracle, and its input validation.
//
// Error measure: per row, ||y - ref||_2 / ||ref||_2 (the row's relative error in the 2-norm), required
// <= 1e-5 for both kinds. For bf16 weights the reference uses the same bf16 weights; the error against
// the unrounded fp32 weights is reported (it is bf16 rounding, ~1e-3, not kernel error).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/expert_ffn.h"
#include "tests/support/expect_invalid.h"
#include "tests/support/kernel_operands.h"

namespace moe::kernels {
namespace {

using test_util::random_floats;
using test_util::TestWeights;

constexpr double kTol = 1e-5;

struct Expert {
  TestWeights w1, w3, w2;
  std::vector<float> b1, b3, b2;  // gpt-oss-style biases
  Expert(int64_t d, int64_t ff, uint32_t seed)
      : w1(ff, d, d % 2 ? 3 : 0, seed),
        w3(ff, d, 1, seed + 1),
        w2(d, ff, ff % 2 ? 2 : 0, seed + 2),
        b1(random_floats(static_cast<size_t>(ff), seed + 3, -0.5f, 0.5f)),
        b3(random_floats(static_cast<size_t>(ff), seed + 4, -0.5f, 0.5f)),
        b2(random_floats(static_cast<size_t>(d), seed + 5, -0.5f, 0.5f)) {}
  // With biases (b3 only for gated activations) and, for the clamped SwiGLU, a limit that clamps often.
  FfnWeights view(DType t, Activation act = Activation::kSwiGLU, bool biased = false) const {
    FfnWeights w{w1.view(t), w3.view(t), w2.view(t)};
    if (biased) {
      w.b1 = b1.data();
      w.b3 = is_gated(act) ? b3.data() : nullptr;
      w.b2 = b2.data();
    }
    w.swiglu_limit = 0.75f;
    return w;
  }
};

double max_row_rel_error(const std::vector<float>& y, int64_t rows, int64_t d, int64_t y_stride,
                         const std::vector<double>& ref) {
  double worst = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double num = 0.0, den = 0.0;
    for (int64_t o = 0; o < d; ++o) {
      const double diff = y[static_cast<size_t>(r * y_stride + o)] - ref[static_cast<size_t>(r * d + o)];
      num += diff * diff;
      den += ref[static_cast<size_t>(r * d + o)] * ref[static_cast<size_t>(r * d + o)];
    }
    worst = std::max(worst, std::sqrt(num) / std::max(std::sqrt(den), 1e-30));
  }
  return worst;
}

TEST(ExpertFfn, MatchesFloat64Reference) {
  struct Case {
    int64_t d, ff;
    std::vector<int64_t> rows;
  };
  const std::vector<Case> cases = {
      {1, 1, {0, 1, 5}},
      {17, 33, {0, 1, 5, 64, 513}},
      {64, 160, {1, 5, 64, 513}},
      {1024, 2816, {1, 5}},  // Mixtral-like expert at small scale (d 4096 -> 1024, ff 14336 -> 2816)
  };
  ThreadPool pool1(1), pool2(2), pool3(3);
  ThreadPool* pools[] = {&pool1, &pool2, &pool3};
  double worst = 0.0, worst_unrounded = 0.0;
  for (const Case& c : cases) {
    const Expert ex(c.d, c.ff, static_cast<uint32_t>(c.d * 7 + c.ff));
    for (int64_t rows : c.rows) {
      const int64_t x_stride = c.d + 2, y_stride = c.d + 3;
      const auto xc = random_floats(static_cast<size_t>(rows * c.d), 11, -2.0f, 2.0f);
      std::vector<float> xbuf(static_cast<size_t>(rows * x_stride + 1));
      for (int64_t r = 0; r < rows; ++r) std::copy_n(&xc[r * c.d], c.d, &xbuf[1 + r * x_stride]);
      std::vector<float> scratch(ffn_scratch_floats(rows, c.ff));
      for (Activation act : {Activation::kSwiGLU, Activation::kGELU, Activation::kClampedSwiGLU}) {
        for (bool biased : {false, true}) {
          if (c.d >= 1024 && (biased != (act == Activation::kClampedSwiGLU))) continue;  // the long case once
          std::vector<double> ref_f32(static_cast<size_t>(rows * c.d)), ref_bf16(ref_f32.size());
          ffn_reference_f64(act, xc.data(), rows, ex.view(DType::kF32, act, biased), ref_f32.data());
          ffn_reference_f64(act, xc.data(), rows, ex.view(DType::kBF16, act, biased), ref_bf16.data());
          for (DType dt : {DType::kF32, DType::kBF16}) {
            for (KernelKind kind : {KernelKind::kFast, KernelKind::kInvariant}) {
              for (ThreadPool* pool : pools) {
                std::vector<float> y(static_cast<size_t>(std::max<int64_t>(rows * y_stride, 1)));
                ffn_forward(kind, act, xbuf.data() + 1, rows, x_stride, ex.view(dt, act, biased), y.data(),
                            y_stride, scratch.data(), *pool);
                const double err =
                    max_row_rel_error(y, rows, c.d, y_stride, dt == DType::kF32 ? ref_f32 : ref_bf16);
                EXPECT_LE(err, kTol) << to_string(dt) << " " << to_string(kind) << " " << to_string(act)
                                     << (biased ? " biased" : "") << " d=" << c.d << " ff=" << c.ff
                                     << " rows=" << rows << " threads=" << pool->num_threads();
                worst = std::max(worst, err);
                if (dt == DType::kBF16) {
                  worst_unrounded =
                      std::max(worst_unrounded, max_row_rel_error(y, rows, c.d, y_stride, ref_f32));
                }
              }
            }
          }
        }
      }
    }
  }
  std::printf("worst per-row relative 2-norm error: %.3g (bf16 weights against unrounded fp32: %.3g)\n",
              worst, worst_unrounded);
  EXPECT_LE(worst_unrounded, 0.02);  // bf16 rounding (2^-8 per weight) through two layers
}

using testing::ExpectInvalid;

TEST(ExpertFfn, BadInputThrows) {
  ThreadPool pool(1);
  const Expert ex(8, 12, 1);
  std::vector<float> x(16), y(16), scratch(ffn_scratch_floats(2, 12));
  const FfnWeights good = ex.view(DType::kF32);
  auto run = [&](const FfnWeights& w, Activation act, float* s) {
    ffn_forward(KernelKind::kInvariant, act, x.data(), 2, 8, w, y.data(), 8, s, pool);
  };
  run(good, Activation::kSwiGLU, scratch.data());  // valid

  FfnWeights bad_w3 = good;
  bad_w3.w3.rows = 11;
  ExpectInvalid([&] { run(bad_w3, Activation::kSwiGLU, scratch.data()); },
                "w3 shape [11, 8] differs from w1 shape [12, 8]");
  run(bad_w3, Activation::kGELU, scratch.data());  // w3 is unused for GELU

  const TestWeights w2t(12, 8, 0, 5);  // transposed down projection
  FfnWeights bad_w2 = good;
  bad_w2.w2 = w2t.view(DType::kF32);
  ExpectInvalid([&] { run(bad_w2, Activation::kGELU, scratch.data()); },
                "w2 shape [12, 8] does not match w1 shape [12, 8]");

  ExpectInvalid([&] { run(good, Activation::kSwiGLU, nullptr); }, "scratch is null, need 48 floats");
  FfnWeights f16 = good;
  f16.w1.dtype = DType::kF16;
  ExpectInvalid([&] { run(f16, Activation::kSwiGLU, scratch.data()); }, "ffn: w1: unsupported dtype f16");
  ExpectInvalid(
      [&] {
        ffn_forward(KernelKind::kFast, Activation::kSwiGLU, x.data(), 2, 7, good, y.data(), 8, scratch.data(),
                    pool);
      },
      "x_stride (7) is less than d (8)");
  ExpectInvalid(
      [&] {
        ffn_forward(KernelKind::kFast, Activation::kSwiGLU, nullptr, 2, 8, good, y.data(), 8, scratch.data(),
                    pool);
      },
      "x is null");
  ExpectInvalid([&] { ffn_scratch_floats(-1, 4); }, "negative size");
}

}  // namespace
}  // namespace moe::kernels

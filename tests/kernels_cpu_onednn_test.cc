// The oneDNN bf16 fast path (linear_onednn.h): accuracy against float64 of the same bf16-rounded operands
// (the bound of linear_bf16.h: 4 sqrt(2P) 2^-24 of sum|xb wb|), for any slice count and thread count; the
// FFN on oneDNN ops (the bound of expert_ffn_bf16.h); and a report of whether its rows depend on the batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/expert_ffn_bf16.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_onednn.h"
#include "tests/support/bf16_operands.h"
#include "tests/support/kernel_operands.h"

namespace moe::kernels {
namespace {

using test_util::bf16_linear_bound;
using test_util::bf16_rows;
using test_util::Bf16LinearReference;
using test_util::random_floats;
using test_util::TestWeights;

TEST(OnednnBf16, MatchesFloat64OfTheRoundedOperands) {
  ThreadPool pool1(1), pool2(2);
  struct Shape {
    int64_t in, out, rows;
  };
  double worst = 0.0;
  for (const Shape& sh : {Shape{1, 1, 1}, Shape{17, 7, 5}, Shape{1000, 65, 64}, Shape{1024, 2816, 16},
                          Shape{2816, 1024, 3}, Shape{1024, 200, 300}}) {
    const TestWeights tw(sh.out, sh.in, sh.in % 2 ? 3 : 0, static_cast<uint32_t>(sh.in + sh.out));
    const auto x = random_floats(static_cast<size_t>(sh.rows * sh.in), 5);
    const Bf16LinearReference rounded(x, sh.rows, tw);
    const std::vector<double>& ref = rounded.y;
    const std::vector<double>& scale = rounded.scale;
    const double bound = bf16_linear_bound(sh.in);
    const std::vector<uint16_t> xb = bf16_rows(x.data(), sh.rows, sh.in, pool1);
    for (DType dt : {DType::kBF16, DType::kF32}) {
      for (int slices : {1, 2, 3}) {
        const OnednnBf16Linear op(tw.view(dt), slices);
        for (ThreadPool* pool : {&pool1, &pool2}) {
          const int64_t y_stride = sh.out + 3;
          std::vector<float> y(static_cast<size_t>(sh.rows * y_stride), -77.0f);
          op.forward_rounded(xb.data(), sh.rows, y.data(), y_stride, *pool);
          for (int64_t r = 0; r < sh.rows; ++r) {
            for (int64_t o = 0; o < sh.out; ++o) {
              const size_t k = static_cast<size_t>(r * sh.out + o);
              const double e =
                  std::fabs(y[static_cast<size_t>(r * y_stride + o)] - ref[k]) / std::max(scale[k], 1e-30);
              ASSERT_LE(e, bound) << "in=" << sh.in << " out=" << sh.out << " rows=" << sh.rows
                                  << " slices=" << slices;
              worst = std::max(worst, e);
            }
            for (int64_t o = sh.out; o < y_stride; ++o)
              ASSERT_EQ(y[static_cast<size_t>(r * y_stride + o)], -77.0f);
          }
        }
      }
    }
  }
  const OnednnBf16Linear probe(TestWeights(2816, 1024, 0, 1).view(DType::kBF16), 1);
  std::printf(
      "oneDNN bf16 linear: worst |y-ref| / sum|xb wb| %.3g; implementation %s (rows 1), %s (rows 256)\n",
      worst, probe.implementation(1).c_str(), probe.implementation(256).c_str());
}

TEST(OnednnBf16, FfnMatchesFloat64WithinTheRoundingOfH) {
  ThreadPool pool(2);
  const int64_t d = 256, ff = 704, rows = 9;
  const TestWeights w1(ff, d, 0, 11), w3(ff, d, 1, 12), w2(d, ff, 3, 13);
  const auto x = random_floats(static_cast<size_t>(rows * d), 14, -2.0f, 2.0f);
  for (Activation act : {Activation::kSwiGLU, Activation::kGELU}) {
    const FfnWeights fw{w1.view(DType::kBF16), w3.view(DType::kBF16), w2.view(DType::kBF16)};
    const PackedFfnBf16 w(act, fw, onednn_bf16_linear_maker(2));
    EXPECT_EQ(w.kind(), KernelKind::kFast);
    std::vector<double> ref(static_cast<size_t>(rows * d)), scale(ref.size());
    ffn_bf16_reference_f64(act, x.data(), rows, fw, ref.data(), scale.data());
    std::vector<float> y(ref.size()), scratch(ffn_bf16_scratch_floats(rows, d, ff));
    ffn_bf16_forward(x.data(), rows, d, w, y.data(), d, scratch.data(), pool);
    for (size_t k = 0; k < y.size(); ++k)
      ASSERT_LE(std::fabs(y[k] - ref[k]), 1.25 * 0x1p-8 * scale[k] + 1e-30);
  }
}

// Not a requirement either way: records whether oneDNN's rows depend on the batch on this machine.
TEST(OnednnBf16, ReportsWhetherRowsDependOnTheBatch) {
  ThreadPool pool(1);
  const int64_t in = 1024, out = 2816, n = 64;
  const TestWeights tw(out, in, 0, 42);
  const OnednnBf16Linear op(tw.view(DType::kBF16), 1);
  const auto x = random_floats(static_cast<size_t>(n * in), 43);
  const std::vector<uint16_t> xb = bf16_rows(x.data(), n, in, pool);
  std::vector<float> yn(static_cast<size_t>(n * out)), y1(static_cast<size_t>(out));
  op.forward_rounded(xb.data(), n, yn.data(), out, pool);
  int64_t differing = 0;
  for (int64_t r = 0; r < n; ++r) {
    op.forward_rounded(xb.data() + r * in, 1, y1.data(), out, pool);
    differing += std::memcmp(yn.data() + r * out, y1.data(), out * sizeof(float)) == 0 ? 0 : 1;
  }
  std::printf("oneDNN (%s / %s): %lld of %lld rows differ bitwise between batch-1 and batch-%lld\n",
              op.implementation(1).c_str(), op.implementation(n).c_str(), static_cast<long long>(differing),
              static_cast<long long>(n), static_cast<long long>(n));
}

}  // namespace
}  // namespace moe::kernels

// Accuracy of the bf16-compute kernels against float64 of the SAME bf16-rounded operands, the operands
// themselves (rounding of activations, packing of weights), and input validation.
//
// Linear (bound stated in linear_bf16.h): every product of two bf16 numbers is exact in fp32, so the error
// is the 2P roundings of the accumulation chain (P = pairs(in)); with scale = sum_i |xb_i wb_i| the test
// requires |y - ref| <= 4 sqrt(2P) 2^-24 scale (the worst case is 2P 2^-24 scale; a long chain's rounding
// errors have random signs, so what is measured is a few times smaller than the bound). Against the
// unrounded fp32 x and W the rounding of the two operands adds at most (2^-7 + 2^-16) sum_i |x_i w_i|.
// FFN (bound stated in expert_ffn_bf16.h): |y_o - ref_o| <= 1.25 * 2^-8 sum_j |h_j w2[o][j]|.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/bf16_linear_op.h"
#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/expert_ffn_bf16.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_bf16.h"
#include "tests/support/bf16_operands.h"
#include "tests/support/expect_invalid.h"
#include "tests/support/kernel_operands.h"

namespace moe::kernels {
namespace {

using test_util::abs_dot_scale;
using test_util::bf16_linear_bound;
using test_util::bf16_rows;
using test_util::Bf16LinearReference;
using test_util::PaddedRows;
using test_util::random_floats;
using test_util::TestWeights;
using testing::ExpectInvalid;

constexpr double kU = 0x1p-24;  // fp32's unit roundoff

TEST(Bf16Operands, VectorRoundingEqualsF32ToBf16) {
  // Every upper half with low halves at and around the rounding boundaries (and random ones), in runs
  // long enough for the vector body and every masked tail length.
  std::vector<float> v;
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000, 0x1234, 0xfedc};
  for (uint32_t hi = 0; hi < 0x10000; ++hi) {
    for (uint32_t lo : lows) v.push_back(std::bit_cast<float>((hi << 16) | lo));
  }
  std::vector<uint16_t> out(v.size());
  for (int64_t len : {1, 5, 15, 16, 17, 31, 33, 1000}) {
    for (size_t i = 0; i + static_cast<size_t>(len) <= v.size(); i += static_cast<size_t>(len) * 37) {
      round_to_bf16_span(v.data() + i, len, out.data() + i);
      for (int64_t k = 0; k < len; ++k) {
        ASSERT_EQ(out[i + static_cast<size_t>(k)], f32_to_bf16(v[i + static_cast<size_t>(k)]))
            << std::hex << std::bit_cast<uint32_t>(v[i + static_cast<size_t>(k)]);
      }
    }
  }
  round_to_bf16_span(v.data(), static_cast<int64_t>(v.size()), out.data());
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(out[i], f32_to_bf16(v[i])) << i;
}

TEST(Bf16Operands, RowsArePaddedToWholePairs) {
  ThreadPool pool(2);
  const int64_t rows = 300, in = 7, x_stride = 9;
  const auto x = random_floats(static_cast<size_t>(rows * x_stride), 3);
  std::vector<uint16_t> xb(linear_bf16_workspace_elems(rows, in), 0xdead);
  round_rows_to_bf16(x.data(), rows, x_stride, in, xb.data(), pool);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < in; ++i)
      ASSERT_EQ(xb[static_cast<size_t>(r * 8 + i)], f32_to_bf16(x[r * x_stride + i]));
    ASSERT_EQ(xb[static_cast<size_t>(r * 8 + 7)], 0);
  }
}

TEST(Bf16Operands, PackedWeightsHoldTheBf16Values) {
  const TestWeights tw(70, 13, 3, 9);  // 2 panels (the second partly padding), odd reduction
  const PackedBf16Weights from_bf16(tw.view(DType::kBF16)), from_f32(tw.view(DType::kF32));
  EXPECT_EQ(from_bf16.out(), 70);
  EXPECT_EQ(from_bf16.in(), 13);
  EXPECT_EQ(from_bf16.pairs(), 7);
  EXPECT_EQ(from_bf16.panels(), 2);
  EXPECT_EQ(from_bf16.bytes(), size_t{2 * 7 * 64 * 4});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(from_bf16.panel(1)) % 64, 0u);
  for (int64_t o = 0; o < 128; ++o) {
    for (int64_t i = 0; i < 14; ++i) {
      const uint16_t expect = o < 70 && i < 13 ? tw.bf16[static_cast<size_t>(o * tw.stride + i)] : 0;
      ASSERT_EQ(from_bf16.at(o, i), expect) << o << " " << i;
      ASSERT_EQ(from_f32.at(o, i), expect) << o << " " << i;  // fp32 weights round to the same bf16
    }
  }
}

struct Shape {
  int64_t in, out, rows;
};

TEST(LinearBf16, MatchesFloat64OfTheRoundedOperands) {
  ThreadPool pool1(1), pool2(2), pool3(3);
  ThreadPool* pools[] = {&pool1, &pool2, &pool3};
  std::vector<Shape> shapes;
  for (int64_t in : {1, 2, 17, 1000, 1024}) {
    for (int64_t out : {1, 7, 65, 2816}) {
      for (int64_t rows : {0, 1, 5, 64, 200}) {
        if (out == 2816 && rows > 64) continue;  // the oracle is slow
        shapes.push_back({in, out, rows});
      }
    }
  }
  shapes.push_back({2816, 1024, 5});  // the down projection's shape
  shapes.push_back({2816, 130, 40});
  double worst_rel_bound = 0.0, worst = 0.0, worst_unrounded = 0.0;
  for (const Shape& sh : shapes) {
    const int64_t x_stride = sh.in + 3, y_stride = sh.out + 5;
    const TestWeights tw(sh.out, sh.in, sh.in % 2 == 0 ? 0 : 5, static_cast<uint32_t>(sh.in * 31 + sh.out));
    const std::vector<float> xc = random_floats(static_cast<size_t>(sh.rows * sh.in), 7);
    const PaddedRows xp(xc, sh.rows, sh.in, x_stride);
    const float* x = xp.data;

    const Bf16LinearReference rounded(xc, sh.rows, tw);
    const std::vector<double>& ref = rounded.y;
    const std::vector<double>& scale = rounded.scale;
    std::vector<double> ref_unrounded(ref.size());
    linear_reference_f64(xc.data(), sh.rows, tw.view(DType::kF32), ref_unrounded.data());
    const auto scale_unrounded = abs_dot_scale(xc.data(), sh.rows, tw.view(DType::kF32));
    const double bound = bf16_linear_bound(sh.in);
    for (DType dt : {DType::kBF16, DType::kF32}) {  // fp32 weights are rounded when packed: same result
      const PackedBf16Weights w(tw.view(dt));
      for (ThreadPool* pool : pools) {
        std::vector<float> y(static_cast<size_t>(std::max<int64_t>(sh.rows * y_stride, 1)), -77.0f);
        linear_bf16(x, sh.rows, x_stride, w, y.data(), y_stride, nullptr, *pool);
        for (int64_t r = 0; r < sh.rows; ++r) {
          for (int64_t o = 0; o < sh.out; ++o) {
            const size_t k = static_cast<size_t>(r * sh.out + o);
            const double s = std::max(scale[k], 1e-30);
            const double yv = y[static_cast<size_t>(r * y_stride + o)];
            const double e = std::fabs(yv - ref[k]) / s;
            const double tiny = 2.0 * static_cast<double>(bf16_pairs(sh.in)) * 0x1p-126 / s;
            ASSERT_LE(e, bound + tiny) << to_string(dt) << " in=" << sh.in << " out=" << sh.out
                                       << " rows=" << sh.rows << " r=" << r << " o=" << o;
            worst = std::max(worst, e);
            worst_rel_bound = std::max(worst_rel_bound, e / bound);
            // |y - ref_unrounded| <= |y - ref| + |ref - ref_unrounded|, and scale <= (1 + 2^-8)^2
            // scale_unrounded.
            const double su = std::max(scale_unrounded[k], 1e-30);
            const double e2 = std::fabs(yv - ref_unrounded[k]) / su;
            ASSERT_LE(e2, 0x1p-7 + 0x1p-16 + (1 + 0x1p-7 + 0x1p-16) * (bound + tiny));
            worst_unrounded = std::max(worst_unrounded, e2);
          }
          for (int64_t o = sh.out; o < y_stride; ++o)
            ASSERT_EQ(y[static_cast<size_t>(r * y_stride + o)], -77.0f);
        }
      }
    }
  }
  std::printf(
      "linear_bf16: worst |y-ref| / sum|xb wb| %.3g (%.2f of the tested bound 4 sqrt(2P) 2^-24); against the "
      "unrounded fp32 operands %.3g\n",
      worst, worst_rel_bound, worst_unrounded);
}

TEST(LinearBf16, PortablePathMatchesReference) {
  const TestWeights tw(37, 70, 2, 3);
  const auto x = random_floats(9 * 70, 4);
  ThreadPool pool(1);
  const std::vector<uint16_t> xb = bf16_rows(x.data(), 9, 70, pool);
  const Bf16LinearReference ref(x, 9, tw);
  std::vector<float> y(9 * 37);
  linear_bf16_rounded_portable(xb.data(), 9, PackedBf16Weights(tw.view(DType::kBF16)), y.data(), 37);
  for (size_t k = 0; k < y.size(); ++k)
    EXPECT_LE(std::fabs(y[k] - ref.y[k]) / ref.scale[k], bf16_linear_bound(70));
}

TEST(LinearBf16, EmptyShapes) {
  ThreadPool pool(2);
  const float dummy = 0.0f;
  const PackedBf16Weights w(MatrixView{&dummy, DType::kF32, 3, 0, 0});
  std::vector<float> y(6, 5.0f);
  linear_bf16(&dummy, 2, 0, w, y.data(), 3, nullptr, pool);
  for (float v : y) EXPECT_EQ(v, 0.0f);
  linear_bf16(nullptr, 0, 0, w, nullptr, 3, nullptr, pool);  // no rows: nothing to do
}

TEST(LinearBf16, BadInputThrows) {
  ThreadPool pool(1);
  const TestWeights tw(4, 8, 0, 1);
  const PackedBf16Weights w(tw.view(DType::kBF16));
  std::vector<float> x(16), y(8);
  ExpectInvalid([&] { linear_bf16(x.data(), -1, 8, w, y.data(), 4, nullptr, pool); }, "negative");
  ExpectInvalid([&] { linear_bf16(x.data(), 2, 7, w, y.data(), 4, nullptr, pool); }, "x_stride");
  ExpectInvalid([&] { linear_bf16(x.data(), 2, 8, w, y.data(), 3, nullptr, pool); }, "y_stride");
  ExpectInvalid([&] { linear_bf16(nullptr, 2, 8, w, y.data(), 4, nullptr, pool); }, "x is null");
  ExpectInvalid([&] { linear_bf16(x.data(), 2, 8, w, nullptr, 4, nullptr, pool); }, "y is null");
  const uint16_t h = 0;
  ExpectInvalid([&] { PackedBf16Weights(MatrixView{&h, DType::kF16, 1, 1, 1}); }, "dtype");
  ExpectInvalid([&] { PackedBf16Weights(MatrixView{&h, DType::kBF16, 1, 2, 1}); }, "row_stride");
}

// An FFN case's random operands (seeds seed + 1 ... seed + 7) and its weights under an activation: gpt-oss's
// clamped SwiGLU gets biases everywhere and a limit that clamps often.
struct FfnOperands {
  TestWeights w1, w3, w2;
  std::vector<float> x, b1, b3, b2;
  FfnOperands(int64_t d, int64_t ff, int64_t rows, uint32_t seed)
      : w1(ff, d, 0, seed + 1),
        w3(ff, d, 1, seed + 2),
        w2(d, ff, 3, seed + 3),
        x(random_floats(static_cast<size_t>(rows * d), seed + 4, -2.0f, 2.0f)),
        b1(random_floats(static_cast<size_t>(ff), seed + 5, -0.5f, 0.5f)),
        b3(random_floats(static_cast<size_t>(ff), seed + 6, -0.5f, 0.5f)),
        b2(random_floats(static_cast<size_t>(d), seed + 7, -0.05f, 0.05f)) {}
  FfnWeights weights(Activation act, DType dt) const {
    FfnWeights fw{w1.view(dt), w3.view(dt), w2.view(dt)};
    if (act == Activation::kClampedSwiGLU) {
      fw.b1 = b1.data();
      fw.b3 = b3.data();
      fw.b2 = b2.data();
      fw.swiglu_limit = 0.75f;
    }
    return fw;
  }
};

TEST(FfnBf16, MatchesFloat64WithinTheRoundingOfH) {
  ThreadPool pool1(1), pool2(2);
  struct Case {
    int64_t d, ff, rows;
  };
  double worst = 0.0, worst_norm = 0.0;
  for (const Case& c : {Case{1, 1, 3}, Case{17, 33, 20}, Case{256, 704, 9}, Case{1024, 2816, 2}}) {
    const FfnOperands ops(c.d, c.ff, c.rows, 10);
    const std::vector<float>& x = ops.x;
    for (Activation act : {Activation::kSwiGLU, Activation::kGELU, Activation::kClampedSwiGLU}) {
      for (DType dt : {DType::kBF16, DType::kF32}) {
        const FfnWeights fw = ops.weights(act, dt);
        const PackedFfnBf16 w(act, fw);
        std::vector<double> ref(static_cast<size_t>(c.rows * c.d)), scale(ref.size());
        ffn_bf16_reference_f64(act, x.data(), c.rows, fw, ref.data(), scale.data());
        for (ThreadPool* pool : {&pool1, &pool2}) {
          std::vector<float> y(ref.size()), scratch(ffn_bf16_scratch_floats(c.rows, c.d, c.ff) + 1);
          ffn_bf16_forward(x.data(), c.rows, c.d, w, y.data(), c.d, scratch.data() + 1, *pool);  // misaligned
          double err2 = 0.0, ref2 = 0.0;
          for (size_t k = 0; k < y.size(); ++k) {
            const double e = std::fabs(y[k] - ref[k]);
            ASSERT_LE(e, 1.25 * 0x1p-8 * scale[k] + 1e-30) << "d=" << c.d << " ff=" << c.ff << " k=" << k;
            worst = std::max(worst, e / std::max(scale[k], 1e-30));
            err2 += e * e;
            ref2 += ref[k] * ref[k];
          }
          if (c.ff >= 704) worst_norm = std::max(worst_norm, std::sqrt(err2 / ref2));
        }
      }
    }
  }
  std::printf(
      "ffn_bf16: worst |y-ref| / sum_j|h_j w2_oj| %.3g (bound 1.25 * 2^-8 = %.3g); ||y-ref|| / ||ref|| "
      "%.3g\n",
      worst, 1.25 * 0x1p-8, worst_norm);
}

// The oracle's contract on the rounding of h (expert_ffn_bf16.h), for both kinds of bf16 linear: every
// element of the kernel's bf16(h) is the oracle's rounding of the exact h, except the elements it reports as
// undetermined, whose kernel value lies in their [lo, hi]; and then the kernel's y equals the oracle's y
// with the kernel's own values of the undetermined elements substituted, within the fp32 error of the down
// projection alone.
TEST(FfnBf16, HiddenRoundsAsTheOracleSaysItMay) {
  ThreadPool pool(1);
  struct Case {
    int64_t d, ff, rows;
  };
  int64_t elements = 0, undetermined = 0, other_way = 0;
  double worst = 0.0;
  for (const Case& c : {Case{17, 33, 40}, Case{64, 32, 400}, Case{256, 704, 9}}) {
    const FfnOperands ops(c.d, c.ff, c.rows, 20);
    const std::vector<float>& x = ops.x;
    for (Activation act : {Activation::kSwiGLU, Activation::kGELU, Activation::kClampedSwiGLU}) {
      const FfnWeights fw = ops.weights(act, DType::kBF16);
      std::vector<double> ref(static_cast<size_t>(c.rows * c.d)), scale(ref.size());
      std::vector<double> hidden(static_cast<size_t>(c.rows * c.ff));
      std::vector<UndeterminedHidden> choices;
      ffn_bf16_reference_f64(act, x.data(), c.rows, fw, ref.data(), scale.data(), /*round_hidden=*/true,
                             &choices, hidden.data());
      std::vector<char> is_choice(hidden.size(), 0);
      for (const UndeterminedHidden& u : choices) is_choice[static_cast<size_t>(u.row * c.ff + u.j)] = 1;
      elements += c.rows * c.ff;
      undetermined += static_cast<int64_t>(choices.size());
      // x rounded as ffn_bf16_forward rounds it.
      const std::vector<uint16_t> xb = bf16_rows(x.data(), c.rows, c.d, pool);
      for (const Bf16LinearMaker& make :
           {Bf16LinearMaker(make_invariant_bf16_linear), Bf16LinearMaker(make_eigen_bf16_linear)}) {
        const PackedFfnBf16 w(act, fw, make);
        std::vector<float> y(ref.size()), scratch(ffn_bf16_scratch_floats(c.rows, c.d, c.ff));
        ffn_bf16_forward(x.data(), c.rows, c.d, w, y.data(), c.d, scratch.data(), pool);
        // The kernel's h, by the steps of ffn_bf16_forward.
        std::vector<float> h1(static_cast<size_t>(c.rows * c.ff)), h3(h1.size());
        w.w1->forward_rounded(xb.data(), c.rows, h1.data(), c.ff, pool);
        if (w.w3) w.w3->forward_rounded(xb.data(), c.rows, h3.data(), c.ff, pool);
        for (int64_t r = 0; r < c.rows; ++r) {
          add_bias(&h1[static_cast<size_t>(r * c.ff)], fw.b1, c.ff);
          add_bias(&h3[static_cast<size_t>(r * c.ff)], fw.b3, c.ff);
          activate_row(act, fw, &h1[static_cast<size_t>(r * c.ff)], &h3[static_cast<size_t>(r * c.ff)],
                       &h1[static_cast<size_t>(r * c.ff)], c.ff);
        }
        for (size_t k = 0; k < hidden.size(); ++k) {
          if (is_choice[k]) continue;
          ASSERT_EQ(round_to_bf16(h1[k]), hidden[k]) << "d=" << c.d << " ff=" << c.ff << " k=" << k;
        }
        std::vector<double> want = ref;
        for (const UndeterminedHidden& u : choices) {
          const double kernel = round_to_bf16(h1[static_cast<size_t>(u.row * c.ff + u.j)]);
          ASSERT_GE(kernel, u.lo) << "row " << u.row << " j " << u.j;
          ASSERT_LE(kernel, u.hi) << "row " << u.row << " j " << u.j;
          if (kernel != u.rounded) ++other_way;
          for (int64_t o = 0; o < c.d; ++o)
            want[static_cast<size_t>(u.row * c.d + o)] +=
                (kernel - u.rounded) * u.down[static_cast<size_t>(o)];
        }
        for (size_t k = 0; k < y.size(); ++k) {
          // The down projection's chain (linear_bf16.h's worst case, any order) and the add of b2.
          const double n = 2.0 * static_cast<double>(bf16_pairs(c.ff)) + 1.0;
          const double bound =
              n * kU * (scale[k] + (fw.b2 ? std::fabs(fw.b2[k % static_cast<size_t>(c.d)]) : 0.0));
          ASSERT_LE(std::fabs(y[k] - want[k]), bound + 1e-30) << "d=" << c.d << " ff=" << c.ff << " k=" << k;
          worst = std::max(worst, std::fabs(y[k] - want[k]) / std::max(bound, 1e-30));
        }
      }
    }
  }
  std::printf(
      "ffn_bf16: %lld of %lld elements of h undetermined by the contract, %lld rounded the other way by "
      "a kernel; worst |y - ref| %.3g of the down projection's bound\n",
      static_cast<long long>(undetermined), static_cast<long long>(elements),
      static_cast<long long>(other_way), worst);
}

TEST(FfnBf16, BadInputThrows) {
  ThreadPool pool(1);
  const TestWeights w1(8, 4, 0, 1), w3(8, 4, 0, 2), w2(4, 8, 0, 3), bad(5, 4, 0, 4);
  ExpectInvalid(
      [&] {
        PackedFfnBf16(Activation::kSwiGLU,
                      FfnWeights{w1.view(DType::kBF16), bad.view(DType::kBF16), w2.view(DType::kBF16)});
      },
      "w3");
  const PackedFfnBf16 w(Activation::kSwiGLU,
                        FfnWeights{w1.view(DType::kBF16), w3.view(DType::kBF16), w2.view(DType::kBF16)});
  std::vector<float> x(8), y(8), scratch(ffn_bf16_scratch_floats(2, 4, 8));
  ExpectInvalid([&] { ffn_bf16_forward(x.data(), -1, 4, w, y.data(), 4, scratch.data(), pool); }, "negative");
  ExpectInvalid([&] { ffn_bf16_forward(x.data(), 2, 3, w, y.data(), 4, scratch.data(), pool); }, "stride");
  ExpectInvalid([&] { ffn_bf16_forward(x.data(), 2, 4, w, y.data(), 4, nullptr, pool); }, "scratch");
  const std::vector<uint16_t> xb(8);
  ExpectInvalid([&] { ffn_bf16_forward_rounded(xb.data(), -1, w, y.data(), 4, scratch.data(), pool); },
                "negative");
  ExpectInvalid([&] { ffn_bf16_forward_rounded(xb.data(), 2, w, y.data(), 3, scratch.data(), pool); },
                "y_stride");
  ExpectInvalid([&] { ffn_bf16_forward_rounded(nullptr, 2, w, y.data(), 4, scratch.data(), pool); }, "null");
  ExpectInvalid([&] { ffn_bf16_forward_rounded(xb.data(), 2, w, y.data(), 4, nullptr, pool); }, "scratch");
}

}  // namespace
}  // namespace moe::kernels

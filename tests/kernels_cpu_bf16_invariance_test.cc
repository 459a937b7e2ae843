// Determinism of the bf16-compute kernels (linear_bf16.h, expert_ffn_bf16.h), compared bit for bit
// (memcmp), never with a tolerance: every row computed in a batch of N (up to 512) equals the row computed
// alone, in a shuffled batch, in prefixes of the batch, with 1, 2 or 3 threads, other strides and
// misaligned buffers, and on repeated runs; and each contract's portable scalar emulation gives the same bits
// as its hardware kernels (vdpbf16ps and FMA for the pair contract, AMX for the tile contract), also on
// subnormals, infinities and NaNs.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/expert_ffn_bf16.h"
#include "kernels/cpu/linear_bf16.h"
#include "tests/support/batch_invariance.h"
#include "tests/support/bf16_operands.h"
#include "tests/support/kernel_operands.h"

namespace moe::kernels {
namespace {

using test_util::bf16_rows;
using test_util::check_batch_invariance;
using test_util::check_ffn_batch_invariance;
using test_util::random_floats;
using test_util::TestWeights;
using test_util::wide_range_values;

using test_util::kBigRows;

TEST(LinearBf16Invariant, BatchInvariantBits) {
  struct Case {
    int64_t in, out, n;
  };
  for (const Case& c : {Case{1, 7, 37}, Case{17, 33, 130}, Case{33, 130, 200}, Case{1000, 70, 512},
                        Case{1024, 2816, kBigRows}, Case{2816, 1024, 96}}) {
    const TestWeights tw(c.out, c.in, c.in % 2 ? 1 : 0, static_cast<uint32_t>(c.in + c.out));
    for (DType dt : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(testing::Message() << "in=" << c.in << " out=" << c.out << " " << to_string(dt));
      const PackedBf16Weights w(tw.view(dt));
      check_batch_invariance([&](const float* x, int64_t rows, int64_t xs, float* y, int64_t ys,
                                 ThreadPool& pool) { linear_bf16(x, rows, xs, w, y, ys, nullptr, pool); },
                             c.in, c.out, c.n, 17, c.in * c.out > 1000000 ? 40 : c.n);
    }
  }
}

TEST(LinearBf16Invariant, CallerWorkspaceGivesSameBits) {
  ThreadPool pool(2);
  const TestWeights tw(130, 77, 0, 5);
  const PackedBf16Weights w(tw.view(DType::kBF16));
  const auto x = random_floats(40 * 77, 6, -2.0f, 2.0f);
  std::vector<float> a(40 * 130), b(a.size());
  std::vector<uint16_t> ws(linear_bf16_workspace_elems(40, 77));
  linear_bf16(x.data(), 40, 77, w, a.data(), 130, nullptr, pool);
  linear_bf16(x.data(), 40, 77, w, b.data(), 130, ws.data(), pool);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// Every hardware implementation this CPU has (pair contract: vdpbf16ps, fp32 FMA under DAZ/FTZ; tile
// contract: fp32 FMA, AMX, whose products of 1-2 rows run the FMA code) against the scalar emulation of its
// contract, and the one linear_bf16 dispatches to against the emulation of the process's contract.
TEST(LinearBf16Invariant, PortablePathGivesSameBits) {
  std::vector<Bf16Kernel> kernels;
  for (Bf16Kernel k :
       {Bf16Kernel::kAvx512Fma, Bf16Kernel::kAvx512Dpbf16, Bf16Kernel::kAvx512FmaTile, Bf16Kernel::kAmx}) {
    if (bf16_kernel_available(k)) kernels.push_back(k);
  }
  std::printf("linear_bf16 dispatches to the '%s' kernel (%s contract) here\n",
              to_string(linear_bf16_kernel()), to_string(linear_bf16_contract()));
  if (!bf16_kernel_available(Bf16Kernel::kAvx512Dpbf16)) {
    std::printf(
        "this CPU has no AVX512_BF16 (vdpbf16ps): the emulation-vs-vdpbf16ps comparison is skipped\n");
  }
  if (!bf16_kernel_available(Bf16Kernel::kAmx)) {
    std::printf("this CPU (or OS) has no AMX-BF16: the tile emulation-vs-AMX comparison is skipped\n");
  }
  if (kernels.empty()) {
    GTEST_SKIP()
        << "this CPU has no AVX-512 and no AMX: linear_bf16 runs a portable emulation, so there is no "
           "hardware kernel to compare it with";
  }
  ThreadPool pool(2);
  for (bool specials : {false, true}) {
    for (int64_t in : {1, 2, 3, 31, 32, 33, 100, 1024}) {
      for (int64_t out : {1, 15, 16, 17, 64, 65, 130}) {
        for (int64_t rows : {1, 2, 7, 13, 100}) {
          if (rows == 100 && in * out > 20000) continue;
          const auto wf =
              wide_range_values(static_cast<size_t>(out * in), static_cast<uint32_t>(in * out), specials);
          std::vector<uint16_t> wb(wf.size());
          f32_to_bf16(wf.data(), wb.data(), wf.size());
          const PackedBf16Weights w(MatrixView{wb.data(), DType::kBF16, out, in, in});
          const auto x =
              wide_range_values(static_cast<size_t>(rows * in), static_cast<uint32_t>(rows + in), specials);
          const std::vector<uint16_t> xb = bf16_rows(x.data(), rows, in, pool);
          std::vector<float> a(static_cast<size_t>(rows * out)), b(a.size()), b_other(a.size());
          linear_bf16_rounded_portable(xb.data(), rows, w, b.data(), out);
          linear_bf16_rounded(xb.data(), rows, w, a.data(), out, pool);
          ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
              << "dispatched kernel, in=" << in << " out=" << out << " rows=" << rows
              << " specials=" << specials;
          const Bf16Contract other =
              linear_bf16_contract() == Bf16Contract::kPair ? Bf16Contract::kTile : Bf16Contract::kPair;
          linear_bf16_rounded_portable(xb.data(), rows, w, b_other.data(), out, other);
          for (Bf16Kernel k : kernels) {
            std::fill(a.begin(), a.end(), -1.0f);
            linear_bf16_rounded_with(k, xb.data(), rows, w, a.data(), out, pool);
            const std::vector<float>& ref = bf16_kernel_contract(k) == linear_bf16_contract() ? b : b_other;
            ASSERT_EQ(0, std::memcmp(a.data(), ref.data(), a.size() * sizeof(float)))
                << to_string(k) << " kernel, in=" << in << " out=" << out << " rows=" << rows
                << " specials=" << specials;
          }
        }
      }
    }
  }
}

TEST(FfnBf16Invariant, BatchInvariantBits) {
  check_ffn_batch_invariance([](const FfnWeights& fw, Activation act, int64_t max_rows) -> test_util::Op {
    const auto w = std::make_shared<const PackedFfnBf16>(act, fw);
    const auto scratch =
        std::make_shared<std::vector<float>>(ffn_bf16_scratch_floats(max_rows, fw.w1.cols, fw.w1.rows));
    return [w, scratch](const float* x, int64_t rows, int64_t xs, float* y, int64_t ys, ThreadPool& pool) {
      ffn_bf16_forward(x, rows, xs, *w, y, ys, scratch->data(), pool);
    };
  });
}

// The layer rounds each token once and hands the experts bf16 rows: the rounded entry must give the bits of
// the fp32 one, including the zero pair element past an odd d, with and without specials in x.
TEST(FfnBf16Invariant, RoundedEntryGivesTheSameBits) {
  ThreadPool pool(2);
  for (const int64_t d : {int64_t{17}, int64_t{64}}) {
    const int64_t ff = 3 * d + 1, rows = 37;
    const TestWeights w1(ff, d, 0, 1), w3(ff, d, 2, 2), w2(d, ff, 0, 3);
    for (Activation act : {Activation::kSwiGLU, Activation::kGELU}) {
      const PackedFfnBf16 w(act,
                            FfnWeights{w1.view(DType::kBF16), w3.view(DType::kBF16), w2.view(DType::kBF16)});
      std::vector<float> x(static_cast<size_t>(rows * d));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
      x[5] = std::numeric_limits<float>::infinity();
      x[static_cast<size_t>(d + 2)] = -0.0f;
      x[static_cast<size_t>(2 * d + 1)] = 1e-40f;  // subnormal
      std::vector<uint16_t> xb(static_cast<size_t>(rows * 2 * bf16_pairs(d)), 0xffff);
      round_rows_to_bf16(x.data(), rows, d, d, xb.data(), pool);
      std::vector<float> scratch(ffn_bf16_scratch_floats(rows, d, ff) + 3);  // + 3: offset start below
      std::vector<float> a(static_cast<size_t>(rows * d), -1.0f), b(a.size(), -2.0f);
      ffn_bf16_forward(x.data(), rows, d, w, a.data(), d, scratch.data(), pool);
      ffn_bf16_forward_rounded(xb.data(), rows, w, b.data(), d, scratch.data() + 3, pool);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
          << "d=" << d << (act == Activation::kGELU ? " gelu" : " swiglu");
    }
  }
}

// A range of panels on the calling thread writes the bits of the whole product, for every 3-way cut (what
// the FFN's fused gate / up pass relies on); bad ranges and whole-product-only ops throw.
TEST(LinearBf16Invariant, PanelRangesEqualTheWholeProduct) {
  ThreadPool pool(1);
  const int64_t in = 33, out = 4 * kBf16PanelOutputs + 5;  // 5 panels, the last one partial; odd `in`
  const TestWeights tw(out, in, 1, 41);
  const InvariantBf16Linear w(tw.view(DType::kBF16));
  ASSERT_EQ(w.panels(), 5);
  for (const int64_t rows : {int64_t{1}, int64_t{7}}) {
    const auto x = random_floats(static_cast<size_t>(rows * in), 43, -2.0f, 2.0f);
    const std::vector<uint16_t> xb = bf16_rows(x.data(), rows, in, pool);
    std::vector<float> whole(static_cast<size_t>(rows * out)), cut(whole.size());
    w.forward_rounded(xb.data(), rows, whole.data(), out, pool);
    for (int64_t a = 0; a <= w.panels(); ++a) {
      for (int64_t b = a; b <= w.panels(); ++b) {
        std::fill(cut.begin(), cut.end(), -1.0f);
        w.forward_rounded_panels(xb.data(), rows, 0, a, cut.data(), out);
        w.forward_rounded_panels(xb.data(), rows, a, b, cut.data(), out);
        w.forward_rounded_panels(xb.data(), rows, b, w.panels(), cut.data(), out);
        ASSERT_EQ(0, std::memcmp(cut.data(), whole.data(), whole.size() * sizeof(float)))
            << "rows " << rows << ", cuts at panels " << a << " and " << b;
      }
    }
  }
  const std::vector<uint16_t> xb(static_cast<size_t>(2 * bf16_pairs(in)), 0);
  std::vector<float> y(static_cast<size_t>(out));
  EXPECT_THROW(w.forward_rounded_panels(xb.data(), 1, 3, 6, y.data(), out), std::invalid_argument);
  EXPECT_THROW(w.forward_rounded_panels(xb.data(), 1, 4, 3, y.data(), out), std::invalid_argument);
  EXPECT_THROW(w.forward_rounded_panels(xb.data(), 1, -1, 2, y.data(), out), std::invalid_argument);
  const auto fast = make_eigen_bf16_linear(tw.view(DType::kBF16));
  EXPECT_EQ(fast->panels(), 0);
  EXPECT_THROW(fast->forward_rounded_panels(xb.data(), 1, 0, 0, y.data(), out), std::invalid_argument);
}

// The invariant kernel behind an op that offers no panel ranges: the FFN then runs its gate and up products
// whole and the activation after them, the path the fused pass replaces.
class WholeProductsOnly final : public Bf16LinearOp {
 public:
  explicit WholeProductsOnly(const MatrixView& w) : op_(w) {}
  KernelKind kind() const override { return KernelKind::kInvariant; }
  int64_t out() const override { return op_.out(); }
  int64_t in() const override { return op_.in(); }
  size_t weight_bytes() const override { return op_.weight_bytes(); }
  void forward_rounded(const uint16_t* xb, int64_t rows, float* y, int64_t y_stride,
                       ThreadPool& pool) const override {
    op_.forward_rounded(xb, rows, y, y_stride, pool);
  }

 private:
  InvariantBf16Linear op_;
};

// The fused gate / up / activation pass gives the bits of the unfused one, with biases, an odd ff (the
// zero pair element of the rounded hidden row) and every thread count's cut of the panels.
TEST(FfnBf16Invariant, FusedGateUpPassEqualsTheUnfusedOne) {
  const int64_t d = 40, ff = 3 * kBf16PanelOutputs + 11, rows = 9;
  const TestWeights w1(ff, d, 0, 51), w3(ff, d, 0, 52), w2(d, ff, 0, 53);
  const auto b1 = random_floats(static_cast<size_t>(ff), 54, -1.0f, 1.0f);
  const auto b3 = random_floats(static_cast<size_t>(ff), 55, -1.0f, 1.0f);
  const auto b2 = random_floats(static_cast<size_t>(d), 56, -1.0f, 1.0f);
  const auto x = random_floats(static_cast<size_t>(rows * d), 57, -2.0f, 2.0f);
  for (Activation act : {Activation::kSwiGLU, Activation::kClampedSwiGLU}) {
    FfnWeights fw{w1.view(DType::kBF16), w3.view(DType::kBF16), w2.view(DType::kBF16)};
    fw.b1 = b1.data();
    fw.b3 = b3.data();
    fw.b2 = b2.data();
    const PackedFfnBf16 fused(act, fw);
    const PackedFfnBf16 unfused(act, fw,
                                [](const MatrixView& m) { return std::make_unique<WholeProductsOnly>(m); });
    std::vector<float> scratch(ffn_bf16_scratch_floats(rows, d, ff));
    std::vector<float> want(static_cast<size_t>(rows * d)), got(want.size());
    ThreadPool one(1);
    ffn_bf16_forward(x.data(), rows, d, unfused, want.data(), d, scratch.data(), one);
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::fill(got.begin(), got.end(), -1.0f);
      ffn_bf16_forward(x.data(), rows, d, fused, got.data(), d, scratch.data(), pool);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
          << (act == Activation::kSwiGLU ? "swiglu" : "clamped swiglu") << ", " << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace moe::kernels

// Determinism of the quantized kernels (kernels/cpu/linear_quant.h, expert_ffn_quant.h), compared bit for bit
// (memcmp), never with a tolerance: every row computed in a batch equals the row computed alone, in a
// shuffled batch, in prefixes of the batch, with 1, 2 or 3 threads, other strides and misaligned buffers (the
// shared battery, tests/support/batch_invariance.h); every implementation this CPU has gives the bits of the
// scalar emulation, on random blocks of every code and on rows of zeros, infinities, NaN and extreme
// magnitudes; and a mutation check: the contract's block chain recomputed here in another order (descending,
// or pairwise) differs from the kernels' bits, so the comparisons above would catch a kernel that combined
// blocks so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/expert_ffn_quant.h"
#include "kernels/cpu/linear_quant.h"
#include "kernels/quant_formats.h"
#include "tests/support/batch_invariance.h"
#include "tests/support/quant_operands.h"

namespace moe::kernels {
namespace {

using test_util::check_batch_invariance;
using test_util::kQuantTypes;
using test_util::QuantWeights;
using test_util::random_floats;

// in a multiple of 256 (every format's block); FP8 also at a width its 128-wide blocks do not divide.
int64_t in_for(DType t, int64_t in) {
  return t == DType::kFP8 ? in + 70 : in;
}

TEST(QuantLinearInvariant, BatchInvariantBits) {
  struct Case {
    int64_t in, out, n, singles;
  };
  for (DType t : kQuantTypes) {
    for (const Case& c : {Case{256, 37, 70, 70}, Case{1024, 300, test_util::kBigRows / 4, 20}}) {
      const int64_t in = in_for(t, c.in);
      SCOPED_TRACE(::testing::Message() << to_string(t) << " in=" << in << " out=" << c.out);
      const QuantWeights qw(t, c.out, in, static_cast<uint32_t>(in + c.out));
      const QuantLinear w(qw.view, "w");
      check_batch_invariance([&](const float* x, int64_t rows, int64_t xs, float* y, int64_t ys,
                                 ThreadPool& pool) { w.forward(x, rows, xs, y, ys, nullptr, pool); },
                             in, c.out, c.n, 11, c.singles);
    }
  }
}

// Rows that stress the activation rule and the chain: zeros, a lone huge or tiny element, infinities, NaN,
// alternating extremes, then random rows of several magnitudes.
std::vector<float> special_rows(int64_t in, int64_t rows, uint32_t seed) {
  std::vector<float> x = random_floats(static_cast<size_t>(in * rows), seed, -2.0f, 2.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x.data() + r * in;
    switch (r % 9) {
      case 0:
        std::fill_n(xr, in, 0.0f);
        break;
      case 1:
        xr[r % in] = 3e38f;
        break;
      case 2:
        for (int64_t i = 0; i < in; ++i) xr[i] *= 1e-38f;
        break;
      case 3:
        xr[(r * 7) % in] = inf;
        break;
      case 4:
        xr[(r * 5) % in] = std::nanf("");
        break;
      case 5:
        for (int64_t i = 0; i < in; ++i) xr[i] = i % 2 ? 1e20f : -1e20f;
        break;
      case 6:
        for (int64_t i = 0; i < in; ++i) xr[i] *= 1e6f;
        break;
      default:
        break;
    }
  }
  return x;
}

TEST(QuantLinearInvariant, EveryKernelEqualsTheEmulation) {
  ThreadPool pool(2);
  const QuantKernel kernels[] = {QuantKernel::kAvx512, QuantKernel::kAvxVnni};
  struct Case {
    DType type;
    int32_t fp8_block;  // FP8 only: blocks of fp8_block x fp8_block (odd pairs per block at 6 and 10; several
                        // scale rows within a panel of 16 outputs)
  };
  std::vector<Case> cases;
  for (DType t : kQuantTypes) cases.push_back({t, 128});
  cases.push_back({DType::kFP8, 6});
  cases.push_back({DType::kFP8, 10});
  for (const Case& c : cases) {
    const DType t = c.type;
    for (bool random_bytes : {false, true}) {
      // 70 rows: row groups of every kernel and the remainders, and two row chunks (kChunkRows = 64).
      const int64_t in = in_for(t, 512), out = 45, rows = 70;
      SCOPED_TRACE(::testing::Message() << to_string(t) << (t == DType::kFP8 ? " block " : "")
                                        << (t == DType::kFP8 ? std::to_string(c.fp8_block) : "")
                                        << (random_bytes ? " random blocks" : " quantized"));
      const QuantWeights qw(t, out, in, 5, random_bytes, 1, c.fp8_block);
      const QuantLinear w(qw.view, "w");
      const std::vector<float> x = special_rows(in, rows, 9);
      // The activation rule: the fastest code equals the emulation byte for byte.
      const QuantRowLayout l = quant_row_layout(w.rule(), in);
      std::vector<std::byte> xq(l.stride * rows + 64), xq_ref(l.stride * rows);
      std::byte* xa = xq.data();
      while (reinterpret_cast<uintptr_t>(xa) % 64 != 0) ++xa;
      quantize_rows(w.rule(), x.data(), rows, in, in, xa, pool);
      quantize_rows_portable(w.rule(), x.data(), rows, in, in, xq_ref.data());
      ASSERT_EQ(std::memcmp(xa, xq_ref.data(), xq_ref.size()), 0) << "quantize_rows";
      std::vector<float> ref(static_cast<size_t>(rows * out)), y(ref.size());
      w.forward_quantized_with(QuantKernel::kPortable, xa, rows, ref.data(), out, pool);
      int compared = 0;
      for (QuantKernel k : kernels) {
        if (!quant_kernel_covers(k, t)) {
          std::printf(
              "  [%s] %s: not on this CPU, or no code of its own for this type (the emulation): skipped\n",
              std::string(to_string(t)).c_str(), to_string(k));
          continue;
        }
        for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, rows}) {
          std::fill(y.begin(), y.end(), -1.0f);
          w.forward_quantized_with(k, xa, m, y.data(), out, pool);
          ASSERT_EQ(std::memcmp(y.data(), ref.data(), static_cast<size_t>(m * out) * sizeof(float)), 0)
              << to_string(k) << " rows " << m;
        }
        ++compared;
      }
      if (!random_bytes)
        std::printf("  [%s] %d SIMD kernels equal the emulation\n", std::string(to_string(t)).c_str(),
                    compared);
    }
  }
}

// forward_quantized_panels over any cut of the panels (what a caller splitting the outputs over its own
// threads runs, as the quantized FFN does) gives forward_quantized's bits; FP8's ranges that begin or end
// inside a strip of 4 panels take its one-panel path.
TEST(QuantLinearInvariant, PanelRangesEqualTheWholeProduct) {
  ThreadPool pool(1);
  for (DType t : kQuantTypes) {
    const int64_t in = in_for(t, 256), out = 16 * 9 + 5, rows = 5;  // 10 panels: strips 4 + 4 + 2 (FP8)
    SCOPED_TRACE(to_string(t));
    const QuantWeights qw(t, out, in, 31);
    const QuantLinear w(qw.view, "w");
    ASSERT_EQ(w.panels(), 10);
    const std::vector<float> x = special_rows(in, rows, 17);
    std::vector<std::byte> xq(w.workspace_bytes(rows) + 64);
    std::byte* xa = xq.data();
    while (reinterpret_cast<uintptr_t>(xa) % 64 != 0) ++xa;
    quantize_rows(w.rule(), x.data(), rows, in, in, xa, pool);
    for (int64_t m : {int64_t{1}, rows}) {
      std::vector<float> whole(static_cast<size_t>(m * out)), cut(whole.size());
      w.forward_quantized(xa, m, whole.data(), out, pool);
      for (int64_t a = 0; a <= w.panels(); ++a) {
        for (int64_t b = a; b <= w.panels(); ++b) {
          std::fill(cut.begin(), cut.end(), -1.0f);
          w.forward_quantized_panels(xa, m, 0, a, cut.data(), out);
          w.forward_quantized_panels(xa, m, a, b, cut.data(), out);
          w.forward_quantized_panels(xa, m, b, w.panels(), cut.data(), out);
          ASSERT_EQ(std::memcmp(cut.data(), whole.data(), whole.size() * sizeof(float)), 0)
              << "rows " << m << ", cuts at panels " << a << " and " << b;
        }
      }
    }
    std::vector<float> y(static_cast<size_t>(out));
    EXPECT_THROW(w.forward_quantized_panels(xa, 1, 3, 11, y.data(), out), std::invalid_argument);
    EXPECT_THROW(w.forward_quantized_panels(xa, 1, 4, 3, y.data(), out), std::invalid_argument);
  }
}

// --- mutation check --------------------------------------------------------------------------------------

// The (I, s) terms of one Q8_0 output (I exact, s = f16(d) * dx), written here from the formats' definitions.
std::vector<std::pair<float, float>> q8_0_terms(const MatrixView& w, int64_t o, const std::byte* xq,
                                                int64_t in) {
  const QuantRowLayout l = quant_row_layout(QuantRule::kInt8Block32, in);
  const auto* q = reinterpret_cast<const int8_t*>(xq + l.q);
  const auto* dx = reinterpret_cast<const float*>(xq + l.dx);
  std::vector<std::pair<float, float>> terms;
  const auto* row = reinterpret_cast<const uint8_t*>(view_row(w, o));
  for (int64_t b = 0; b < in / 32; ++b) {
    uint16_t d;
    std::memcpy(&d, row + 34 * b, 2);
    int dot = 0;
    for (int i = 0; i < 32; ++i) dot += static_cast<int8_t>(row[34 * b + 2 + i]) * q[32 * b + i];
    terms.emplace_back(static_cast<float>(dot), f16_to_f32(d) * dx[b]);
  }
  return terms;
}

float chain(const std::vector<std::pair<float, float>>& t, bool descending) {
  float acc = 0.0f;
  for (size_t k = 0; k < t.size(); ++k) {
    const auto& [i, s] = t[descending ? t.size() - 1 - k : k];
    acc = std::fma(i, s, acc);
  }
  return acc;
}

float pairwise(const std::vector<std::pair<float, float>>& t, size_t lo, size_t hi) {
  if (hi - lo == 1) return t[lo].first * t[lo].second;
  const size_t mid = (lo + hi) / 2;
  return pairwise(t, lo, mid) + pairwise(t, mid, hi);
}

TEST(QuantLinearInvariant, AChangedBlockOrderIsCaught) {
  ThreadPool pool(1);
  const int64_t in = 2048, out = 64, rows = 16;
  const QuantWeights qw(DType::kQ8_0, out, in, 21);
  const QuantLinear w(qw.view, "w");
  const std::vector<float> x = random_floats(static_cast<size_t>(rows * in), 4, -2.0f, 2.0f);
  const size_t stride = quant_row_layout(QuantRule::kInt8Block32, in).stride;
  std::vector<std::byte> xq(stride * rows + 64);
  std::byte* xa = xq.data();
  while (reinterpret_cast<uintptr_t>(xa) % 64 != 0) ++xa;
  quantize_rows_portable(QuantRule::kInt8Block32, x.data(), rows, in, in, xa);
  std::vector<float> y(static_cast<size_t>(rows * out));
  w.forward(x.data(), rows, in, y.data(), out, nullptr, pool);
  int same_ascending = 0, differ_descending = 0, differ_pairwise = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      const auto terms = q8_0_terms(qw.view, o, xa + r * stride, in);
      const float yk = y[static_cast<size_t>(r * out + o)];
      same_ascending += chain(terms, false) == yk;
      differ_descending += chain(terms, true) != yk;
      differ_pairwise += pairwise(terms, 0, terms.size()) != yk;
    }
  }
  std::printf(
      "  of %lld outputs: %d equal the ascending chain; %d differ from the descending one, %d from a "
      "pairwise tree\n",
      static_cast<long long>(rows * out), same_ascending, differ_descending, differ_pairwise);
  EXPECT_EQ(same_ascending, rows * out);
  EXPECT_GT(differ_descending, rows * out / 10);
  EXPECT_GT(differ_pairwise, rows * out / 10);
}

// --- the FFN ---------------------------------------------------------------------------------------------

TEST(QuantFfnInvariant, BatchInvariantBits) {
  struct Case {
    DType gate_up, down;
    Activation act;
    bool biases;
  };
  const int64_t d = 256, ff = 512, n = 64;
  for (const Case& c : {Case{DType::kQ4_K, DType::kQ6_K, Activation::kSwiGLU, false},
                        Case{DType::kQ8_0, DType::kQ8_0, Activation::kGELU, false},
                        Case{DType::kMXFP4, DType::kMXFP4, Activation::kClampedSwiGLU, true},
                        Case{DType::kFP8, DType::kFP8, Activation::kSwiGLU, false},
                        Case{DType::kQ4_K, DType::kBF16, Activation::kSwiGLU, false}}) {
    SCOPED_TRACE(::testing::Message()
                 << to_string(c.gate_up) << "/" << to_string(c.down) << " " << to_string(c.act));
    const QuantWeights w1(c.gate_up, ff, d, 1), w3(c.gate_up, ff, d, 2);
    const test_util::TestWeights plain_down(d, ff, 0, 3);
    const QuantWeights w2(c.down == DType::kBF16 ? DType::kQ8_0 : c.down, d, ff, 3);
    FfnWeights fw{w1.view, w3.view, c.down == DType::kBF16 ? plain_down.view(DType::kBF16) : w2.view};
    const std::vector<float> b1 = random_floats(ff, 5), b3 = random_floats(ff, 6), b2 = random_floats(d, 7);
    if (c.biases) {
      fw.b1 = b1.data();
      fw.b3 = b3.data();
      fw.b2 = b2.data();
      fw.swiglu_limit = 1.5f;
    }
    const PackedFfnQuant packed(c.act, fw, KernelKind::kInvariant, "ffn");
    check_batch_invariance(
        [&](const float* x, int64_t rows, int64_t xs, float* y, int64_t ys, ThreadPool& pool) {
          std::vector<float> scratch(ffn_quant_scratch_floats(packed, rows));
          ffn_quant_forward(x, rows, xs, packed, y, ys, scratch.data(), pool);
        },
        d, d, n, 31, 16);
  }
}

}  // namespace
}  // namespace moe::kernels

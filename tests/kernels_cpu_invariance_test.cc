// Determinism of the kernels, compared bit for bit (memcmp), never with a tolerance.
//
// KernelKind::kInvariant: every row of y computed in a batch of N rows equals the row computed alone,
// in a shuffled batch, in prefixes of the batch, with 1, 2 or 3 threads, other strides and misaligned
// buffers, and on repeated runs. The portable scalar path gives the same bits as the AVX-512 kernel.
// KernelKind::kFast is shown NOT to have this property (Eigen uses GEMV for one row, GEMM for many).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/expert_ffn.h"
#include "kernels/cpu/linear.h"
#include "tests/support/batch_invariance.h"
#include "tests/support/kernel_operands.h"

namespace moe::kernels {
namespace {

using test_util::Buffer;
using test_util::check_batch_invariance;
using test_util::check_ffn_batch_invariance;
using test_util::random_floats;
using test_util::same_row;
using test_util::TestWeights;

using test_util::kBigRows;

TEST(LinearInvariant, BatchInvariantBits) {
  struct Case {
    int64_t in, out, n;
  };
  // in 20000: the packed path's row blocks (8 MB of packed x) hold 102 rows, so 300 rows take three.
  for (const Case& c : {Case{1, 7, 37}, Case{17, 33, 130}, Case{1000, 70, 512}, Case{1024, 2816, kBigRows},
                        Case{2816, 1024, 96}, Case{20000, 8, 300}}) {
    const TestWeights tw(c.out, c.in, c.in % 2 ? 1 : 0, static_cast<uint32_t>(c.in + c.out));
    for (DType dt : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(testing::Message() << "in=" << c.in << " out=" << c.out << " " << to_string(dt));
      const MatrixView w = tw.view(dt);
      check_batch_invariance(
          [&](const float* x, int64_t rows, int64_t xs, float* y, int64_t ys, ThreadPool& pool) {
            linear(KernelKind::kInvariant, x, rows, xs, w, y, ys, pool);
          },
          c.in, c.out, c.n, 17, c.in * c.out > 1000000 ? 40 : c.n);
    }
  }
}

TEST(LinearInvariant, PortablePathGivesSameBits) {
  if (!linear_invariant_uses_avx512()) GTEST_SKIP() << "this build runs the portable path only";
  ThreadPool pool(2);
  for (int64_t in : {1, 15, 16, 17, 100, 1024}) {
    for (int64_t out : {1, 6, 7, 13}) {
      const TestWeights tw(out, in, 3, static_cast<uint32_t>(in * out));
      const auto x = random_floats(static_cast<size_t>(9 * in), 5, -3.0f, 3.0f);
      for (DType dt : {DType::kF32, DType::kBF16}) {
        std::vector<float> a(static_cast<size_t>(9 * out)), b(a.size());
        linear(KernelKind::kInvariant, x.data(), 9, in, tw.view(dt), a.data(), out, pool);
        linear_invariant_portable(x.data(), 9, in, tw.view(dt), b.data(), out);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << "in=" << in << " out=" << out;
      }
    }
  }
}

TEST(FfnInvariant, BatchInvariantBits) {
  check_ffn_batch_invariance([](const FfnWeights& fw, Activation act, int64_t max_rows) -> test_util::Op {
    const auto scratch = std::make_shared<std::vector<float>>(ffn_scratch_floats(max_rows, fw.w1.rows));
    return
        [fw, act, scratch](const float* x, int64_t rows, int64_t xs, float* y, int64_t ys, ThreadPool& pool) {
          ffn_forward(KernelKind::kInvariant, act, x, rows, xs, fw, y, ys, scratch->data(), pool);
        };
  });
}

TEST(ActivationsInvariant, BitsIndependentOfPositionAndLength) {
  const auto v = random_floats(1000, 9, -30.0f, 30.0f);
  const auto u = random_floats(1000, 10, -3.0f, 3.0f);
  std::vector<float> s(1000), g(1000), sw(1000);
  silu(v.data(), s.data(), 1000);
  gelu(v.data(), g.data(), 1000);
  swiglu(v.data(), u.data(), sw.data(), 1000);
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(s[i]), std::bit_cast<uint32_t>(silu_portable(v[i]))) << v[i];
    ASSERT_EQ(std::bit_cast<uint32_t>(g[i]), std::bit_cast<uint32_t>(gelu_portable(v[i]))) << v[i];
    ASSERT_EQ(std::bit_cast<uint32_t>(sw[i]), std::bit_cast<uint32_t>(silu_portable(v[i]) * u[i])) << v[i];
  }
  // Sub-ranges at every offset and length hit the vector body and the masked tail differently.
  for (int64_t off = 0; off < 20; ++off) {
    for (int64_t len : {1, 5, 15, 16, 17, 33, 100}) {
      std::vector<float> part(static_cast<size_t>(len));
      silu(v.data() + off, part.data(), len);
      ASSERT_EQ(0, std::memcmp(part.data(), s.data() + off, static_cast<size_t>(len) * sizeof(float)));
      gelu(v.data() + off, part.data(), len);
      ASSERT_EQ(0, std::memcmp(part.data(), g.data() + off, static_cast<size_t>(len) * sizeof(float)));
    }
  }
}

// kFast is allowed to depend on the batch: Eigen runs a GEMV for one row and a blocked GEMM for many,
// which sum in different orders. This test asserts that it does differ here, so that the difference
// between the two kinds is real and not an artefact of the tests.
TEST(LinearFast, BatchOfOneDiffersFromBatchOfMany) {
  ThreadPool pool(1);
  const int64_t in = 1024, out = 2816, n = 64;
  const TestWeights tw(out, in, 0, 42);
  const auto x = random_floats(static_cast<size_t>(n * in), 43);
  std::vector<float> yn(static_cast<size_t>(n * out)), y1(static_cast<size_t>(out));
  linear(KernelKind::kFast, x.data(), n, in, tw.view(DType::kF32), yn.data(), out, pool);
  int64_t rows_differing = 0;
  for (int64_t r = 0; r < n; ++r) {
    linear(KernelKind::kFast, x.data() + r * in, 1, in, tw.view(DType::kF32), y1.data(), out, pool);
    rows_differing += same_row(yn.data() + r * out, y1.data(), out) ? 0 : 1;
  }
  std::printf("kFast: %lld of %lld rows differ bitwise between batch-1 and batch-%lld\n",
              static_cast<long long>(rows_differing), static_cast<long long>(n), static_cast<long long>(n));
  EXPECT_GT(rows_differing, 0);
}

}  // namespace
}  // namespace moe::kernels

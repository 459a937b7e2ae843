// Determinism of the kernels, compared bit for bit (memcmp), never with a tolerance.
//
// KernelKind::kInvariant: every row of y computed in a batch of N rows equals the row computed alone,
// in a shuffled batch, in prefixes of the batch, with 1, 2 or 3 threads, other strides and misaligned
// buffers, and on repeated runs. The portable scalar path gives the same bits as the AVX-512 kernel.
// KernelKind::kFast is shown NOT to have this property (Eigen uses GEMV for one row, GEMM for many).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/expert_ffn.h"
#include "kernels/cpu/linear.h"
#include "tests/kernels_cpu_test_util.h"

namespace moe::kernels {
namespace {

using test_util::random_floats;
using test_util::TestWeights;

// Sanitizer builds (make asan, make tsan) run 5-20x slower: the largest shapes use fewer rows there.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int64_t kBigRows = 64;
constexpr int64_t kBigFfnRows = 20;
#else
constexpr int64_t kBigRows = 512;
constexpr int64_t kBigFfnRows = 70;
#endif

// A rows x cols matrix at an arbitrary float offset from a 64-byte boundary, with a padded stride.
struct Buffer {
  std::vector<float> storage;
  float* data;
  int64_t stride;
  Buffer(int64_t rows, int64_t cols, int64_t pad, int64_t offset)
      : storage(static_cast<size_t>(rows * (cols + pad) + offset + 16), -55.0f), stride(cols + pad) {
    float* base = storage.data();
    while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
    data = base + offset;
  }
  float* row(int64_t r) { return data + r * stride; }
};

bool same_row(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

using Op = std::function<void(const float* x, int64_t rows, int64_t x_stride, float* y, int64_t y_stride,
                              ThreadPool& pool)>;

// Runs the whole battery for an op mapping rows of width `in` to rows of width `out`.
void check_batch_invariance(const Op& op, int64_t in, int64_t out, int64_t n, uint32_t seed,
                            int64_t singles) {
  ThreadPool pool1(1), pool2(2), pool3(3);
  const auto xc = random_floats(static_cast<size_t>(n * in), seed, -2.0f, 2.0f);

  Buffer x(n, in, 0, 0), y(n, out, 0, 0);
  for (int64_t r = 0; r < n; ++r) std::copy_n(&xc[r * in], in, x.row(r));
  op(x.data, n, x.stride, y.data, y.stride, pool1);

  // Repeated runs, other thread counts.
  for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
    Buffer y2(n, out, 0, 0);
    op(x.data, n, x.stride, y2.data, y2.stride, *pool);
    for (int64_t r = 0; r < n; ++r) {
      ASSERT_TRUE(same_row(y.row(r), y2.row(r), out)) << "row " << r << " threads " << pool->num_threads();
    }
  }

  // Each row alone (batch of 1) at a misaligned address, with 2 threads.
  for (int64_t r = 0; r < std::min(n, singles); ++r) {
    const int64_t row = singles >= n ? r : (r * 7919) % n;
    Buffer x1(1, in, 0, 1 + row % 15), y1(1, out, 0, 3 + row % 13);
    std::copy_n(&xc[row * in], in, x1.data);
    op(x1.data, 1, x1.stride, y1.data, y1.stride, row % 2 ? pool2 : pool3);
    ASSERT_TRUE(same_row(y.row(row), y1.data, out)) << "row " << row << " alone differs from batch of " << n;
  }

  // Shuffled order, padded strides, misaligned, 3 threads.
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  Buffer xs(n, in, 5, 3), ys(n, out, 9, 7);
  for (int64_t r = 0; r < n; ++r) std::copy_n(&xc[perm[static_cast<size_t>(r)] * in], in, xs.row(r));
  op(xs.data, n, xs.stride, ys.data, ys.stride, pool3);
  for (int64_t r = 0; r < n; ++r) {
    ASSERT_TRUE(same_row(y.row(perm[static_cast<size_t>(r)]), ys.row(r), out)) << "shuffled row " << r;
  }

  // Prefixes of the batch: every remainder of the row tiling, both sides of the in-place/packed switch.
  for (int64_t m : {2, 3, 4, 5, 6, 7, 8, 9, 13, 15, 16, 17, 63, 65, 255}) {
    if (m >= n) continue;
    Buffer yp(m, out, 1, 5);
    op(xs.data, m, xs.stride, yp.data, yp.stride, pool2);
    for (int64_t r = 0; r < m; ++r) {
      ASSERT_TRUE(same_row(y.row(perm[static_cast<size_t>(r)]), yp.row(r), out))
          << "prefix " << m << " row " << r;
    }
  }
}

TEST(LinearInvariant, BatchInvariantBits) {
  struct Case {
    int64_t in, out, n;
  };
  for (const Case& c : {Case{1, 7, 37}, Case{17, 33, 130}, Case{1000, 70, 512}, Case{1024, 2816, kBigRows},
                        Case{2816, 1024, 96}}) {
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
  struct Case {
    int64_t d, ff, n, singles;
  };
  for (const Case& c : {Case{17, 33, 100, 100}, Case{64, 160, 512, 64}, Case{1024, 2816, kBigFfnRows, 6}}) {
    const TestWeights w1(c.ff, c.d, 0, 1), w3(c.ff, c.d, 2, 2), w2(c.d, c.ff, 0, 3);
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (Activation act : {Activation::kSwiGLU, Activation::kGELU}) {
        SCOPED_TRACE(testing::Message() << "d=" << c.d << " ff=" << c.ff << " " << to_string(dt)
                                        << (act == Activation::kGELU ? " gelu" : " swiglu"));
        const FfnWeights w{w1.view(dt), w3.view(dt), w2.view(dt)};
        std::vector<float> scratch(ffn_scratch_floats(c.n, c.ff));
        check_batch_invariance(
            [&](const float* x, int64_t rows, int64_t xs, float* y, int64_t ys, ThreadPool& pool) {
              ffn_forward(KernelKind::kInvariant, act, x, rows, xs, w, y, ys, scratch.data(), pool);
            },
            c.d, c.d, c.n, 23, c.singles);
      }
    }
  }
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

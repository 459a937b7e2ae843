// The batch-invariance battery shared by the kernels' invariance tests: an op's rows computed in a batch
// of N equal the rows computed alone (misaligned), in a shuffled batch with padded strides, in prefixes of
// the batch, with 1, 2 or 3 threads, and on repeated runs - compared bit for bit (memcmp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/expert_ffn.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"
#include "tests/support/kernel_operands.h"

namespace moe::kernels::test_util {

// Sanitizer builds (make asan, make tsan) run 5-20x slower: the largest shapes use fewer rows there
// (kBigRows for a linear, kBigFfnRows for an expert FFN).
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

inline bool same_row(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

using Op = std::function<void(const float* x, int64_t rows, int64_t x_stride, float* y, int64_t y_stride,
                              ThreadPool& pool)>;

// Runs the whole battery for an op mapping rows of width `in` to rows of width `out`.
inline void check_batch_invariance(const Op& op, int64_t in, int64_t out, int64_t n, uint32_t seed,
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

// The expert-FFN cases of the invariance tests, one table for every FFN kind: (d, ff, batch rows, rows
// checked alone) with weights w1 [ff, d], w3 [ff, d] (row stride padded by 2) and w2 [d, ff] of seeds 1-3,
// each in fp32 and in bf16, under SwiGLU and GELU. make(weights, activation, max_rows) returns the FFN under
// test for up to max_rows rows (it may own its packed weights and scratch).
using FfnMaker = std::function<Op(const FfnWeights& w, Activation act, int64_t max_rows)>;
inline void check_ffn_batch_invariance(const FfnMaker& make) {
  struct Case {
    int64_t d, ff, n, singles;
  };
  for (const Case& c : {Case{17, 33, 100, 100}, Case{64, 160, 512, 64}, Case{1024, 2816, kBigFfnRows, 6}}) {
    const TestWeights w1(c.ff, c.d, 0, 1), w3(c.ff, c.d, 2, 2), w2(c.d, c.ff, 0, 3);
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (Activation act : {Activation::kSwiGLU, Activation::kGELU}) {
        SCOPED_TRACE(::testing::Message() << "d=" << c.d << " ff=" << c.ff << " " << to_string(dt)
                                          << (act == Activation::kGELU ? " gelu" : " swiglu"));
        check_batch_invariance(make(FfnWeights{w1.view(dt), w3.view(dt), w2.view(dt)}, act, c.n), c.d, c.d,
                               c.n, 23, c.singles);
      }
    }
  }
}

}  // namespace moe::kernels::test_util

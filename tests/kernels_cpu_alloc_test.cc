// "The hot path allocates nothing": after one warm-up call, linear() and ffn_forward() must not call
// operator new again, for either kind, dtype or thread count. This executable links
// tests/support/allocation_counter.cc, which replaces the global operator new/delete to count calls.
// (Eigen's GEMM allocates with malloc, which this does not see; see linear.h.) Also the memory the weights
// live in (kernels/weight_buffer.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/expert_ffn.h"
#include "kernels/cpu/expert_ffn_bf16.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_bf16.h"
#include "kernels/weight_buffer.h"
#include "tests/support/allocation_counter.h"
#include "tests/support/kernel_operands.h"

namespace moe::kernels {
namespace {

using test_util::random_floats;
using test_util::TestWeights;

// Every size gives zero-filled, writable, 64-byte aligned memory; from kHugePageBytes on a 2 MB-aligned
// mapping advised for huge pages (on Linux), smaller sizes from operator new. Moves hand the memory over.
TEST(WeightBuffer, ZeroFilledAlignedAndMovable) {
  for (const size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, kHugePageBytes - 1, kHugePageBytes,
                             kHugePageBytes + 4097, 3 * kHugePageBytes}) {
    SCOPED_TRACE(bytes);
    WeightBuffer b(bytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
#if defined(__linux__)
    const char* env = std::getenv("MOE_HUGE_PAGES");
    const bool wanted = env == nullptr || std::string(env) != "0";
    EXPECT_EQ(b.huge_pages_advised(), wanted && bytes >= kHugePageBytes);
    if (b.huge_pages_advised()) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kHugePageBytes, 0u);
    }
#endif
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; ++i) nonzero += b.data()[i] != std::byte{0};
    EXPECT_EQ(nonzero, 0u);
    if (bytes > 0) {
      b.data()[0] = std::byte{1};
      b.data()[bytes - 1] = std::byte{2};
    }
    std::byte* const p = b.data();
    WeightBuffer moved(std::move(b));
    EXPECT_EQ(moved.data(), p);
    EXPECT_EQ(moved.size(), bytes);
    EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
    WeightBuffer assigned(64);
    assigned = std::move(moved);
    EXPECT_EQ(assigned.data(), p);
    if (bytes > 0) {
      EXPECT_EQ(assigned.data()[bytes - 1], std::byte{2});
    }
  }
}

TEST(KernelsAlloc, NoOperatorNewAfterWarmUp) {
  const int64_t d = 96, ff = 1100, rows = 37;  // ff > 1024: the reduction is cut into pieces
  const TestWeights w1(ff, d, 0, 1), w3(ff, d, 0, 2), w2(d, ff, 0, 3);
  const auto x = random_floats(static_cast<size_t>(rows * d), 4);
  std::vector<float> y(static_cast<size_t>(rows * d)), h(static_cast<size_t>(rows * ff));
  std::vector<float> scratch(ffn_scratch_floats(rows, ff));
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const FfnWeights w{w1.view(dt), w3.view(dt), w2.view(dt)};
      for (KernelKind kind : {KernelKind::kFast, KernelKind::kInvariant}) {
        auto run = [&] {
          for (int64_t r : {rows, int64_t{1}, int64_t{5}}) {
            linear(kind, x.data(), r, d, w.w1, h.data(), ff, pool);
            ffn_forward(kind, Activation::kSwiGLU, x.data(), r, d, w, y.data(), d, scratch.data(), pool);
            ffn_forward(kind, Activation::kGELU, x.data(), r, d, w, y.data(), d, scratch.data(), pool);
          }
        };
        run();  // warm-up: per-thread buffers grow here
        const long before = moe::testing::allocation_count();
        run();
        run();
        const long news = moe::testing::allocation_count() - before;
        EXPECT_EQ(news, 0) << to_string(kind) << " " << to_string(dt) << " threads=" << threads;
      }
    }
  }
}

// The bf16-compute linear (with and without a caller workspace) and FFN on prepared weights.
TEST(KernelsAlloc, Bf16ComputeNoOperatorNewAfterWarmUp) {
  const int64_t d = 96, ff = 1100, rows = 37;
  const TestWeights w1(ff, d, 0, 1), w3(ff, d, 0, 2), w2(d, ff, 0, 3);
  const auto x = random_floats(static_cast<size_t>(rows * d), 4);
  std::vector<float> y(static_cast<size_t>(rows * d)), h(static_cast<size_t>(rows * ff));
  std::vector<uint16_t> ws(linear_bf16_workspace_elems(rows, d));
  std::vector<float> scratch(ffn_bf16_scratch_floats(rows, d, ff));
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const FfnWeights fw{w1.view(dt), w3.view(dt), w2.view(dt)};
      const PackedBf16Weights packed(fw.w1);
      const PackedFfnBf16 swiglu(Activation::kSwiGLU, fw), gelu(Activation::kGELU, fw);
      auto run = [&] {
        for (int64_t r : {rows, int64_t{1}, int64_t{5}}) {
          linear_bf16(x.data(), r, d, packed, h.data(), ff, nullptr, pool);
          linear_bf16(x.data(), r, d, packed, h.data(), ff, ws.data(), pool);
          ffn_bf16_forward(x.data(), r, d, swiglu, y.data(), d, scratch.data(), pool);
          ffn_bf16_forward(x.data(), r, d, gelu, y.data(), d, scratch.data(), pool);
        }
      };
      run();  // warm-up: the thread's workspace grows here
      const long before = moe::testing::allocation_count();
      run();
      run();
      const long news = moe::testing::allocation_count() - before;
      EXPECT_EQ(news, 0) << to_string(dt) << " threads=" << threads;
    }
  }
}

}  // namespace
}  // namespace moe::kernels

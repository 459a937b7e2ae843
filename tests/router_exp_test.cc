// The router rule's exponential and sigmoid (router/rules/topk_rule.h: exp_f, sigmoid_f) against float64
// exp over the whole float range (every 509th bit pattern, and every third float whose result is subnormal,
// every float near overflow), their special values, and the vectorised score loop (score_row, what TopKRouter
// runs) against the scalar definition bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "router/rules/topk_rule.h"

namespace moe {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// |got - want| in units of the last place of float at want (subnormal spacing 2^-149 below 2^-126; +inf
// counts as 2^128, one ulp past FLT_MAX, for got and for a reference beyond it). want is the float64
// reference, got finite or +inf.
double UlpError(float got, double want) {
  const double g = std::isinf(got) ? std::ldexp(1.0, 128) : static_cast<double>(got);
  want = std::min(want, std::ldexp(1.0, 128));
  const double a = std::fabs(want);
  int exponent = 0;
  std::frexp(a, &exponent);  // a = m 2^exponent, m in [0.5, 1)
  const double ulp = a < std::ldexp(1.0, -126) ? std::ldexp(1.0, -149) : std::ldexp(1.0, exponent - 24);
  return std::fabs(g - want) / ulp;
}

double SigmoidRef(float x) {
  const double d = x;
  return d >= 0 ? 1.0 / (1.0 + std::exp(-d)) : std::exp(d) / (1.0 + std::exp(d));
}

struct Worst {
  double ulp = 0;
  float at = 0;
  void add(double e, float x) {
    if (e > ulp) {
      ulp = e;
      at = x;
    }
  }
};

// Every float x with x's bits in [lo, hi] at `stride`, through exp_f and sigmoid_f.
void Measure(uint32_t lo, uint32_t hi, uint32_t stride, Worst& exp_worst, Worst& sigmoid_worst) {
  for (uint64_t b = lo; b <= hi; b += stride) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(b));
    if (std::isnan(x)) continue;
    exp_worst.add(UlpError(rules::exp_f(x), std::exp(static_cast<double>(x))), x);
    sigmoid_worst.add(UlpError(rules::sigmoid_f(x), SigmoidRef(x)), x);
  }
}

TEST(RouterExp, AccurateOverTheWholeFloatRange) {
  Worst e, s;
  Measure(0, 0xffffffffu, 509, e, s);
  // Dense where the arithmetic changes: subnormal results (x in [-104, -87]) and the overflow threshold
  // (x in [88, 89]).
  const auto bits = [](float x) { return std::bit_cast<uint32_t>(x); };
  Measure(bits(-87.0f), bits(-104.0f), 3, e, s);
  Measure(bits(88.0f), bits(89.0f), 1, e, s);
  std::printf("[ info ] exp_f worst %.3f ulp at %a; sigmoid_f worst %.3f ulp at %a\n", e.ulp, e.at, s.ulp,
              s.at);
  EXPECT_LE(e.ulp, 1.0) << "at " << e.at;
  EXPECT_LE(s.ulp, 3.0) << "at " << s.at;
}

TEST(RouterExp, SpecialValues) {
  EXPECT_EQ(rules::exp_f(kInf), kInf);
  EXPECT_EQ(rules::exp_f(-kInf), 0.0f);
  EXPECT_TRUE(std::isnan(rules::exp_f(kNaN)));
  EXPECT_TRUE(std::isnan(rules::exp_f(-kNaN)));
  EXPECT_EQ(rules::exp_f(0.0f), 1.0f);
  EXPECT_EQ(rules::exp_f(-0.0f), 1.0f);
  EXPECT_EQ(rules::exp_f(0x1.62e42ep+6f), static_cast<float>(std::exp(0x1.62e42ep+6)));  // largest finite
  EXPECT_EQ(rules::exp_f(0x1.62e430p+6f), kInf);
  EXPECT_EQ(rules::exp_f(std::numeric_limits<float>::max()), kInf);
  EXPECT_EQ(rules::exp_f(-std::numeric_limits<float>::max()), 0.0f);
  EXPECT_EQ(rules::exp_f(-103.0f), static_cast<float>(std::exp(-103.0)));  // subnormal, correctly rounded
  EXPECT_EQ(rules::exp_f(-104.0f), 0.0f);
  EXPECT_EQ(rules::exp_f(std::numeric_limits<float>::denorm_min()), 1.0f);

  EXPECT_EQ(rules::sigmoid_f(kInf), 1.0f);
  EXPECT_EQ(rules::sigmoid_f(-kInf), 0.0f);
  EXPECT_TRUE(std::isnan(rules::sigmoid_f(kNaN)));
  EXPECT_EQ(rules::sigmoid_f(0.0f), 0.5f);
  EXPECT_EQ(rules::sigmoid_f(-0.0f), 0.5f);
  EXPECT_EQ(rules::sigmoid_f(20.0f), 1.0f);
  EXPECT_GT(rules::sigmoid_f(-95.0f), 0.0f);  // subnormal, not flushed
  EXPECT_LT(rules::sigmoid_f(-95.0f), std::numeric_limits<float>::min());
  EXPECT_EQ(rules::sigmoid_f(-120.0f), 0.0f);
}

// The scalar definition one element at a time, kept out of the vectoriser (GCC: the function attribute;
// clang, which has no `optimize` attribute: the loop pragma).
#if defined(__clang__)
__attribute__((noinline)) void ScalarScores(const rules::TopKParams& p, const float* row,
                                            const rules::RowStats& stats, float* out) {
#pragma clang loop vectorize(disable)
  for (int e = 0; e < p.num_experts; ++e) out[e] = rules::expert_score(p, row, stats, e);
}
#else
__attribute__((optimize("no-tree-vectorize"), noinline)) void ScalarScores(const rules::TopKParams& p,
                                                                           const float* row,
                                                                           const rules::RowStats& stats,
                                                                           float* out) {
  for (int e = 0; e < p.num_experts; ++e) out[e] = rules::expert_score(p, row, stats, e);
}
#endif

TEST(RouterExp, VectorisedScoreLoopIsTheScalarDefinition) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 30.0f);
  const float specials[] = {kNaN, kInf, -kInf, 0.0f, -0.0f, -95.0f, 88.9f, -88.9f, -150.0f, 1e-40f};
  for (bool sigmoid : {true, false}) {
    for (int E = 1; E <= 300; E += (E < 40 ? 1 : 37)) {
      rules::TopKParams p;
      p.num_experts = E;
      p.top_k = 1;
      p.num_ranked = 1;
      p.sigmoid = sigmoid;
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<float> row(E);
        for (float& x : row) {
          x = normal(rng);
          if (rng() % 8 == 0) x = specials[rng() % 10];
          if (rng() % 8 == 0) x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
        }
        row[rng() % E] = 1.0f;
        const rules::RowStats stats = rules::row_stats(p, row.data());
        std::vector<float> vec(E), scalar(E);
        rules::score_row(p, row.data(), stats, vec.data());
        ScalarScores(p, row.data(), stats, scalar.data());
        for (int e = 0; e < E; ++e) {
          ASSERT_EQ(std::bit_cast<uint32_t>(vec[e]), std::bit_cast<uint32_t>(scalar[e]))
              << (sigmoid ? "sigmoid" : "softmax") << " E " << E << " expert " << e << " logit " << row[e];
        }
      }
    }
  }
}

}  // namespace
}  // namespace moe

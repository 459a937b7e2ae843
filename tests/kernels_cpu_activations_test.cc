#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/activations.h"
#include "tests/support/kernel_operands.h"

namespace moe::kernels {
namespace {

using test_util::random_floats;

// Inputs covering the interesting ranges: around 0, moderate, the exp clamps, and +/-inf.
std::vector<float> sweep() {
  std::vector<float> v;
  for (float x = -120.0f; x <= 120.0f; x += 0.173f) v.push_back(x);
  for (float x = -4.0f; x <= 4.0f; x += 0.00731f) v.push_back(x);
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, 87.0f, 88.7f, 89.5f, -87.0f, -103.9f, -104.5f})
    v.push_back(x);
  return v;
}

// |got - want| <= tol * |want| + abs_tol
void expect_close(float got, double want, double tol, double abs_tol, float x, const char* what) {
  if (std::fabs(want) > std::numeric_limits<float>::max()) {  // overflows fp32
    EXPECT_EQ(static_cast<double>(got), want > 0 ? HUGE_VAL : -HUGE_VAL) << what << "(" << x << ")";
    return;
  }
  EXPECT_LE(std::fabs(got - want), tol * std::fabs(want) + abs_tol)
      << what << "(" << x << ") = " << got << ", want " << want;
}

TEST(Activations, ExpMatchesLibm) {
  for (float x : sweep()) {
    const double want = std::exp(static_cast<double>(x));
    // 2 ulp relative; below the normal range an absolute bound of a few subnormal steps.
    expect_close(exp_portable(x), want, 2.5e-7, 1e-44, x, "exp");
  }
  EXPECT_EQ(exp_portable(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(exp_portable(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(exp_portable(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Activations, SiluAndGeluAccuracy) {
  const std::vector<float> x = sweep();
  std::vector<float> s(x.size()), g(x.size());
  silu(x.data(), s.data(), static_cast<int64_t>(x.size()));
  gelu(x.data(), g.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    // Relative 1e-6 (a few ulp) plus an absolute floor of 1e-36: below x = -88.7, exp(-x) overflows
    // fp32 and silu returns -0 where the exact value is below 3e-37 in magnitude.
    expect_close(s[i], silu_f64(x[i]), 1e-6, 1e-36, x[i], "silu");
    // gelu's exp argument v = -2u is itself rounded in fp32 (a few ulp), and exp turns a relative
    // error e in v into |v| e in the result: for x << 0 (|v| up to ~90) the fp32 function is
    // ill-conditioned, so the bound grows with |v|. Those results are below 1e-12 in magnitude.
    const double xd = x[i];
    const double v = 2.0 * std::sqrt(2.0 / std::numbers::pi) * (xd + 0.044715 * xd * xd * xd);
    expect_close(g[i], gelu_f64(x[i]), 1e-6 + 4e-7 * std::fabs(v), 1e-36, x[i], "gelu");
  }
}

TEST(Activations, GeluReferenceIsTheTanhForm) {
  for (double x = -6.0; x <= 6.0; x += 0.01) {
    const double tanh_form =
        0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(gelu_f64(x), tanh_form, 1e-12) << x;
  }
}

TEST(Activations, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float in[5] = {inf, -inf, nan, 0.0f, -0.0f};
  float s[5], g[5];
  silu(in, s, 5);
  gelu(in, g, 5);
  EXPECT_EQ(s[0], inf);
  EXPECT_TRUE(std::isnan(s[1]));  // -inf / inf, as PyTorch's -inf * sigmoid(-inf) = -inf * 0
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_EQ(s[3], 0.0f);
  EXPECT_EQ(g[0], inf);
  EXPECT_TRUE(std::isnan(g[1]));
  EXPECT_TRUE(std::isnan(g[2]));
  EXPECT_EQ(g[3], 0.0f);
}

TEST(Activations, SwigluIsSiluTimesUp) {
  const auto gate = random_floats(1000, 1, -8.0f, 8.0f);
  const auto up = random_floats(1000, 2, -3.0f, 3.0f);
  std::vector<float> out(1000), s(1000);
  swiglu(gate.data(), up.data(), out.data(), 1000);
  silu(gate.data(), s.data(), 1000);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(s[i] * up[i]));
    expect_close(out[i], silu_f64(gate[i]) * up[i], 1.2e-6, 1e-37, gate[i], "swiglu");
  }
  // In place (out == gate) gives the same bits.
  std::vector<float> g2 = gate;
  swiglu(g2.data(), up.data(), g2.data(), 1000);
  EXPECT_EQ(0, std::memcmp(g2.data(), out.data(), out.size() * sizeof(float)));
}

// gpt-oss's clamped SwiGLU: the vector path equals the scalar rule (kernels/activation_rules.h) bit for bit,
// and both are within a few ulp of float64 where they do not clamp, exactly the clamped value where they do.
TEST(Activations, ClampedSwigluMatchesItsRuleAndFloat64) {
  const std::vector<float> x = sweep();
  std::vector<float> up(x.size());
  for (size_t i = 0; i < x.size(); ++i) up[i] = x[(i * 7919) % x.size()] * 0.25f;
  for (float limit : {7.0f, 0.5f}) {
    std::vector<float> out(x.size());
    clamped_swiglu(x.data(), up.data(), out.data(), static_cast<int64_t>(x.size()), 1.702f, limit);
    for (size_t i = 0; i < x.size(); ++i) {
      const float scalar = clamped_swiglu_portable(x[i], up[i], 1.702f, limit);
      ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(scalar))
          << "gate " << x[i] << " up " << up[i] << " limit " << limit;
      if (std::isfinite(x[i]) && std::isfinite(up[i])) {
        // exp(-alpha g) amplifies the rounding of its fp32 argument: |alpha g| 2^-24 more relative error,
        // and below 1e-30 (alpha g < -64) the fp32 result may flush like silu's.
        const double g = std::min<double>(x[i], limit);
        expect_close(out[i], clamped_swiglu_f64(x[i], up[i], 1.702f, limit),
                     2e-6 + 0x1p-24 * std::fabs(1.702 * g), 1e-30, x[i], "clamped_swiglu");
      }
    }
  }
  // The clamps: the gate only from above, the up projection on both sides.
  EXPECT_FLOAT_EQ(clamped_swiglu_portable(100.0f, 100.0f, 1.702f, 7.0f),
                  static_cast<float>(8.0 * clamped_swiglu_f64(7.0, 0.0, 1.702, 7.0)));
  EXPECT_FLOAT_EQ(clamped_swiglu_portable(1.0f, -100.0f, 1.702f, 7.0f),
                  static_cast<float>(-6.0 / (1.0 + std::exp(-1.702))));
  EXPECT_LT(clamped_swiglu_portable(-20.0f, 0.0f, 1.702f, 7.0f), 0.0f);  // not clamped below: -20 sig(-34)
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float specials[] = {nan, 1.0f, 1.0f, nan};
  float o[2];
  clamped_swiglu(specials, specials + 2, o, 2, 1.702f, 7.0f);
  EXPECT_TRUE(std::isnan(o[0]));
  EXPECT_TRUE(std::isnan(o[1]));
}

TEST(Activations, BadInput) {
  float v = 1.0f;
  EXPECT_THROW(silu(nullptr, &v, 1), std::invalid_argument);
  EXPECT_THROW(gelu(&v, nullptr, 3), std::invalid_argument);
  EXPECT_THROW(silu(&v, &v, -1), std::invalid_argument);
  try {
    swiglu(&v, nullptr, &v, 4);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("up is null"), std::string::npos) << e.what();
  }
  silu(nullptr, nullptr, 0);  // empty is fine
}

}  // namespace
}  // namespace moe::kernels

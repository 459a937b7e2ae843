// moe/model accuracy against float64 references (relative error), plus validation errors.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/splitmix64.h"
#include "moe/model/model.h"
#include "moe/model/ops.h"

namespace moe::model {
namespace {

std::vector<float> random_vector(size_t n, uint64_t seed, float scale = 1.0f) {
  SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = (2.0f * rng.uniform_float() - 1.0f) * scale;
  return v;
}

// max |got - want| / max |want|.
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num = std::max(num, std::fabs(got[i] - want[i]));
    den = std::max(den, std::fabs(want[i]));
  }
  return num / den;
}

TEST(ModelOps, RmsNormMatchesFloat64Reference) {
  for (int n : {1, 7, 64, 256, 1000}) {
    for (float scale : {1e-3f, 1.0f, 50.0f}) {
      auto x = random_vector(n, 11 + n, scale);
      auto w = random_vector(n, 17 + n, 2.0f);
      std::vector<float> y(n);
      std::vector<double> ref(n);
      rms_norm(x.data(), w.data(), n, 1e-5f, y.data());
      rms_norm_reference_f64(x.data(), w.data(), n, 1e-5, ref.data());
      EXPECT_LT(relative_error(y, ref), 2e-6) << "n " << n << " scale " << scale;
    }
  }
}

TEST(ModelOps, RopeMatchesFloat64Reference) {
  const int heads = 4, head_dim = 64;
  for (uint32_t pos : {0u, 1u, 17u, 300u, 4000u}) {
    auto x = random_vector(heads * head_dim, 5 + pos);
    std::vector<double> ref(x.begin(), x.end());
    apply_rope(x.data(), heads, head_dim, pos, 10000.0f);
    apply_rope_reference_f64(ref.data(), heads, head_dim, pos, 10000.0);
    EXPECT_LT(relative_error(x, ref), 1e-6) << "position " << pos;
  }
}

TEST(ModelOps, AttentionMatchesFloat64Reference) {
  const int heads = 4, head_dim = 64, width = heads * head_dim;
  for (int keys : {1, 2, 9, 64, 200}) {
    auto q = random_vector(width, 100 + keys, 2.0f);
    auto k = random_vector(static_cast<size_t>(keys) * width, 200 + keys, 2.0f);
    auto v = random_vector(static_cast<size_t>(keys) * width, 300 + keys);
    std::vector<float> out(width), scratch(keys);
    attention_row(q.data(), k.data(), v.data(), keys, heads, head_dim, out.data(), scratch.data());
    std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()), ref(width);
    attention_row_reference_f64(qd.data(), kd.data(), vd.data(), keys, heads, head_dim, ref.data());
    EXPECT_LT(relative_error(out, ref), 1e-5) << keys << " keys";
  }
}

TEST(ModelConfig, ValidationNamesTheField) {
  ModelShape s;
  s.top_k = 9;
  try {
    s.validate();
    FAIL() << "expected a throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("top_k (9) exceeds num_experts (8)"), std::string::npos) << e.what();
  }
  s = ModelShape();
  s.num_heads = 3;
  EXPECT_THROW(s.validate(), std::invalid_argument);
  EXPECT_THROW(ModelOptions::dispatch_mode("fastest", 1.0), std::invalid_argument);
  EXPECT_THROW(ModelOptions::dispatch_mode("greedy", -1.0), std::invalid_argument);
  EXPECT_EQ(ModelOptions::dispatch_mode("causal", 1.0).scope, CapacityScope::kCausal);
  EXPECT_EQ(ModelOptions::dispatch_mode("dropless", 1.0).scope, CapacityScope::kNone);
}

TEST(Model, ForwardRejectsBadRows) {
  auto w = random_model(ModelShape::tiny(), 1);
  Model m(w, ModelOptions{});
  std::vector<int32_t> rows_out;
  std::vector<float> logits;
  std::vector<BatchRow> rows = {{1, 0, 5}, {1, 1, 6}};
  // The default policy (stable: sequence scope) needs every request admitted first; nothing changes.
  try {
    m.forward(rows, rows_out, logits);
    ADD_FAILURE() << "expected a throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("request 1 was not admitted"), std::string::npos) << e.what();
  }
  EXPECT_EQ(m.num_requests(), 0u);
  EXPECT_THROW(m.admit(1, 0), std::invalid_argument);  // an empty prompt
  m.admit(1, 2);
  m.admit(2, 1);
  EXPECT_THROW(m.admit(1, 2), std::invalid_argument);  // already live
  EXPECT_THROW(m.release(3), std::invalid_argument);   // never admitted
  rows = {{1, 0, 5}, {1, 2, 6}};                       // position gap
  EXPECT_THROW(m.forward(rows, rows_out, logits), std::invalid_argument);
  EXPECT_EQ(m.cache_length(1), 0u);
  rows = {{1, 0, 128}};  // token out of range
  EXPECT_THROW(m.forward(rows, rows_out, logits), std::invalid_argument);
  rows = {};
  EXPECT_THROW(m.forward(rows, rows_out, logits), std::invalid_argument);
  rows = {{1, 0, 5}, {2, 0, 6}, {1, 1, 7}};
  m.forward(rows, rows_out, logits);
  EXPECT_EQ(rows_out, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(logits.size(), 2u * 128);
  EXPECT_EQ(m.cache_length(1), 2u);
  rows = {{1, 1, 5}};  // repeats a cached position
  EXPECT_THROW(m.forward(rows, rows_out, logits), std::invalid_argument);
  m.release(1);
  EXPECT_EQ(m.cache_length(1), 0u);
  EXPECT_THROW(m.release(1), std::invalid_argument);  // already released
  m.release(2);
  EXPECT_EQ(m.num_requests(), 0u);
}

TEST(Model, ArgmaxTiesToLowerId) {
  std::vector<float> l = {1.0f, 3.0f, NAN, 3.0f, -2.0f};
  EXPECT_EQ(Model::argmax(l.data(), 5), 1);
  l = {NAN, -1.0f};
  EXPECT_EQ(Model::argmax(l.data(), 2), 1);
}

}  // namespace
}  // namespace moe::model

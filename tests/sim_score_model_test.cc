// Score models: determinism per seed, and a token's logits independent of its batch mates.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "sim/errors.h"
#include "sim/rng.h"
#include "sim/score_model.h"
#include "tests/sim_test_util.h"

namespace moe::sim {
namespace {

std::vector<TokenMeta> rows_of(uint64_t id, uint32_t n) {
  std::vector<TokenMeta> rows;
  for (uint32_t p = 0; p < n; ++p) rows.push_back({id, p});
  return rows;
}

TEST(SimScoreModel, SameSeedSameBits) {
  ScoreModelConfig c;
  c.skew = Skew::parse("dirichlet:0.3");
  const ScoreModel a(c, 16, 11), b(c, 16, 11), other(c, 16, 12);
  std::vector<float> la, lb, lo;
  const auto rows = rows_of(3, 40);
  a.logits(rows, la);
  b.logits(rows, lb);
  other.logits(rows, lo);
  ASSERT_EQ(la.size(), 40u * 16);
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(la.data(), lo.data(), la.size() * sizeof(float)), 0);
  for (float v : la) EXPECT_TRUE(std::isfinite(v));
}

TEST(SimScoreModel, TokenLogitsIgnoreBatchMatesAndOrder) {
  const ScoreModelConfig c;
  const ScoreModel m(c, 8, 5);
  std::vector<float> alone, mixed;
  const auto probe = rows_of(1000, 30);
  m.logits(probe, alone);
  // The same tokens inside a shuffled batch with strangers.
  std::vector<TokenMeta> batch = rows_of(7, 25);
  for (const auto& r : probe) batch.push_back(r);
  for (const auto& r : rows_of(3, 9)) batch.push_back(r);
  Rng rng(1);
  for (size_t i = batch.size(); i > 1; --i) std::swap(batch[i - 1], batch[rng.uniform_int(0, i - 1)]);
  m.logits(batch, mixed);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].request_id != 1000) continue;
    const float* got = mixed.data() + i * 8;
    const float* want = alone.data() + batch[i].position * 8;
    EXPECT_EQ(std::memcmp(got, want, 8 * sizeof(float)), 0) << "position " << batch[i].position;
  }
}

TEST(SimScoreModel, PopularityAndTopicShapeTheLogits) {
  ScoreModelConfig c;
  c.skew = Skew::parse("zipf:1");
  c.topic_rho = 0.0;
  const ScoreModel m(c, 4, 0);
  EXPECT_DOUBLE_EQ(m.popularity()[0], 0.0);
  EXPECT_NEAR(m.popularity()[3], -std::log(4.0), 1e-12);
  // Mean logit per expert follows popularity.
  std::vector<float> l;
  m.logits(rows_of(1, 20000), l);
  for (int e = 0; e < 4; ++e) {
    double mean = 0;
    for (int t = 0; t < 20000; ++t) mean += l[t * 4 + e];
    EXPECT_NEAR(mean / 20000, m.popularity()[e], 0.03);
  }
  // rho = 1: every token of a request has the same logits (its topic).
  c.topic_rho = 1.0;
  const ScoreModel topic(c, 4, 0);
  topic.logits(rows_of(2, 3), l);
  EXPECT_EQ(std::memcmp(l.data(), l.data() + 4, 4 * sizeof(float)), 0);
}

TEST(SimScoreModel, RejectsBadConfig) {
  ScoreModelConfig c;
  c.temperature = 0;
  testing::expect_throw_with<UsageError>([&] { ScoreModel(c, 8, 0); }, "temperature");
  c.temperature = 1;
  c.topic_rho = 1.5;
  testing::expect_throw_with<UsageError>([&] { ScoreModel(c, 8, 0); }, "topic-rho");
  testing::expect_throw_with<UsageError>([] { Skew::parse("zipf"); }, "expected none, zipf:S");
  testing::expect_throw_with<UsageError>([] { Skew::parse("dirichlet:0"); }, "> 0");
  EXPECT_EQ(Skew::parse("zipf:1.2").to_string(), "zipf:1.2");
}

}  // namespace
}  // namespace moe::sim

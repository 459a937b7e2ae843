// Score models: determinism per seed, and a token's logits independent of its batch mates.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "sim/errors.h"
#include "sim/normal_draw.h"
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

namespace moe::sim {
namespace {

TEST(SimNormalDraw, HandComputedCells) {
  // u = 0: x = 1, octave 0, cell 0: the table's first entry (tail probability 2^-33).
  EXPECT_FLOAT_EQ(normal_from_bits(0u), 6.337957754553789f);
  EXPECT_FLOAT_EQ(normal_from_bits(0x80000000u), -6.337957754553789f);  // the sign bit
  // u = 2^31 - 1: x = 2^32 - 1, the last cell of octave 31, frac = 1 - 2^-25: almost T[2048] = 0.
  EXPECT_NEAR(normal_from_bits(0x7fffffffu), 0.0, 1e-6);
  // u = 2^30: x = 2^31 + 1, octave 31, cell 0 (tail probability 2^-2 one-sided): Phi^-1(0.75) = 0.6745.
  EXPECT_NEAR(normal_from_bits(0x40000000u), 0.6744897501960817, 1e-6);
}

TEST(SimNormalDraw, MomentsAndTail) {
  const int n = 1 << 20;
  std::vector<float> z(n);
  draw_normals(12345, 0, n, z.data());
  double sum = 0, sq = 0, fourth = 0;
  int beyond3 = 0;
  for (float v : z) {
    sum += v;
    sq += double(v) * v;
    fourth += double(v) * v * v * v;
    beyond3 += std::fabs(v) > 3.0f;
    ASSERT_LE(std::fabs(v), 6.34f);
  }
  EXPECT_NEAR(sum / n, 0.0, 0.005);
  EXPECT_NEAR(sq / n, 1.0, 0.005);
  EXPECT_NEAR(fourth / n, 3.0, 0.05);
  EXPECT_NEAR(beyond3 / double(n), 0.0026998, 0.0003);  // 2 * (1 - Phi(3))
}

TEST(SimNormalDraw, ADrawDependsOnItsIndexOnly) {
  std::vector<float> whole(1500), part(700);
  draw_normals(77, 0, 1500, whole.data());
  for (int first : {0, 1, 2, 511, 512, 513, 799}) {
    draw_normals(77, first, 700, part.data());
    ASSERT_EQ(std::memcmp(part.data(), whole.data() + first, 700 * sizeof(float)), 0) << first;
  }
}

TEST(SimNormalDraw, RowsOfStreamsAreEachStreamsDraws) {
  // Even and odd counts, one word, a block's worth of words (2048 draws) and beyond, and rows that fill
  // several blocks.
  for (int n : {0, 1, 2, 7, 8, 16, 255, 256, 2046, 2048, 2049, 2050, 3000}) {
    for (int rows : {0, 1, 3, 130}) {
      std::vector<uint64_t> keys(rows);
      for (int r = 0; r < rows; ++r) keys[r] = stream_key(5, static_cast<uint64_t>(r) * 977, r % 3);
      std::vector<float> got(static_cast<size_t>(rows) * n + 1, -1.0f), want(n + 1);  // never empty
      draw_normals_rows(keys.data(), rows, n, got.data());
      for (int r = 0; r < rows; ++r) {
        draw_normals(keys[r], 0, n, want.data());
        ASSERT_EQ(std::memcmp(want.data(), got.data() + static_cast<size_t>(r) * n, n * sizeof(float)), 0)
            << "n " << n << " row " << r;
      }
      EXPECT_EQ(got.back(), -1.0f) << "n " << n << " rows " << rows << ": wrote past the end";
    }
  }
}

TEST(SimScoreModel, RowsDrawnTogetherGiveEachTokensBits) {
  // logits() draws groups of rows at once (any group size from 1 to 2048 rows, per-row beyond 2048
  // experts); each token's logits stay token_logits' bits, with and without topics.
  for (int E : {1, 7, 8, 64, 256, 2048, 2049}) {
    for (double rho : {0.0, 0.6}) {
      ScoreModelConfig c;
      c.topic_rho = rho;
      const ScoreModel m(c, E, 21);
      std::vector<TokenMeta> rows;
      for (uint32_t i = 0; i < 300; ++i) rows.push_back({i % 3 == 0 ? 7u : 100u + i, i});
      std::vector<float> all, one(E);
      m.logits(rows, all);
      for (size_t i = 0; i < rows.size(); ++i) {
        m.token_logits(rows[i], one.data());
        ASSERT_EQ(std::memcmp(one.data(), all.data() + i * E, E * sizeof(float)), 0)
            << "E " << E << " rho " << rho << " row " << i;
      }
    }
  }
}

TEST(SimScoreModel, CachedTopicsGiveTheSameBits) {
  ScoreModelConfig c;
  c.topic_rho = 0.7;
  c.skew = Skew::parse("dirichlet:0.5");
  const ScoreModel m(c, 24, 9);
  std::vector<TokenMeta> rows;
  // More requests than cache slots collide, and requests come back after being evicted.
  for (int pass = 0; pass < 2; ++pass) {
    for (uint64_t r = 0; r < 1200; r += 7) rows.push_back({r, static_cast<uint32_t>(pass * 3 + r % 5)});
  }
  ScoreModel::TopicCache cache(m);
  std::vector<float> cached(rows.size() * 24), one(24);
  m.logits(rows, cached.data(), cache);
  for (size_t i = 0; i < rows.size(); ++i) {
    m.token_logits(rows[i], one.data());
    ASSERT_EQ(std::memcmp(one.data(), cached.data() + i * 24, 24 * sizeof(float)), 0) << i;
  }
}

}  // namespace
}  // namespace moe::sim

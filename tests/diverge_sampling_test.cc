// The lab's sampling rule (sim/diverge/sampling.h): temperature 0 is the argmax, the token is a function of
// (logits, seed, position) alone, the draws follow the softmax of the nucleus (a chi-square check over many
// seeds on a small vocabulary), a tiny top_p is the argmax, bad input is a named error; and served through
// the lab, speculation under sampling gives the tokens the request gets without it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/splitmix64.h"
#include "moe/model/model.h"
#include "sim/diverge/sampling.h"
#include "sim/diverge/serving.h"

namespace moe::sim::diverge {
namespace {

std::vector<float> RandomLogits(uint64_t seed, int vocab) {
  SplitMix64 g(seed);
  std::vector<float> l(static_cast<size_t>(vocab));
  for (float& v : l) v = static_cast<float>(static_cast<double>(g.next() >> 11) * 0x1.0p-53 * 8.0 - 4.0);
  return l;
}

TEST(Sampling, DrawIsTheDocumentedFunctionOfSeedAndPosition) {
  for (uint64_t seed : {0ull, 1ull, 0xDEADBEEFull}) {
    for (uint32_t p : {0u, 1u, 17u, 4000000000u}) {
      const double u = sampling_draw(seed, p);
      EXPECT_EQ(u, std::ldexp(static_cast<double>(mix64(seed ^ mix64(p)) >> 11), -53));
      EXPECT_GE(u, 0.0);
      EXPECT_LT(u, 1.0);
    }
  }
  EXPECT_NE(sampling_draw(1, 5), sampling_draw(1, 6));
  EXPECT_NE(sampling_draw(1, 5), sampling_draw(2, 5));
}

TEST(Sampling, TemperatureZeroIsTheArgmax) {
  for (uint64_t s = 0; s < 50; ++s) {
    const std::vector<float> l = RandomLogits(s, 97);
    for (uint64_t seed : {0ull, 7ull}) {
      EXPECT_EQ(sample_token(l, Sampling{0.0, 0.9, seed}, static_cast<uint32_t>(s)),
                model::Model::argmax(l.data(), static_cast<int>(l.size())));
    }
  }
  // Ties go to the lower id.
  const std::vector<float> tie = {1.0f, 3.0f, 3.0f, -2.0f};
  EXPECT_EQ(sample_token(tie, Sampling{}, 0), 1);
}

// The token depends on the logits' bits, the seed and the position only: the same inputs in any order of
// calls give the same token; another seed or position draws anew.
TEST(Sampling, SameSeedPositionAndLogitsGiveTheSameToken) {
  const std::vector<float> l = RandomLogits(3, 200);
  const Sampling s{0.7, 0.95, 42};
  std::vector<int32_t> first;
  for (uint32_t p = 0; p < 64; ++p) first.push_back(sample_token(l, s, p));
  for (uint32_t p = 64; p-- > 0;) EXPECT_EQ(sample_token(l, s, p), first[p]);
  const std::vector<float> copy = l;  // other storage, the same bits
  for (uint32_t p = 0; p < 64; ++p) EXPECT_EQ(sample_token(copy, s, p), first[p]);
  std::set<int32_t> distinct(first.begin(), first.end());
  EXPECT_GT(distinct.size(), 5u);  // positions draw differently
}

// Over many seeds the draws follow the softmax of logits / temperature: a chi-square test on 4 tokens
// (3 degrees of freedom; 16.27 is the 0.999 quantile), the seeds fixed so the test is deterministic.
TEST(Sampling, DrawsFollowTheSoftmax) {
  const std::vector<float> l = {0.0f, 1.0f, 2.0f, 0.5f};
  for (double t : {0.5, 1.0, 2.0}) {
    std::vector<double> p(l.size());
    double z = 0;
    for (size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp(l[i] / t);
    const int n = 40000;
    std::vector<int> count(l.size(), 0);
    for (int seed = 0; seed < n; ++seed) ++count[sample_token(l, Sampling{t, 1.0, mix64(seed)}, 3)];
    double chi2 = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      const double expected = n * p[i] / z;
      chi2 += (count[i] - expected) * (count[i] - expected) / expected;
    }
    EXPECT_LT(chi2, 16.27) << "temperature " << t;
  }
}

// top_p keeps the smallest set of most likely tokens that reaches it: with probabilities 0.5, 0.3, 0.15,
// 0.05, top_p 0.75 keeps the first two (in proportion 5:3), a tiny top_p the argmax alone.
TEST(Sampling, TopPKeepsTheNucleus) {
  const std::vector<float> l = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  std::vector<int> count(4, 0);
  const int n = 20000;
  for (int seed = 0; seed < n; ++seed) ++count[sample_token(l, Sampling{1.0, 0.75, mix64(seed)}, 0)];
  EXPECT_EQ(count[0], 0);
  EXPECT_EQ(count[2], 0);
  const double share = static_cast<double>(count[1]) / n;  // expected 0.625
  EXPECT_NEAR(share, 0.625, 0.02);
  for (int seed = 0; seed < 200; ++seed) {
    const std::vector<float> r = RandomLogits(seed, 50);
    EXPECT_EQ(sample_token(r, Sampling{1.5, 1e-9, static_cast<uint64_t>(seed)}, 9),
              model::Model::argmax(r.data(), 50));
  }
  // A nucleus of tied logits breaks the tie by id: with top_p tiny, the lower id.
  const std::vector<float> tie = {0.0f, 2.0f, 2.0f};
  EXPECT_EQ(sample_token(tie, Sampling{1.0, 1e-9, 5}, 0), 1);
  // A vocabulary larger than the first partial sort (32), with a flat distribution: still a valid token.
  const std::vector<float> flat(1000, 0.25f);
  for (uint32_t p = 0; p < 20; ++p) {
    const int32_t t = sample_token(flat, Sampling{1.0, 0.95, 11}, p);
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 950);  // the nucleus of equal weights: the 950 lowest ids
  }
}

TEST(Sampling, BadInputIsANamedError) {
  const std::vector<float> ok = {1.0f, 2.0f};
  auto message = [&](const std::vector<float>& l, const Sampling& s) {
    try {
      sample_token(l, s, 3);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::vector<float> nan = ok;
  nan[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(message(nan, Sampling{0.7, 1.0, 1}).find("token 1 at position 3 is NaN"), std::string::npos);
  EXPECT_NE(message(nan, Sampling{}).find("is NaN"), std::string::npos);  // greedy too
  std::vector<float> inf = ok;
  inf[0] = std::numeric_limits<float>::infinity();
  EXPECT_NE(message(inf, Sampling{0.7, 1.0, 1}).find("+inf"), std::string::npos);
  const std::vector<float> none(3, -std::numeric_limits<float>::infinity());
  EXPECT_NE(message(none, Sampling{0.7, 1.0, 1}).find("-inf"), std::string::npos);
  EXPECT_NE(message({}, Sampling{}).find("empty"), std::string::npos);
  EXPECT_NE(message(ok, Sampling{-0.1, 1.0, 0}).find("temperature"), std::string::npos);
  EXPECT_NE(message(ok, Sampling{std::nan(""), 1.0, 0}).find("temperature"), std::string::npos);
  EXPECT_NE(message(ok, Sampling{0.7, 0.0, 0}).find("top_p"), std::string::npos);
  EXPECT_NE(message(ok, Sampling{0.7, 1.5, 0}).find("top_p"), std::string::npos);
  // -inf logits are allowed (weight 0): never drawn.
  const std::vector<float> masked = {-std::numeric_limits<float>::infinity(), 0.0f, 0.0f};
  for (uint32_t p = 0; p < 50; ++p) EXPECT_NE(sample_token(masked, Sampling{1.0, 1.0, 4}, p), 0);
  // The server refuses a request with a bad sampling before it runs.
  Request bad{1, 0, {1, 2}, 1, Sampling{-1.0, 1.0, 0}};
  EXPECT_THROW(engine_requests({bad}), std::invalid_argument);
}

// Speculation under sampling: a draft is kept while it equals the token the rule draws at its position from
// the row before, so a request served with drafts gets the tokens it gets without them (dropless, invariant
// kernels: the logits do not depend on the rows beside them), and some drafts are accepted.
TEST(Sampling, SpeculationGivesTheTokensOfNoSpeculation) {
  const auto weights = model::random_model(model::ModelShape::tiny(), 3);
  model::ModelOptions mo;
  mo.kernel = kernels::KernelKind::kInvariant;
  mo.policy = model::ModelOptions::dispatch_mode("dropless", 1.0);
  mo.record_routing = true;
  mo.max_tokens = 256;
  int64_t accepted = 0, drafted = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    // A prompt that repeats, so that prompt lookup proposes drafts.
    Request r{1, 0, {}, 40, Sampling{0.3, 0.95, seed}};
    for (int i = 0; i < 24; ++i) r.prompt.push_back(static_cast<int32_t>((i % 6) * 7 + seed));
    serving::EngineConfig plain = lab_engine_defaults();
    serving::EngineConfig spec = plain;
    spec.spec_tokens = 4;
    model::Model m(weights, mo);
    const ServeOutcome a = serve(m, {r}, plain, CacheKey::kSalted, 1);
    const ServeOutcome b = serve(m, {r}, spec, CacheKey::kSalted, 1);
    EXPECT_EQ(a.probe_tokens, b.probe_tokens) << "seed " << seed;
    EXPECT_EQ(a.probe_logits_hash, b.probe_logits_hash) << "seed " << seed;
    accepted += b.probe.accepted;
    drafted += b.probe.drafted;
    // Another seed draws other tokens (the draw is the seed's).
    Request other = r;
    other.sampling.seed = seed + 100;
    if (seed == 1) {
      EXPECT_NE(serve(m, {other}, plain, CacheKey::kSalted, 1).probe_tokens, a.probe_tokens);
    }
  }
  EXPECT_GT(drafted, 0);
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace moe::sim::diverge

// moe-sim fit: the moment estimates recover a known score model, the scenario it prints loads back as the
// same model, bad input is named, and the named score models.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "sim/errors.h"
#include "sim/fit.h"
#include "sim/scenario.h"
#include "sim/score_model.h"
#include "sim/sim_config.h"
#include "sim/trace_reader.h"
#include "tests/sim_test_util.h"

namespace moe::sim {
namespace {

// Logits of `requests` requests of `len` tokens drawn from `config` (E experts).
LogitsMatrix draw(const ScoreModelConfig& config, int E, int requests, int len,
                  std::vector<TokenMeta>& meta) {
  const ScoreModel model(config, E, 7);
  meta.clear();
  for (int r = 0; r < requests; ++r) {
    for (int p = 0; p < len; ++p) meta.push_back({static_cast<uint64_t>(100 + r), static_cast<uint32_t>(p)});
  }
  LogitsMatrix m;
  m.rows = static_cast<int64_t>(meta.size());
  m.cols = E;
  model.logits(meta, m.values);
  return m;
}

TEST(SimFit, RecoversAKnownModel) {
  ScoreModelConfig truth;
  truth.skew = Skew::explicit_values({1.0, 0.5, 0.25, 0.0, 0.0, -0.25, -0.5, -1.0});
  truth.topic_rho = 0.6;
  truth.noise_std = 1.5;
  truth.temperature = 2.0;  // logit units: s = 0.75, pop / 2
  std::vector<TokenMeta> meta;
  const LogitsMatrix m = draw(truth, 8, 400, 64, meta);
  const ScoreModelFit fit = fit_score_model(m, meta, FitMethod::kMoments);
  EXPECT_EQ(fit.requests, 400);
  EXPECT_EQ(fit.tokens, 400 * 64);
  EXPECT_FALSE(fit.topic_clamped);
  // The estimates' standard errors here are about 1 % (s) and 0.01 (rho); the bounds are 3 to 4 of them.
  EXPECT_NEAR(fit.noise_std, 0.75, 0.75 * 0.03);
  EXPECT_NEAR(fit.topic_rho, 0.6, 0.04);
  EXPECT_NEAR(fit.sigma_b, 0.75 * 0.6, 0.03);
  EXPECT_NEAR(fit.sigma_w, 0.75 * 0.8, 0.01);
  for (int e = 0; e < 8; ++e) EXPECT_NEAR(fit.popularity[e], truth.skew.values[e] / 2.0, 0.05) << e;
  // The normalised config: noise 1, temperature 1 / s, popularity pop / s.
  EXPECT_EQ(fit.config.noise_std, 1.0);
  EXPECT_DOUBLE_EQ(fit.config.temperature, 1.0 / fit.noise_std);
  ASSERT_EQ(fit.config.skew.kind, Skew::Kind::kExplicit);
  for (int e = 0; e < 8; ++e) EXPECT_DOUBLE_EQ(fit.config.skew.values[e], fit.popularity[e] / fit.noise_std);
}

TEST(SimFit, NoTopicIsClampedToZero) {
  ScoreModelConfig truth;
  truth.skew = Skew::parse("none");
  truth.topic_rho = 0.0;
  std::vector<TokenMeta> meta;
  const LogitsMatrix m = draw(truth, 4, 50, 40, meta);
  const ScoreModelFit fit = fit_score_model(m, meta, FitMethod::kMoments);
  EXPECT_NEAR(fit.noise_std, 1.0, 0.03);
  EXPECT_LT(fit.topic_rho, 0.08);
}

TEST(SimFit, RoutingCalibrationMatchesTheRecordedChoices) {
  ScoreModelConfig truth;
  truth.skew = Skew::parse("zipf:0.3");
  truth.topic_rho = 0.5;
  std::vector<TokenMeta> meta;
  LogitsMatrix m = draw(truth, 8, 200, 64, meta);
  // From the model itself the calibration finds its rho again (the moment estimate finds it too).
  const ScoreModelFit same = fit_score_model(m, meta, FitMethod::kRouting, 2);
  EXPECT_EQ(same.top_k, 2);
  EXPECT_GE(same.virtual_tokens, int64_t{1} << 17);
  EXPECT_FALSE(same.rho_clamped);
  EXPECT_NEAR(same.config.topic_rho, 0.5, 0.05);
  EXPECT_NEAR(same.topic_rho, 0.5, 0.05);
  // Not isotropic: expert 7, the least popular, gets 3x the spread. Its moment popularity is still the lowest
  // but it is chosen far more often; the calibrated model matches the shares the moments miss.
  const float pop7 = static_cast<float>(-0.3 * std::log(8.0));
  for (int64_t t = 0; t < m.rows; ++t) m.values[t * 8 + 7] = pop7 + 3.0f * (m.values[t * 8 + 7] - pop7);
  const ScoreModelFit fit = fit_score_model(m, meta, FitMethod::kRouting, 2);
  ASSERT_EQ(fit.recorded_share.size(), 8u);
  EXPECT_GT(fit.recorded_share[7], 0.15);  // uniform: 0.125; without the spread about 0.09
  for (int e = 0; e < 8; ++e) EXPECT_NEAR(fit.model_share[e], fit.recorded_share[e], 0.002) << e;
  EXPECT_NEAR(fit.model_dispersion, fit.recorded_dispersion, 0.02 * fit.recorded_dispersion);
  EXPECT_GT(fit.config.skew.values[7], fit.config.skew.values[0]);
  EXPECT_LT(fit.popularity[7], fit.popularity[1]);
  // The same input gives the same bits (the virtual workload's draws are seeded).
  const ScoreModelFit again = fit_score_model(m, meta, FitMethod::kRouting, 2);
  EXPECT_EQ(again.config.skew.values, fit.config.skew.values);
  EXPECT_EQ(again.config.topic_rho, fit.config.topic_rho);
  testing::expect_throw_with<UsageError>([&] { fit_score_model(m, meta, FitMethod::kRouting, 9); },
                                         "top-k must be in [1, 8]");
}

TEST(SimFit, TheScenarioLoadsBackAsTheFittedModel) {
  ScoreModelConfig truth;
  truth.skew = Skew::parse("zipf:0.7");
  std::vector<TokenMeta> meta;
  const LogitsMatrix m = draw(truth, 6, 20, 30, meta);
  const ScoreModelFit fit = fit_score_model(m, meta, FitMethod::kMoments);
  testing::ScratchDir dir;
  FitOptions options;
  options.logits_path = "l.npy";
  options.meta_path = "m.csv";
  options.trace_out_path = dir.file("trace.csv");
  const std::string text = fit_scenario_text(fit, options);
  const SimConfig c = build_config(parse_scenario(text, "fit.toml"));
  EXPECT_EQ(c.router.num_experts, 6);
  EXPECT_EQ(c.workload.token_budget, 0);
  EXPECT_EQ(c.workload.trace_file, dir.file("trace.csv"));
  EXPECT_EQ(c.scores.topic_rho, fit.config.topic_rho);
  EXPECT_EQ(c.scores.temperature, fit.config.temperature);
  EXPECT_EQ(c.scores.noise_std, 1.0);
  EXPECT_EQ(c.scores.skew.values, fit.config.skew.values);  // bit-exact: format_double reads back
  // The trace: one request per id in order of first appearance, its row count as the prompt.
  dir.write("trace.csv", fit_trace_text(meta));
  const auto requests = read_trace(dir.file("trace.csv"));
  ASSERT_EQ(requests.size(), 20u);
  EXPECT_EQ(requests[0].id, 100u);
  EXPECT_EQ(requests[19].id, 119u);
  EXPECT_EQ(requests[3].prompt_len, 30u);
  EXPECT_EQ(requests[3].decode_len, 0u);
  EXPECT_EQ(requests[3].arrival_step, 0);
}

TEST(SimFit, NamesBadInput) {
  ScoreModelConfig truth;
  std::vector<TokenMeta> meta;
  LogitsMatrix m = draw(truth, 4, 3, 5, meta);
  std::vector<TokenMeta> short_meta(meta.begin(), meta.end() - 1);
  testing::expect_throw_with<DataError>([&] { fit_score_model(m, short_meta); },
                                        "the meta has 14 rows but the logits have 15");
  LogitsMatrix nan = m;
  nan.values[2 * 4 + 3] = std::numeric_limits<float>::quiet_NaN();
  testing::expect_throw_with<DataError>([&] { fit_score_model(nan, meta); }, "row 2, column 3 is not finite");
  std::vector<TokenMeta> one(meta.size(), TokenMeta{5, 0});
  testing::expect_throw_with<DataError>([&] { fit_score_model(m, one); },
                                        "too few requests to estimate a topic");
  std::vector<TokenMeta> singles;
  for (size_t t = 0; t < meta.size(); ++t) singles.push_back({t, 0});
  testing::expect_throw_with<DataError>([&] { fit_score_model(m, singles); },
                                        "every request has a single row");
  LogitsMatrix narrow;
  narrow.rows = 4;
  narrow.cols = 1;
  narrow.values = {1, 2, 3, 4};
  std::vector<TokenMeta> four = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
  testing::expect_throw_with<DataError>([&] { fit_score_model(narrow, four); }, "at least 2 experts");
  LogitsMatrix flat;
  flat.rows = 4;
  flat.cols = 2;
  flat.values = {1, 2, 3, 4, 5, 6, 7, 8};  // every row is (c, c + 1): centred rows all equal
  testing::expect_throw_with<DataError>([&] { fit_score_model(flat, four); }, "do not vary");
  FitOptions none;
  testing::expect_throw_with<UsageError>([&] { run_fit(none, std::cout); }, "fit needs --logits");
}

TEST(SimScoreModels, NamedModelsAndExplicitPopularity) {
  EXPECT_EQ(named_score_model("gaussian").skew.to_string(), ScoreModelConfig().skew.to_string());
  const ScoreModelConfig mixtral = named_score_model("mixtral-8x7b");
  EXPECT_EQ(mixtral.name, "mixtral-8x7b");
  testing::expect_throw_with<UsageError>([] { named_score_model("gpt-4"); },
                                         "unknown score model 'gpt-4' (known: gaussian, mixtral-8x7b)");
  // --scores sets every field; explicit flags override it.
  const SimConfig c = build_config({{"scores", "mixtral-8x7b"}, {"topic-rho", "0.9"}});
  EXPECT_EQ(c.scores.name, "mixtral-8x7b");
  EXPECT_EQ(c.scores.skew.to_string(), mixtral.skew.to_string());
  EXPECT_EQ(c.scores.topic_rho, 0.9);
  // popularity = explicit skew; its length must match the experts; it conflicts with another skew.
  const SimConfig p = build_config({{"experts", "4"}, {"top-k", "1"}, {"popularity", "0.5, 0,-0.5,1"}});
  ASSERT_EQ(p.scores.skew.kind, Skew::Kind::kExplicit);
  EXPECT_EQ(p.scores.skew.values, (std::vector<double>{0.5, 0, -0.5, 1}));
  EXPECT_EQ(ScoreModel(p.scores, 4, 0).popularity(), p.scores.skew.values);
  testing::expect_throw_with<UsageError>([&] { ScoreModel(p.scores, 8, 0); },
                                         "popularity has 4 values, the router has 8 experts");
  testing::expect_throw_with<UsageError>(
      [] {
        build_config({{"popularity", "1,2"}, {"skew", "zipf:1"}});
      },
      "popularity sets the skew to explicit, but skew is 'zipf:1'");
  testing::expect_throw_with<UsageError>(
      [] {
        build_config({{"skew", "explicit"}});
      },
      "skew explicit needs its values");
  testing::expect_throw_with<UsageError>([] { build_config({{"popularity", "1,nan"}}); }, "not finite");
}

}  // namespace
}  // namespace moe::sim

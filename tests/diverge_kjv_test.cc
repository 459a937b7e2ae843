// The divergence lab on the trained model (models/kjv-moe): a text prompt, stranger prompts from the held-out
// text, completions as text. Greedy dispatch gives the probe more than one completion; sequence scope
// (stable) with invariant kernels exactly one, with bit-identical logits in every trial. The distinct
// completions (text, count, first divergence) account for every trial, in the report and in the JSON.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "sim/diverge/diverge.h"

namespace moe::sim::diverge {
namespace {

DivergeOptions kjv_options() {
  DivergeOptions o;
  o.model_dir = MOE_SOURCE_DIR "/models/kjv-moe";
  o.corpus_dir = MOE_KJV_CORPUS;
  o.prompt = default_prompts().front();
  o.trials = 12;
  o.gen_length = 24;
  o.threads = 2;
  o.sweep_capacity_factors.clear();
  o.grid = {{"greedy", kernels::KernelKind::kInvariant, 1.0, false},
            {"stable", kernels::KernelKind::kInvariant, 1.0, true}};
  return o;
}

TEST(DivergeKjv, GreedyDivergesStableDoesNot) {
  const DivergeReport report = run_diverge(kjv_options());
  ASSERT_TRUE(report.tokenizer);
  // The probe's prompt: the first shared system prompt, then its text.
  ASSERT_FALSE(report.probe_system.empty());
  EXPECT_EQ(report.tokenizer->decode(
                std::span<const int32_t>(report.probe_prompt).subspan(report.probe_system.size())),
            default_prompts().front());
  EXPECT_TRUE(
      std::equal(report.probe_system.begin(), report.probe_system.end(), report.probe_prompt.begin()));
  const ConfigResult& greedy = report.grid[0];
  const ConfigResult& stable = report.grid[1];
  std::printf("greedy: %d distinct of 12, stable/varied: %d distinct, %d bit-identical\n", greedy.distinct,
              stable.distinct, stable.bitwise_same);
  EXPECT_GT(greedy.distinct, 1);
  EXPECT_EQ(stable.distinct, 1);
  EXPECT_EQ(stable.diverged, 0);
  EXPECT_EQ(stable.bitwise_same, 12);
  for (const ConfigResult* r : {&greedy, &stable}) {
    int total = 0;
    for (const Completion& c : r->distinct_completions) {
      total += c.count;
      EXPECT_EQ(c.first_divergence < 0, c.tokens == r->alone);
    }
    EXPECT_EQ(total, 12);
    EXPECT_EQ(static_cast<int>(r->distinct_completions.size()), r->distinct);
  }
  const auto j = nlohmann::json::parse(to_json(report));
  EXPECT_EQ(j["prompt"], default_prompts().front());
  EXPECT_EQ(j["system_prompt"], model::printable(report.tokenizer->decode(report.probe_system)));
  const auto& completions = j["grid"][0]["completions"];
  ASSERT_EQ(completions.size(), static_cast<size_t>(greedy.distinct));
  for (size_t i = 0; i < completions.size(); ++i) {
    const Completion& c = greedy.distinct_completions[i];
    EXPECT_EQ(completions[i]["count"], c.count);
    EXPECT_EQ(completions[i]["first_divergence"], c.first_divergence);
    EXPECT_EQ(completions[i]["text"], model::printable(report.tokenizer->decode(c.tokens)));
  }
  EXPECT_NE(format_completions(report).find("alone"), std::string::npos);
}

TEST(DivergeKjv, MissingCorpusNamesTheFetchScript) {
  DivergeOptions o = kjv_options();
  o.corpus_dir = (std::filesystem::temp_directory_path() / "no-kjv-here").string();
  try {
    run_diverge(o);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("scripts/fetch-corpus.sh"), std::string::npos) << e.what();
  }
  o = kjv_options();
  o.model_dir.clear();
  EXPECT_THROW(run_diverge(o), std::invalid_argument);  // a text prompt without a tokenizer
}

}  // namespace
}  // namespace moe::sim::diverge

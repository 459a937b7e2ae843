// `moe-sim quality` (sim/quality): the dropless perplexity it reports against an independent float64 forward
// of the trained model (relative error <= 1e-5), the comparison with dropless aligned prediction by
// prediction, the metrics by hand, the windows, the equal-quality choice, the reports, and bad inputs named.
#include "sim/quality/quality.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moe/model/model.h"
#include "moe/model/tokenizer.h"
#include "sim/errors.h"
#include "sim/npy.h"
#include "sim/quality/metrics.h"
#include "sim/quality/report.h"
#include "sim/quality/scored_text.h"
#include "tests/quality_reference.h"
#include "tests/quality_test_util.h"
#include "tests/sim_test_util.h"

namespace moe::sim::quality {
namespace {

namespace fs = std::filesystem;
const fs::path kModel = kKjvModel;

// A small run: windows of 64, a few per serving run, among the lab's strangers.
QualityOptions small_options() {
  QualityOptions o;
  o.window = 64;
  o.max_tokens = 256;
  o.windows_per_segment = 2;
  o.arrivals = {4, 4};
  o.modes = {"greedy", "stable"};
  o.overflows = {Overflow::kDrop};
  o.capacity_factors = {0.5, 4.0};
  o.refine = 0;
  return o;
}

// The reference itself, against the torch twin's logits of the committed checkpoint (reference_logits.npy):
// a third implementation, so that the reference is checked before it checks anything.
TEST(QualityReference, Float64ForwardMatchesTheTorchLogits) {
  const NpyArray tokens = read_npy((kModel / "reference_tokens.npy").string());
  const NpyArray want = read_npy((kModel / "reference_logits.npy").string());
  ASSERT_EQ(tokens.shape.size(), 2u);
  const int64_t T = tokens.shape[1];
  const int V = kjv_weights()->shape.vocab_size;
  std::vector<int32_t> seq(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) seq[static_cast<size_t>(t)] = tokens.i32(static_cast<size_t>(t));
  const auto logits = quality_test::reference_logits(*kjv_weights(), seq);
  double max_ref = 0, max_diff = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int v = 0; v < V; ++v) {
      const double ref = want.f32(static_cast<size_t>(t * V + v));
      max_ref = std::max(max_ref, std::fabs(ref));
      max_diff = std::max(max_diff, std::fabs(logits[static_cast<size_t>(t)][static_cast<size_t>(v)] - ref));
    }
  }
  EXPECT_LE(max_diff / max_ref, 1e-5) << "max |diff| " << max_diff << " of max |logit| " << max_ref;
}

// The headline check: dropless perplexity through the serving engine (windows prefilled in chunks of 16 among
// strangers) equals the float64 forward of each window alone, for both kernel kinds.
TEST(QualityReference, DroplessPerplexityEqualsTheFloat64Forward) {
  const QualityInput in = heldout_input();
  QualityOptions o = small_options();
  o.modes = {"greedy"};
  o.capacity_factors = {1.0};
  const std::vector<Window> windows =
      select_windows(static_cast<int64_t>(in.stream.size()), o.window, o.max_tokens);
  ASSERT_EQ(windows.size(), 4u);
  double nll = 0;
  int64_t count = 0;
  for (const Window& w : windows) {
    const std::vector<int32_t> seq(in.stream.begin() + w.start, in.stream.begin() + w.start + w.length + 1);
    nll += quality_test::reference_nll(*kjv_weights(), seq);
    count += w.length;
  }
  const double want = std::exp(nll / static_cast<double>(count));
  for (auto kernel : {kernels::KernelKind::kInvariant, kernels::KernelKind::kFast}) {
    o.kernel = kernel;
    const QualityReport r = run_quality(o, in);
    ASSERT_EQ(r.dropless.tokens.tokens, count);
    EXPECT_GT(r.dropless.counts.rows, r.dropless.counts.text_rows) << "strangers shared the batches";
    const double got = r.dropless.perplexity();
    std::printf("%s: dropless perplexity %.7f, float64 forward %.7f, relative error %.2g\n",
                std::string(kernels::to_string(kernel)).c_str(), got, want, std::fabs(got - want) / want);
    EXPECT_LE(std::fabs(got - want), 1e-5 * want);
  }
}

// The policies' predictions are compared with dropless's prediction by prediction: a capacity no pair
// overflows (batch scope at cf 4 = E / k holds every row at every expert) gives dropless's bits, so agreement
// 1, KL exactly 0 and the same summed loss; a starved one loses pairs and quality.
TEST(QualityReference, ComparisonWithDroplessIsAligned) {
  const QualityReport r = run_quality(small_options(), heldout_input());
  ASSERT_EQ(r.points.size(), 4u);
  EXPECT_EQ(r.dropless.tokens.agree, r.dropless.tokens.tokens);
  EXPECT_EQ(r.dropless.tokens.kl, 0.0);
  const PointResult& ample = r.points[1];  // greedy/drop cf 4
  ASSERT_EQ(ample.spec.capacity_factor, 4.0);
  EXPECT_EQ(ample.counts.dropped, 0);
  EXPECT_EQ(ample.tokens.agree, ample.tokens.tokens);
  EXPECT_EQ(ample.tokens.kl, 0.0);
  EXPECT_EQ(ample.tokens.nll, r.dropless.tokens.nll);
  const PointResult& starved = r.points[0];  // greedy/drop cf 0.5
  EXPECT_GT(starved.text_drop_rate(), 0.2);
  EXPECT_GT(starved.kl(), 0.0);
  EXPECT_LT(starved.agreement(), 1.0);
  EXPECT_GT(starved.perplexity(), r.dropless.perplexity());
  // The same steps for every policy (no cache, no speculation): the same rows.
  for (const PointResult& p : r.points) {
    EXPECT_EQ(p.counts.steps, r.dropless.counts.steps);
    EXPECT_EQ(p.counts.rows, r.dropless.counts.rows);
    EXPECT_EQ(p.counts.pairs, p.counts.kept + p.counts.rerouted + p.counts.dropped);
  }
  // Batch scope offers ceil(cf T k / E) at every expert: slots within E of cf x pairs.
  EXPECT_NEAR(ample.slots_per_step(), 4.0 * ample.pairs_per_step(), 8.0);
}

TEST(QualityMetrics, ScoresByHand) {
  const int V = 3;
  const float ref_logits[V] = {2.0f, 1.0f, 0.0f};
  const float logits[V] = {0.0f, 1.0f, 0.5f};
  Reference ref(1, V);
  ref.store(0, ref_logits);
  EXPECT_EQ(ref.top(0), 0);
  TokenTotals same, other;
  score_token(ref_logits, 1, ref, 0, same);
  EXPECT_EQ(same.kl, 0.0);
  EXPECT_EQ(same.agree, 1);
  EXPECT_EQ(same.correct, 0);
  score_token(logits, 1, ref, 0, other);
  // By hand: p = softmax(2, 1, 0), q = softmax(0, 1, 0.5).
  const double zp = std::exp(2.0) + std::exp(1.0) + 1.0, zq = 1.0 + std::exp(1.0) + std::exp(0.5);
  const double p[] = {std::exp(2.0) / zp, std::exp(1.0) / zp, 1.0 / zp};
  const double q[] = {1.0 / zq, std::exp(1.0) / zq, std::exp(0.5) / zq};
  double kl = 0;
  for (int v = 0; v < V; ++v) kl += p[v] * std::log(p[v] / q[v]);
  EXPECT_NEAR(other.kl, kl, 1e-12);
  EXPECT_NEAR(other.nll, -std::log(q[1]), 1e-12);
  EXPECT_EQ(other.agree, 0);
  EXPECT_EQ(other.correct, 1);
  EXPECT_NEAR(log_sum_exp(logits, V), std::log(zq), 1e-12);
}

TEST(QualityWindows, EvaluatesCutAndSpreadSample) {
  // evaluate()'s cut: inputs at stride 4, every token but the first predicted once, the last window shorter.
  const std::vector<Window> all = select_windows(10, 4, 0);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].start, 0);
  EXPECT_EQ(all[0].length, 4);
  EXPECT_EQ(all[2].start, 8);
  EXPECT_EQ(all[2].length, 1);
  // A sample: ceil(max_tokens / window) windows spread over the text (window i * n / count).
  const std::vector<Window> some = select_windows(1001, 10, 25);
  ASSERT_EQ(some.size(), 3u);
  EXPECT_EQ(some[0].start, 0);
  EXPECT_EQ(some[1].start, 330);
  EXPECT_EQ(some[2].start, 660);
  EXPECT_EQ(select_windows(1001, 10, 100000).size(), 100u);
}

TEST(QualityEqual, SmallestFactorWithinTheTolerance) {
  auto point = [](const std::string& mode, Overflow o, double cf, double ppl) {
    PointResult p;
    p.spec = {mode, o, cf};
    p.tokens.tokens = 1;
    p.tokens.nll = std::log(ppl);
    return p;
  };
  PointResult dropless = point("dropless", Overflow::kDrop, 0, 20.0);
  const std::vector<PointResult> pts = {
      point("greedy", Overflow::kDrop, 1.0, 21.0), point("greedy", Overflow::kDrop, 1.5, 20.1),
      point("greedy", Overflow::kDrop, 1.25, 20.19), point("stable", Overflow::kDrop, 1.0, 25.0),
      point("stable", Overflow::kDrop, 2.0, 20.3)};
  const std::vector<EqualQuality> eq = equal_quality(dropless, pts, 0.01);
  ASSERT_EQ(eq.size(), 2u);
  EXPECT_TRUE(eq[0].found);
  EXPECT_EQ(eq[0].point.spec.capacity_factor, 1.25);  // 20.19 <= 20.2, whatever order the factors came in
  EXPECT_FALSE(eq[1].found);
}

// The refinement bisects between the grid's answer and the factor below it.
TEST(QualityEqual, RefinementBisectsBelowTheGridsAnswer) {
  QualityOptions o = small_options();
  o.modes = {"greedy"};
  o.capacity_factors = {0.5, 4.0};
  o.refine = 2;
  const QualityReport r = run_quality(o, heldout_input());
  ASSERT_EQ(r.equal.size(), 1u);
  const EqualQuality& e = r.equal[0];
  ASSERT_TRUE(e.found);
  ASSERT_EQ(e.refinements.size(), 2u);
  EXPECT_EQ(e.refinements[0].spec.capacity_factor, 2.25);
  const double limit = r.dropless.perplexity() * 1.01;
  const double second = e.refinements[0].perplexity() <= limit ? 1.375 : 3.125;
  EXPECT_EQ(e.refinements[1].spec.capacity_factor, second);
  double best = 4.0, over = 0.5;
  for (const PointResult& p : e.refinements) {
    if (p.perplexity() <= limit) {
      best = std::min(best, p.spec.capacity_factor);
    } else {
      over = std::max(over, p.spec.capacity_factor);
    }
  }
  EXPECT_EQ(e.point.spec.capacity_factor, best);
  EXPECT_EQ(e.below, over);  // the answer's bracket: (below, answer]
  // The plot draws the midpoints with the grid's factors: 4 points on greedy/drop's line.
  const std::string svg = to_svg(r);
  const size_t line = svg.find("data-series=\"greedy/drop\"");
  ASSERT_NE(line, std::string::npos);
  const std::string points = svg.substr(line, svg.find("\"/>", line) - line);
  EXPECT_EQ(std::count(points.begin(), points.end(), ','), 4);
}

TEST(QualityReports, TableJsonCsvSvg) {
  QualityOptions o = small_options();
  o.overflows = {Overflow::kDrop, Overflow::kReroute};
  const QualityReport r = run_quality(o, heldout_input());
  const std::string table = format_table(r);
  for (const char* label : {"dropless", "greedy/drop", "greedy/reroute", "stable/drop", "stable/reroute"}) {
    EXPECT_NE(table.find(std::string("\n") + label + " "), std::string::npos) << label << "\n" << table;
  }
  EXPECT_NE(table.find("equal quality: the smallest capacity factor within 1% of dropless"),
            std::string::npos);
  const auto j = nlohmann::json::parse(to_json(r));
  ASSERT_EQ(j["points"].size(), 9u);
  EXPECT_EQ(j["points"][0]["mode"], "dropless");
  EXPECT_TRUE(j["points"][0]["capacity_factor"].is_null());
  EXPECT_EQ(j["points"][1]["overflow"], "drop");
  EXPECT_DOUBLE_EQ(j["points"][1]["perplexity"].get<double>(), r.points[0].perplexity());
  EXPECT_EQ(j["equal_quality"].size(), 4u);
  const std::string csv = to_csv(r);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 10);
  EXPECT_EQ(csv.rfind("mode,overflow,capacity_factor,perplexity,", 0), 0u);
  const std::string svg = to_svg(r);
  size_t polylines = 0;
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1))
    ++polylines;
  EXPECT_EQ(polylines, 2u + 4u);  // dropless and its tolerance, then one per mode and overflow
  EXPECT_NE(svg.find("data-series=\"stable/reroute\""), std::string::npos);
  EXPECT_EQ(svg.find("data-series=\"dropless\" fill=\"none\" stroke=\"#888888\""),
            svg.find("data-series=\"dropless\""));
}

TEST(QualityInputs, BadFilesAreNamed) {
  using testing::expect_throw_with;
  const testing::ScratchDir dir;
  const model::Tokenizer tok = model::Tokenizer::load(kModel);
  expect_throw_with<DataError>([&] { read_text_tokens(dir.file("missing.txt"), tok); },
                               "cannot open text file '" + dir.file("missing.txt") + "': no such file");
  const std::string empty = dir.write("empty.txt", "");
  expect_throw_with<DataError>([&] { read_text_tokens(empty, tok); }, "holds 0 token(s)");
  const std::string ids = dir.write("ids.txt", "5 6,7\n8 x9\n");
  expect_throw_with<DataError>([&] { read_token_file(ids); }, "line 2: 'x9' is not a token id");
  EXPECT_EQ(read_token_file(dir.write("good.txt", "5 6,7\n8\n")), (std::vector<int32_t>{5, 6, 7, 8}));
  expect_throw_with<DataError>([&] { read_token_file(dir.write("one.txt", "5\n")); }, "holds 1 token(s)");
  // numpy's default integer (int64) is named with its conversion.
  std::string npy = "\x93NUMPY\x01\x00";
  std::string header = "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }";
  header.resize(118 - 1, ' ');
  header += '\n';
  npy += static_cast<char>(header.size() & 0xff);
  npy += static_cast<char>(header.size() >> 8);
  npy += header + std::string(16, '\0');
  expect_throw_with<DataError>([&] { read_token_file(dir.write("i8.npy", npy)); }, "int64 ids ('<i8')");
  // Tokens outside the vocabulary: the index and the value.
  QualityInput in = heldout_input();
  in.stream[1000] = 1024;
  expect_throw_with<DataError>([&] { run_quality(small_options(), in); },
                               "token 1000 is 1024, outside the model's vocabulary [0, 1024)");
  in.stream[1000] = -1;
  expect_throw_with<DataError>([&] { run_quality(small_options(), in); }, "token 1000 is -1");
  // A text too short for the strangers' prompts (windows of it), unless there are none.
  in.stream.assign(heldout_tokens().begin(), heldout_tokens().begin() + 40);
  expect_throw_with<DataError>([&] { run_quality(small_options(), in); },
                               "holds 40 tokens, fewer than their longest prompt (96)");
  QualityOptions alone = small_options();
  alone.traffic.arrival_rate = 0;
  EXPECT_EQ(run_quality(alone, in).dropless.tokens.tokens, 39);
}

TEST(QualityInputs, ImpossibleSettingsAreUsageErrors) {
  auto invalid = [](auto&& change, const std::string& message) {
    QualityOptions o;
    change(o);
    testing::expect_throw_with<UsageError>([&] { o.validate(256); }, message);
  };
  for (double cf :
       {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), 2e6}) {
    invalid([&](QualityOptions& o) { o.capacity_factors = {1.0, cf}; }, "capacity_factor must be");
  }
  invalid(
      [](QualityOptions& o) {
        o.capacity_factors = {1.0, 0.0};
      },
      "capacity factor: dispatch policy: capacity_factor must be finite and > 0 (got 0)");
  invalid([](QualityOptions& o) { o.modes = {"fast"}; }, "unknown dispatch mode 'fast'");
  invalid([](QualityOptions& o) { o.modes = {"dropless"}; }, "'dropless' is the reference");
  invalid([](QualityOptions& o) { o.modes = {"stable", "stable"}; }, "mode 'stable' is given twice");
  invalid([](QualityOptions& o) { o.capacity_factors.clear(); }, "no capacity factors");
  invalid(
      [](QualityOptions& o) {
        o.capacity_factors = {1.25, 1, 1.25};
      },
      "capacity factor 1.25 is given twice");
  invalid([](QualityOptions& o) { o.window = 257; }, "window (257) must be in [1, 256]");
  invalid([](QualityOptions& o) { o.engine.token_budget = 0; }, "token_budget (0)");
  invalid([](QualityOptions& o) { o.traffic.decode_max = 200; }, "exceed the model's max_positions");
  invalid([](QualityOptions& o) { o.tolerance = 0; }, "tolerance (0) must be > 0");
  invalid([](QualityOptions& o) { o.refine = 11; }, "refine (11)");
  EXPECT_NO_THROW(QualityOptions().validate(256));
}

}  // namespace
}  // namespace moe::sim::quality

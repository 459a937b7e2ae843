// `moe-sim quality` (sim/quality) bit for bit: the same report bytes (table, JSON, CSV, SVG) for 1 and 2
// threads (4 serving runs over 2 workers); and order-stable dispatch's promise carried to quality - under
// stable (prefix scope) with invariant kernels the scored text's predictions do not depend on the traffic, so
// its metrics are the same bits with strangers at any rate or none, while greedy's move.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/quality/quality.h"
#include "sim/quality/report.h"
#include "sim/quality/scored_text.h"
#include "tests/quality_test_util.h"

namespace moe::sim::quality {
namespace {

QualityOptions small_options() {
  QualityOptions o;
  o.window = 32;
  o.max_tokens = 128;
  o.windows_per_segment = 1;  // 4 serving runs: the unit of parallel work
  o.arrivals = {4, 4};
  o.modes = {"greedy", "stable"};
  o.overflows = {Overflow::kDrop, Overflow::kReroute};
  o.capacity_factors = {0.75, 1.5};
  o.refine = 1;
  return o;
}

TEST(QualityInvariance, SameBytesForAnyThreadCount) {
  const QualityInput in = heldout_input();
  QualityOptions o = small_options();
  std::vector<std::string> first;
  for (int threads : {1, 2}) {
    o.threads = threads;
    const QualityReport r = run_quality(o, in);
    ASSERT_EQ(r.segments, 4);
    const std::vector<std::string> out = {format_table(r), to_json(r), to_csv(r), to_svg(r)};
    if (first.empty()) {
      first = out;
      continue;
    }
    for (size_t i = 0; i < out.size(); ++i)
      EXPECT_EQ(out[i], first[i]) << "threads " << threads << ", report " << i;
  }
}

TEST(QualityInvariance, StableTextMetricsDoNotDependOnTheTraffic) {
  const QualityInput in = heldout_input();
  QualityOptions o = small_options();
  o.overflows = {Overflow::kDrop};
  o.refine = 0;
  o.threads = 2;
  std::vector<QualityReport> runs;
  for (double rate : {0.0, 0.25, 0.5}) {
    o.traffic.arrival_rate = rate;
    runs.push_back(run_quality(o, in));
  }
  ASSERT_LT(runs[0].dropless.counts.rows, runs[2].dropless.counts.rows);  // the traffic changed the batches
  bool greedy_moved = false;
  for (size_t p = 0; p < runs[0].points.size(); ++p) {
    const PointResult& a = runs[0].points[p];
    for (const QualityReport& r : {runs[1], runs[2]}) {
      const PointResult& b = r.points[p];
      if (a.spec.mode == "stable") {
        EXPECT_EQ(a.tokens.nll, b.tokens.nll) << a.spec.label() << " cf " << a.spec.capacity_factor;
        EXPECT_EQ(a.tokens.kl, b.tokens.kl);
        EXPECT_EQ(a.tokens.agree, b.tokens.agree);
        EXPECT_EQ(a.counts.text_dropped, b.counts.text_dropped);
      } else {
        greedy_moved |= a.tokens.nll != b.tokens.nll;
      }
    }
  }
  EXPECT_TRUE(greedy_moved) << "the counter-check: greedy's text metrics change with the traffic";
}

}  // namespace
}  // namespace moe::sim::quality

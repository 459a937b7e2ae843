// Spreading points over ranks (sim/distribute.h) without MPI: the ranks' blocks cover the points once, a
// point's statistics travel bit for bit, and a sweep split into any blocks gives the statistics of the whole.
// Under mpirun: tests/sim_mpi_test.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "sim/distribute.h"
#include "sim/errors.h"
#include "sim/run_stats_codec.h"
#include "sim/sweep.h"

namespace moe::sim {
namespace {

std::string bytes_of(const RunStats& s) {
  std::string out;
  encode_run_stats(s, out);
  return out;
}

std::string bytes_of(const std::vector<PointResult>& points) {
  std::string out;
  for (const PointResult& p : points) {
    out += std::to_string(p.requests) + ":";
    encode_run_stats(p.stats, out);
  }
  return out;
}

TEST(SimDistribute, RangesCoverEveryPointOnceInOrder) {
  for (size_t count : {0, 1, 2, 3, 7, 12, 150}) {
    for (int ranks : {1, 2, 3, 4, 7, 16}) {
      size_t next = 0, smallest = count, largest = 0;
      for (int r = 0; r < ranks; ++r) {
        const PointRange range = point_range(count, r, ranks);
        EXPECT_EQ(range.begin, next) << count << " points, rank " << r << " of " << ranks;
        EXPECT_LE(range.begin, range.end);
        smallest = std::min(smallest, range.size());
        largest = std::max(largest, range.size());
        next = range.end;
      }
      EXPECT_EQ(next, count);
      EXPECT_LE(largest - std::min(smallest, largest), 1u) << "balanced within one point";
    }
  }
}

TEST(SimDistribute, StatisticsTravelBitForBit) {
  RunStats s;
  s.steps = 3;
  s.tokens = 1 << 20;
  s.pairs = -1;
  s.kept = std::numeric_limits<int64_t>::max();
  s.rerouted = 5;
  s.dropped = 6;
  s.tokens_fully_dropped = 7;
  s.expert_load = {1, 2, 3};
  s.expert_capacity = {-1, -1, -1};
  s.drop_rate = 0.1;
  s.load_imbalance = std::nextafter(1.0, 2.0);
  s.step_drop_rate_mean = -0.0;
  s.step_drop_rate_max = std::numeric_limits<double>::denorm_min();
  s.step_imbalance_mean = std::numeric_limits<double>::quiet_NaN();
  s.step_imbalance_max = std::numeric_limits<double>::infinity();
  s.step_capacity_min = 1.5;
  s.step_capacity_mean = 2.5;
  s.step_capacity_max = 3.5;
  s.step_peak_load_mean = 4.5;
  s.step_peak_load_max = 5.5;
  s.peak_live_requests = 9;
  s.routing.tokens = 10;
  s.routing.pairs = 20;
  s.routing.choices = {4, 0, 16};
  s.routing.share_min = 0.2;
  s.routing.share_max = 0.8;
  s.routing.load_imbalance = 2.4;
  s.routing.consecutive = 8;
  s.routing.same_first = 0.25;
  s.routing.same_first_or_second = 0.75;
  std::string wire;
  encode_run_stats(s, wire);
  encode_run_stats(RunStats{}, wire);
  size_t at = 0;
  const RunStats a = decode_run_stats(wire, at);
  const RunStats b = decode_run_stats(wire, at);
  EXPECT_EQ(at, wire.size());
  EXPECT_EQ(bytes_of(a), bytes_of(s));
  EXPECT_EQ(bytes_of(b), bytes_of(RunStats{}));
  EXPECT_TRUE(std::signbit(a.step_drop_rate_mean));
  EXPECT_TRUE(std::isnan(a.step_imbalance_mean));
  EXPECT_EQ(a.routing.choices, s.routing.choices);
  // Truncated bytes and an impossible length are errors, not reads past the end.
  for (size_t cut : {size_t{0}, size_t{7}, wire.size() / 4, wire.size() / 2 - 1}) {
    size_t offset = 0;
    EXPECT_THROW(decode_run_stats(std::string_view(wire).substr(0, cut), offset), DataError) << cut;
  }
  std::string huge(8 * 7, '\0');
  const uint64_t n = uint64_t{1} << 60;
  huge.append(reinterpret_cast<const char*>(&n), sizeof n);
  size_t offset = 0;
  EXPECT_THROW(decode_run_stats(huge, offset), DataError);
}

// Any split of a sweep's points into rank blocks gives the statistics of the whole sweep, bit for bit: a
// point's statistics do not depend on which other points share its pass - with the prefix cache too, whose
// steps are the whole combination's (keyed by every point's rule: here greedy's tokens and stable's salt).
TEST(SimDistribute, SweepSplitIntoBlocksEqualsTheWhole) {
  const Overrides o = {{"axis", "top-k=1,2"},
                       {"modes", "greedy,stable,rank-only"},
                       {"capacity-factors", "0.75,1.25"},
                       {"requests", "20"},
                       {"token-budget", "96"},
                       {"decode-len", "uniform:2,12"},
                       {"arrival-rate", "0.5"}};
  Overrides cached = o;
  for (const auto& [k, v] : Overrides{{"system-prompts", "2"},
                                      {"system-prompt-len", "uniform:16,40"},
                                      {"prefix-cache", "true"},
                                      {"kv-blocks", "48"},
                                      {"block-size", "8"},
                                      {"prompt-len", "uniform:20,80"}}) {
    cached[k] = v;
  }
  for (const Overrides& overrides : {o, cached}) {
    const bool cache = overrides.count("prefix-cache") > 0;
    const size_t count = sweep_points(overrides).size();
    ASSERT_EQ(count, 12u);
    const std::vector<PointResult> all = sweep_stats(overrides, {0, count});
    if (cache) {
      EXPECT_GT(all.back().stats.engine.cached_prompt_tokens, 0);
    }
    const std::string whole = bytes_of(all);
    for (int ranks : {2, 3, 5, 12, 13}) {
      std::vector<PointResult> joined;
      for (int r = 0; r < ranks; ++r) {
        for (PointResult& p : sweep_stats(overrides, point_range(count, r, ranks)))
          joined.push_back(std::move(p));
      }
      EXPECT_EQ(bytes_of(joined), whole) << ranks << " ranks" << (cache ? ", prefix cache" : "");
    }
  }
  // Points carry the policy they ran: a --modes stable point says prefix scope whatever --mode says.
  for (const SweepPoint& p : sweep_points(o)) {
    EXPECT_EQ(p.policy.capacity_factor, p.capacity_factor);
    if (p.mode == "stable") {
      EXPECT_EQ(p.policy.scope, CapacityScope::kPrefix);
    } else {
      EXPECT_EQ(p.policy.scope, CapacityScope::kBatch) << p.mode;
    }
  }
}

TEST(SimDistribute, OneProcessComputesEveryPoint) {
  size_t calls = 0;
  const std::vector<PointResult> all = compute_points(5, nullptr, [&](PointRange range) {
    ++calls;
    EXPECT_EQ(range.begin, 0u);
    EXPECT_EQ(range.end, 5u);
    std::vector<PointResult> out(range.size());
    for (size_t i = 0; i < out.size(); ++i) out[i].requests = static_cast<int64_t>(i);
    return out;
  });
  EXPECT_EQ(calls, 1u);
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[4].requests, 4);
  EXPECT_THROW(compute_points(2, nullptr, [](PointRange) { return std::vector<PointResult>(1); }),
               std::logic_error);
  EXPECT_THROW(
      compute_points(2, nullptr, [](PointRange) -> std::vector<PointResult> { throw DataError("no trace"); }),
      DataError);
}

}  // namespace
}  // namespace moe::sim

// sim/diverge: the scheduler's batch formation, traffic, summaries, reports, and the headline claim that
// greedy dispatch at capacity factor <= 1 gives a probe more than one completion.
#include "sim/diverge/diverge.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "moe/model/model.h"
#include "sim/diverge/serving.h"
#include "sim/diverge/traffic.h"

namespace moe::sim::diverge {
namespace {

using Rows = std::vector<model::BatchRow>;

// Logits that make every sampled token equal to `token`.
std::vector<float> one_hot_logits(size_t rows, int vocab, int token) {
  std::vector<float> l(rows * vocab, 0.0f);
  for (size_t r = 0; r < rows; ++r) l[r * vocab + token] = 1.0f;
  return l;
}

// The last row of each request in the batch (what Model::forward reports).
std::vector<int32_t> last_rows(const Rows& rows) {
  std::vector<int32_t> out;
  for (size_t r = 0; r < rows.size(); ++r) {
    bool last = true;
    for (size_t s = r + 1; s < rows.size(); ++s) last = last && rows[s].request_id != rows[r].request_id;
    if (last) out.push_back(static_cast<int32_t>(r));
  }
  return out;
}

TEST(Scheduler, DecodesFirstThenChunksInArrivalOrder) {
  SchedulerConfig c;
  c.token_budget = 4;
  c.chunk_size = 4;
  std::vector<Request> reqs = {
      {2, 0, {20, 21, 22}, 2},
      {1, 0, {10, 11, 12, 13, 14}, 2},
      {3, 1, {30}, 1},
  };
  Scheduler s(c, reqs);
  std::vector<uint64_t> finished;
  auto step = [&](int token) {
    Rows rows = s.next_batch();
    auto lr = last_rows(rows);
    auto logits = one_hot_logits(lr.size(), 50, token);
    s.complete(lr, logits, 50, finished);
    return rows;
  };
  // Step 0: request 1 (same arrival step, lower id) takes a full chunk of 4; no budget left for 2.
  Rows r = step(40);
  ASSERT_EQ(r.size(), 4u);
  for (uint32_t p = 0; p < 4; ++p) EXPECT_EQ(r[p].request_id, 1u);
  // Step 1: running 1 finishes its prompt (1 row), then waiting 2 (3 rows); 3 waits.
  r = step(41);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].request_id, 1u);
  EXPECT_EQ(r[0].position, 4u);
  EXPECT_EQ(r[1].request_id, 2u);
  EXPECT_EQ(r[3].position, 2u);
  EXPECT_EQ(s.generated(1), (std::vector<int32_t>{41}));
  EXPECT_EQ(s.generated(2), (std::vector<int32_t>{41}));
  // Step 2: decode rows of 1 and 2 (in start order, feeding their last tokens), then 3's prompt.
  r = step(42);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].request_id, 1u);
  EXPECT_EQ(r[0].position, 5u);
  EXPECT_EQ(r[0].token, 41);
  EXPECT_EQ(r[1].request_id, 2u);
  EXPECT_EQ(r[1].position, 3u);
  EXPECT_EQ(r[2].request_id, 3u);
  EXPECT_EQ(finished, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_TRUE(s.all_finished());
  EXPECT_TRUE(s.next_batch().empty());
}

TEST(Scheduler, BudgetSplitsChunks) {
  SchedulerConfig c;
  c.token_budget = 6;
  c.chunk_size = 4;
  Scheduler s(c, {{1, 0, std::vector<int32_t>(10, 1), 1}, {2, 0, std::vector<int32_t>(10, 2), 1}});
  Rows r = s.next_batch();
  ASSERT_EQ(r.size(), 6u);  // 4 of request 1, then only 2 of request 2
  EXPECT_EQ(r[4].request_id, 2u);
  EXPECT_EQ(r[5].position, 1u);
  std::vector<uint64_t> finished;
  s.complete(last_rows(r), one_hot_logits(2, 3, 0), 3, finished);
  r = s.next_batch();
  ASSERT_EQ(r.size(), 6u);  // 4 more of request 1, 2 more of request 2
  EXPECT_EQ(r[0].position, 4u);
  EXPECT_EQ(r[4].position, 2u);
}

// Under this first-come-first-served policy with ids given in arrival order, every batch is already in
// ascending (request_id, position) order: arrival priority equals request priority, which is why rank-only
// and greedy give identical results in the lab (docs/divergence.md, finding 4).
TEST(Scheduler, RowsFollowRequestOrderUnderFcfs) {
  TrafficConfig t;
  t.horizon_steps = 60;
  Request probe;
  probe.prompt = std::vector<int32_t>(20, 3);
  probe.max_new_tokens = 10;
  uint64_t probe_id = 0;
  SchedulerConfig c;
  c.token_budget = 48;
  c.chunk_size = 8;
  Scheduler s(c, make_traffic(t, 64, 5, probe, &probe_id));
  std::vector<uint64_t> finished;
  int checked = 0;
  while (!s.all_finished() && s.step() < 2000) {
    const Rows& rows = s.next_batch();
    for (size_t r = 1; r < rows.size(); ++r) {
      const bool ordered =
          rows[r - 1].request_id < rows[r].request_id ||
          (rows[r - 1].request_id == rows[r].request_id && rows[r - 1].position < rows[r].position);
      ASSERT_TRUE(ordered) << "step " << s.step() << " row " << r;
      ++checked;
    }
    auto lr = last_rows(rows);
    s.complete(lr, one_hot_logits(lr.size(), 64, 1), 64, finished);
  }
  EXPECT_TRUE(s.all_finished());
  EXPECT_GT(checked, 1000);
}

TEST(Scheduler, RejectsBadRequests) {
  SchedulerConfig c;
  EXPECT_THROW(Scheduler(c, {{1, 0, {}, 1}}), std::invalid_argument);
  EXPECT_THROW(Scheduler(c, {{1, 0, {1}, 0}}), std::invalid_argument);
  EXPECT_THROW(Scheduler(c, {{1, 0, {1}, 1}, {1, 2, {1}, 1}}), std::invalid_argument);
  c.token_budget = 0;
  EXPECT_THROW(c.validate(), std::invalid_argument);
}

TEST(Traffic, SeededWithIdsInArrivalOrder) {
  TrafficConfig t;
  t.horizon_steps = 50;
  Request probe;
  probe.prompt = {1, 2, 3};
  probe.max_new_tokens = 4;
  uint64_t pa = 0, pb = 0;
  auto a = make_traffic(t, 100, 42, probe, &pa);
  auto b = make_traffic(t, 100, 42, probe, &pb);
  auto c = make_traffic(t, 100, 43, probe, &pb);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, i + 1);
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    if (i > 0) {
      EXPECT_GE(a[i].arrival_step, a[i - 1].arrival_step);
    }
    if (a[i].id == pa) continue;
    EXPECT_GE(static_cast<int>(a[i].prompt.size()), t.prompt_min);
    EXPECT_LE(static_cast<int>(a[i].prompt.size()), t.prompt_max);
  }
  EXPECT_EQ(a[pa - 1].prompt, probe.prompt);
  EXPECT_EQ(a[pa - 1].arrival_step, t.probe_arrival_step);
  EXPECT_FALSE(a.size() == c.size() && a[0].prompt == c[0].prompt);
  t.prompt_min = 0;
  EXPECT_THROW(t.validate(), std::invalid_argument);
}

TEST(Summary, CountsDistinctAndFirstDivergence) {
  ConfigResult r;
  r.alone = {1, 2, 3, 4};
  r.completions = {{1, 2, 3, 4}, {1, 2, 9, 9}, {1, 2, 9, 9}, {5, 2, 3, 4}, {1, 2, 3, 8}};
  summarize(r, 4);
  EXPECT_EQ(r.distinct, 4);
  EXPECT_EQ(r.diverged, 4);
  EXPECT_EQ(r.first_divergence, (std::vector<int>{-1, 2, 2, 0, 3}));
  EXPECT_EQ(r.first_divergence_min, 0);
  EXPECT_DOUBLE_EQ(r.first_divergence_median, 2.0);
  EXPECT_EQ(r.gen_points, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(r.distinct_at, (std::vector<int>{2, 2, 4}));
  EXPECT_EQ(r.diverged_at, (std::vector<int>{1, 1, 4}));
}

DivergeOptions tiny_options() {
  DivergeOptions o;
  o.shape = model::ModelShape::tiny();
  o.trials = 8;
  o.probe_length = 12;
  o.gen_length = 16;
  o.scheduler.token_budget = 32;
  o.scheduler.chunk_size = 8;
  o.traffic.arrival_rate = 0.6;
  o.traffic.prompt_max = 32;
  o.traffic.decode_max = 24;
  o.traffic.probe_arrival_step = 6;
  o.traffic.horizon_steps = 80;
  return o;
}

TEST(Diverge, ReportsRenderAsTableJsonAndSvg) {
  DivergeOptions o = tiny_options();
  o.trials = 3;
  o.gen_length = 4;
  o.grid = {{"greedy", kernels::KernelKind::kFast, 1.0, false},
            {"causal", kernels::KernelKind::kInvariant, 1.0, true}};
  o.sweep_capacity_factors = {1.0, 2.0};
  o.sweep_modes = {"greedy"};
  const DivergeReport rep = run_diverge(o);
  ASSERT_EQ(rep.grid.size(), 2u);
  ASSERT_EQ(rep.sweep.size(), 2u);
  const std::string table = format_table(rep);
  EXPECT_NE(table.find("greedy/fast"), std::string::npos);
  EXPECT_NE(table.find("causal/invariant/varied"), std::string::npos);
  auto j = nlohmann::json::parse(to_json(rep));
  EXPECT_EQ(j["grid"].size(), 2u);
  EXPECT_EQ(j["grid"][1]["distinct"], 1);
  EXPECT_EQ(j["grid"][1]["chunk_sizes"], (std::vector<int>{8, 16, 32}));
  EXPECT_EQ(j["grid"][1]["token_budgets"], (std::vector<int>{32, 32, 32}));  // the first of vary_budgets
  EXPECT_EQ(j["grid"][0]["token_budgets"], (std::vector<int>{32, 32, 32}));  // the scheduler's
  const std::string svg = svg_capacity_plot(rep);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<polyline class=\"series\""), std::string::npos);
  EXPECT_NE(svg_length_plot(rep).find("causal/invariant/varied"), std::string::npos);
}

TEST(Diverge, RejectsBadOptions) {
  DivergeOptions o = tiny_options();
  o.trials = 0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = tiny_options();
  o.grid = {{"fastest", kernels::KernelKind::kFast, 1.0, false}};
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

// The headline of the lab: greedy dispatch (batch capacity, arrival priority) at cf <= 1 makes the probe's
// completion depend on its strangers, even with batch-invariant kernels.
TEST(Diverge, GreedyAtCapacityOneGivesSeveralCompletions) {
  DivergeOptions o = tiny_options();
  o.trials = 12;
  o.seed = 2024;
  o.sweep_capacity_factors.clear();
  o.grid = {{"greedy", kernels::KernelKind::kInvariant, 1.0, false}};
  const DivergeReport rep = run_diverge(o);
  EXPECT_GT(rep.grid[0].distinct, 1);
  EXPECT_GT(rep.grid[0].probe_steps_with_drop, 0);
}

}  // namespace
}  // namespace moe::sim::diverge

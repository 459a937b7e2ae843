// sim/diverge: the server's batch formation and drafting, traffic, summaries, reports, and the headline claim
// that greedy dispatch at capacity factor <= 1 gives a probe more than one completion.
#include "sim/diverge/diverge.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "moe/model/model.h"
#include "sim/diverge/conversation.h"
#include "sim/diverge/serving.h"
#include "sim/diverge/traffic.h"
#include "sim/serving/engine.h"
#include "sim/serving/lifecycle.h"

namespace moe::sim::diverge {
namespace {

// The engine's client as the lab's server makes it, without a model: tokens are the requests' prompts.
struct PromptClient : serving::EngineClient {
  const std::vector<Request>& requests;
  explicit PromptClient(const std::vector<Request>& r) : requests(r) {}
  uint64_t token(const serving::EngineRequest& r, uint32_t position) override {
    const auto& p = requests[r.client_index].prompt;
    return position < p.size() ? static_cast<uint64_t>(p[position]) : 1000000 + position;
  }
  int propose(const serving::EngineRequest&, uint32_t, int) override { return 0; }
  uint64_t salt(const serving::EngineRequest&, uint32_t) override { return 0; }
};

// Batch formation of the lab's server (the serving engine, vLLM v1 style): running requests in start order
// continue (a prompt chunk, or a decode row), then waiting ones start, while the budget lasts.
TEST(Server, RunningFirstThenWaitingInArrivalOrder) {
  serving::EngineConfig c = lab_engine_defaults();
  c.token_budget = 4;
  c.chunk_size = 4;
  const std::vector<Request> reqs = {
      {2, 0, {20, 21, 22}, 2},
      {1, 0, {10, 11, 12, 13, 14}, 2},
      {3, 1, {30}, 1},
  };
  PromptClient client(reqs);
  serving::Engine e(c, engine_requests(reqs), client);
  serving::Step r;
  serving::StepHandler prompts_only;  // accepts every row: no drafts here
  auto step = [&] {
    EXPECT_TRUE(serving::run_step(e, r, prompts_only));
    return r.rows;
  };
  // Step 0: request 1 (same arrival step, lower id) takes a full chunk of 4; no budget left for 2.
  auto rows = step();
  ASSERT_EQ(rows.size(), 4u);
  for (uint32_t q = 0; q < 4; ++q) EXPECT_EQ(rows[q], (TokenMeta{1, q}));
  // Step 1: running 1 finishes its prompt (1 row), then waiting 2 (3 rows); 3 waits.
  rows = step();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0], (TokenMeta{1, 4}));
  EXPECT_EQ(rows[1], (TokenMeta{2, 0}));
  EXPECT_EQ(rows[3], (TokenMeta{2, 2}));
  // Step 2: decode rows of 1 and 2 (in start order), then 3's prompt.
  rows = step();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], (TokenMeta{1, 5}));
  EXPECT_EQ(rows[1], (TokenMeta{2, 3}));
  EXPECT_EQ(rows[2], (TokenMeta{3, 0}));
  EXPECT_EQ(r.finished, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_TRUE(e.all_finished());
}

// Under this first-come-first-served policy with ids given in arrival order (and nothing preempted), every
// batch is already in ascending (request_id, position) order: arrival priority equals request priority,
// which is why rank-only and greedy give identical results in the lab (docs/divergence.md, finding 4).
TEST(Server, RowsFollowRequestOrderUnderFcfs) {
  TrafficConfig t;
  t.horizon_steps = 60;
  Request probe;
  probe.prompt = std::vector<int32_t>(20, 3);
  probe.max_new_tokens = 10;
  uint64_t probe_id = 0;
  serving::EngineConfig c = lab_engine_defaults();
  c.token_budget = 48;
  c.chunk_size = 8;
  const std::vector<Request> reqs = make_traffic(t, 64, 5, probe, &probe_id);
  PromptClient client(reqs);
  serving::Engine e(c, engine_requests(reqs), client);
  serving::Step p;
  serving::StepHandler prompts_only;
  int checked = 0;
  while (serving::run_step(e, p, prompts_only)) {
    for (size_t i = 1; i < p.rows.size(); ++i) {
      const bool ordered =
          p.rows[i - 1].request_id < p.rows[i].request_id ||
          (p.rows[i - 1].request_id == p.rows[i].request_id && p.rows[i - 1].position < p.rows[i].position);
      ASSERT_TRUE(ordered) << "step " << p.index << " row " << i;
      ++checked;
    }
  }
  EXPECT_TRUE(e.all_finished());
  EXPECT_GT(checked, 1000);
}

TEST(Server, RejectsBadRequestsAndConfigs) {
  EXPECT_THROW(engine_requests({{1, 0, {}, 1}}), std::invalid_argument);
  EXPECT_THROW(engine_requests({{1, 0, {1}, 0}}), std::invalid_argument);
  DivergeOptions o;
  o.engine.token_budget = 0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = DivergeOptions{};
  o.engine.prefix_cache = true;  // without a KV pool
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = DivergeOptions{};
  o.engine.chunk_size = 0;  // the engine's "budget only": the lab always chunks
  EXPECT_NO_THROW(o.engine.validate());
  EXPECT_THROW(o.validate(), std::invalid_argument);
  model::Model m(model::random_model(model::ModelShape::tiny(), 0), model::ModelOptions{});
  EXPECT_THROW(serve(m, {{1, 0, {1, 2}, 1}}, o.engine, CacheKey::kSalted, 1), std::invalid_argument);
  EXPECT_EQ(m.num_requests(), 0u);
  EXPECT_NO_THROW(DivergeOptions{}.validate());
}

// Prompt-lookup drafting: the tokens after the latest earlier occurrence of the last 3, 2 or 1 tokens.
TEST(Server, ProposesPromptLookupDrafts) {
  const std::vector<int32_t> t = {5, 6, 7, 8, 9, 5, 6, 7};
  EXPECT_EQ(propose_drafts(t, 3), (std::vector<int32_t>{8, 9, 5}));  // "5 6 7" recurs at 0
  EXPECT_EQ(propose_drafts(t, 1), (std::vector<int32_t>{8}));
  const std::vector<int32_t> u = {1, 2, 3, 2};
  EXPECT_EQ(propose_drafts(u, 4), (std::vector<int32_t>{3, 2}));  // only "2" recurs
  const std::vector<int32_t> v = {1, 2, 3, 4};
  EXPECT_TRUE(propose_drafts(v, 4).empty());
  EXPECT_TRUE(propose_drafts(v, 0).empty());
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
  o.engine.token_budget = 32;
  o.engine.chunk_size = 8;
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
  EXPECT_EQ(j["grid"][0]["token_budgets"], (std::vector<int>{32, 32, 32}));  // the engine's
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

// Sampling does not hide the strangers: greedy dispatch with fast kernels at temperature 0.7 moves the
// probe's completion in some trial (its logits, and with them the sampled tokens), as at temperature 0.
TEST(Diverge, GreedySampledDiverges) {
  DivergeOptions o = tiny_options();
  o.trials = 12;
  o.seed = 2024;
  o.sweep_capacity_factors.clear();
  o.grid = {{"greedy", kernels::KernelKind::kFast, 1.0, false, false, 0.7}};
  const DivergeReport rep = run_diverge(o);
  EXPECT_GT(rep.grid[0].diverged, 0);
  EXPECT_GT(rep.grid[0].distinct, 1);
  EXPECT_LT(rep.grid[0].bitwise_same, o.trials);
  EXPECT_EQ(rep.grid[0].spec.label(), "greedy/fast/t=0.7");
}

// The default grid's sampled rows (temperature 0.7, top_p 0.95; none at temperature 0), and the JSON keeps
// their temperature.
TEST(Diverge, DefaultGridHasTheSampledRows) {
  DivergeOptions o;
  std::vector<std::string> sampled;
  for (const ConfigSpec& c : o.default_grid()) {
    if (c.temperature > 0 && c.turns == 1) sampled.push_back(c.label());
  }
  EXPECT_EQ(sampled, (std::vector<std::string>{"greedy/fast/t=0.7", "request/invariant/varied/t=0.7",
                                               "stable/invariant/t=0.7", "stable/invariant/varied/t=0.7",
                                               "dropless/fast/t=0.7"}));
  o.temperature = 0;
  for (const ConfigSpec& c : o.default_grid()) EXPECT_EQ(c.temperature, 0.0);
  o = DivergeOptions{};
  o.top_p = 0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = DivergeOptions{};
  o.grid = {{"stable", kernels::KernelKind::kInvariant, 1.0, false, false, -1.0}};
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

// A restore serves a cached block only as the computation of its positions: a block whose routing segments
// are another block's (a forged or mismatched payload) is refused by name, and nothing is admitted.
TEST(Server, RestoreRefusesAMismatchedBlock) {
  model::ModelOptions mo;
  mo.kernel = kernels::KernelKind::kInvariant;
  mo.policy = model::ModelOptions::dispatch_mode("stable", 1.0);
  mo.record_routing = true;
  model::Model m(model::random_model(model::ModelShape::tiny(), 1), mo);
  std::vector<model::BatchRow> rows;
  for (uint32_t p = 0; p < 40; ++p) rows.push_back({1, p, static_cast<int32_t>(p * 3 % 100)});
  m.admit(1, 40);
  std::vector<int32_t> logit_rows;
  std::vector<float> logits;
  m.forward(rows, logit_rows, logits);
  const model::Model::CachedBlock b0 = m.cached_block(1, 0, 16), b1 = m.cached_block(1, 16, 32);
  m.release(1);
  model::Model::CachedBlock forged = b1;
  forged.routing = b0.routing;  // block 1's KV with block 0's routing
  const std::vector<const model::Model::CachedBlock*> blocks = {&b0, &forged};
  try {
    m.admit_cached(2, 40, blocks);
    ADD_FAILURE() << "a mismatched block was served";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("routing segment of [0, 16)"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(m.is_live(2));
  // A block planned for another prompt length (its salt differs: prefix scope, within W of the end).
  const std::vector<const model::Model::CachedBlock*> honest = {&b0, &b1};
  EXPECT_THROW(m.admit_cached(2, 33, honest), std::invalid_argument);
  EXPECT_FALSE(m.is_live(2));
  EXPECT_NO_THROW(m.admit_cached(2, 40, honest));
}

// A conversation's turns: each later turn's whole prompt is the previous turn's prompt, its answer (every
// token it generated) and the new message, and its turn ends extend the previous turn's; admitted as a plain
// prompt it has none. Bad chains are named.
TEST(Conversation, TurnEndsFollowThePreviousTurn) {
  Request first;
  first.id = 7;
  first.prompt = std::vector<int32_t>(20, 1);
  first.max_new_tokens = 5;
  const std::vector<std::vector<int32_t>> messages = {std::vector<int32_t>(6, 2), std::vector<int32_t>(3, 3)};
  const std::vector<int> answers = {4, 2}, think = {0, 8};
  std::vector<Request> requests = {first};
  for (Request& t : follow_up_turns(first, messages, answers, think, 9)) requests.push_back(std::move(t));
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[1].id, 9u);
  EXPECT_EQ(requests[1].follows, 7u);
  EXPECT_EQ(requests[2].follows, 9u);
  EXPECT_EQ(requests[2].think_steps, 8);
  EXPECT_EQ(prompt_lengths(requests), (std::vector<uint32_t>{20, 31, 38}));
  const auto ends = turn_ends_of(requests);
  EXPECT_TRUE(ends[0].empty());
  EXPECT_EQ(ends[1], (std::vector<uint32_t>{20, 25, 31}));
  EXPECT_EQ(ends[2], (std::vector<uint32_t>{20, 25, 31, 35, 38}));
  const auto engine = engine_requests(requests);
  EXPECT_EQ(engine[2].prompt_length, 38u);
  EXPECT_EQ(engine[2].turn_ends, ends[2]);
  EXPECT_EQ(engine[2].follows, 9u);
  requests[2].as_plain_prompt = true;
  EXPECT_TRUE(turn_ends_of(requests)[2].empty());
  EXPECT_EQ(prompt_lengths(requests)[2], 38u);
  EXPECT_EQ(split_answers(32, 3), (std::vector<int>{11, 11, 10}));
  EXPECT_THROW(split_answers(2, 3), std::invalid_argument);
  EXPECT_THROW(split_answers(5, 0), std::invalid_argument);
  std::vector<Request> later_first = {requests[1], requests[0]};  // the previous turn comes after it
  EXPECT_THROW(prompt_lengths(later_first), std::invalid_argument);
  requests[1].prompt.clear();
  EXPECT_THROW(turn_ends_of(requests), std::invalid_argument);
  EXPECT_THROW(follow_up_turns(first, messages, std::vector<int>{4}, think, 9), std::invalid_argument);
  EXPECT_THROW(follow_up_turns(first, messages, std::vector<int>{4, 0}, think, 9), std::invalid_argument);
}

// The server fills a later turn's prompt when the previous turn finishes: under dropless dispatch (whose
// routing reads no turn ends) the second turn answers exactly what a single request with the same whole
// prompt answers, and the probe's completion is both turns' answers. The cache serves the first turn's
// full blocks.
TEST(Server, LaterTurnGetsThePreviousTurnsPromptAndAnswer) {
  model::ModelOptions mo;
  mo.kernel = kernels::KernelKind::kInvariant;
  mo.policy = model::ModelOptions::dispatch_mode("dropless", 1.0);
  mo.record_routing = true;
  mo.max_tokens = 64;
  model::Model m(model::random_model(model::ModelShape::tiny(), 3), mo);
  serving::EngineConfig e = lab_engine_defaults();
  e.prefix_cache = true;
  e.kv_blocks = 64;
  Request first;
  first.id = 1;
  first.prompt = random_prompt(40, m.shape().vocab_size, 5);
  first.max_new_tokens = 9;
  const std::vector<std::vector<int32_t>> messages = {random_prompt(12, m.shape().vocab_size, 6)};
  std::vector<Request> requests = {first};
  for (Request& t : follow_up_turns(first, messages, std::vector<int>{7}, std::vector<int>{3}, 2))
    requests.push_back(std::move(t));
  const uint64_t turns[] = {1, 2};
  const ServeOutcome chat = serve(m, requests, e, CacheKey::kSalted, turns);
  ASSERT_EQ(chat.probe_tokens.size(), 16u);
  ASSERT_EQ(chat.probe_turns.size(), 2u);
  EXPECT_EQ(chat.probe_turns[1].prompt_length, 40u + 9 + 12);
  EXPECT_EQ(chat.probe_turns[1].cached_at_admission, 48u);  // [0, 48) of the 48 computed positions
  Request whole;
  whole.id = 1;
  whole.prompt = first.prompt;
  whole.prompt.insert(whole.prompt.end(), chat.probe_tokens.begin(), chat.probe_tokens.begin() + 9);
  whole.prompt.insert(whole.prompt.end(), messages[0].begin(), messages[0].end());
  whole.max_new_tokens = 7;
  const ServeOutcome single = serve(m, {whole}, lab_engine_defaults(), CacheKey::kSalted, 1);
  EXPECT_EQ(single.probe_tokens,
            std::vector<int32_t>(chat.probe_tokens.begin() + 9, chat.probe_tokens.end()));
  const uint64_t not_a_chain[] = {2, 1};
  EXPECT_THROW(serve(m, requests, e, CacheKey::kSalted, not_a_chain), std::invalid_argument);
  EXPECT_THROW(serve(m, requests, e, CacheKey::kSalted, std::span<const uint64_t>{}), std::invalid_argument);
}

// Multi-turn trials: greedy dispatch with fast kernels (the probe a 3-turn conversation among strangers, some
// of them conversations too, the cache on) still moves the probe's answers; the report has the per-turn
// cache hits.
TEST(Diverge, GreedyMultiTurnDiverges) {
  DivergeOptions o = tiny_options();
  o.trials = 12;
  o.seed = 2024;
  o.sweep_capacity_factors.clear();
  o.grid = {{"greedy", kernels::KernelKind::kFast, 1.0, false, false, 0.0, 3}};
  const DivergeReport rep = run_diverge(o);
  const ConfigResult& r = rep.grid[0];
  EXPECT_EQ(r.spec.label(), "greedy/fast/3-turn");
  EXPECT_GT(r.distinct, 1);
  EXPECT_LT(r.bitwise_same, o.trials);
  ASSERT_EQ(r.turn_prompt_lengths.size(), 3u);
  EXPECT_EQ(r.alone.size(), 16u);  // the turns' answers: 6 + 5 + 5
  EXPECT_GT(r.turn_hit_shares()[1], 0.3);
  EXPECT_NE(format_table(rep).find("hit/turn"), std::string::npos);
  const auto j = nlohmann::json::parse(to_json(rep));
  EXPECT_EQ(j["grid"][0]["turns"], 3);
  EXPECT_EQ(j["grid"][0]["probe_turn_hit_share"].size(), 3u);
  EXPECT_EQ(j["grid"][0]["probe_turn_cached"].size(), 12u);
  EXPECT_EQ(report_from_json(to_json(rep)).grid[0].spec.turns, 3);
}

// The default grid's multi-turn rows (none with --turns 1).
TEST(Diverge, DefaultGridHasTheMultiTurnRows) {
  DivergeOptions o;
  std::vector<std::string> chat;
  for (const ConfigSpec& c : o.default_grid()) {
    if (c.turns > 1) chat.push_back(c.label());
  }
  EXPECT_EQ(chat, (std::vector<std::string>{"greedy/invariant/3-turn", "request/invariant/3-turn",
                                            "stable/invariant/3-turn", "stable/invariant/varied/3-turn",
                                            "stable/invariant/t=0.7/3-turn"}));
  o.probe_turns = 1;
  for (const ConfigSpec& c : o.default_grid()) EXPECT_EQ(c.turns, 1);
  o = DivergeOptions{};
  o.gen_length = 2;
  EXPECT_THROW(o.validate(), std::invalid_argument);  // 3 turns need 3 generated tokens
}

}  // namespace
}  // namespace moe::sim::diverge

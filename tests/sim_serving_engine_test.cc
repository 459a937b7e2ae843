// The serving engine (sim/serving/engine.h): continuous batching with chunked prefill, the block prefix
// cache, recompute preemption and speculative decoding, on hand-checked cases and on random workloads whose
// invariants every step must keep.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "base/splitmix64.h"
#include "router/routing_rule.h"
#include "sim/serving/block_pool.h"
#include "sim/serving/engine.h"
#include "sim/serving/lifecycle.h"

namespace moe::sim::serving {
namespace {

// Tokens: request r's prompt position p holds shared_token(p) for p < shared[r], else a token of its own;
// generated tokens are the request's own. Drafts: `drafts` proposed, `accept` of them accepted.
struct TestClient : EngineClient {
  std::map<uint64_t, uint32_t> shared;
  int drafts = 0;
  uint64_t salt_above =
      0;  // salt(end, L) = L when end + salt_above > L (prefix scope's rule, W = salt_above)
  uint64_t token(const EngineRequest& r, uint32_t position) override {
    auto it = shared.find(r.id);
    if (it != shared.end() && position < it->second) return 1000 + position;
    return mix64(r.id * 7919 + position);
  }
  int propose(const EngineRequest&, uint32_t, int max) override { return std::min(drafts, max); }
  uint64_t salt(const EngineRequest& r, uint32_t end) override {
    return salt_above > 0 && uint64_t{end} + salt_above > r.prompt_length ? r.prompt_length : 0;
  }
};

std::string Describe(const EngineConfig& c) {
  return "budget " + std::to_string(c.token_budget) + " chunk " + std::to_string(c.chunk_size) + " cache " +
         std::to_string(c.prefix_cache) + " blocks " + std::to_string(c.kv_blocks) + " spec " +
         std::to_string(c.spec_tokens);
}

// The verdict of a test: every row of a span without drafts, accept(span) rows of one with drafts.
template <typename Accept>
struct TestVerdict : StepHandler {
  Accept accept_drafts;
  explicit TestVerdict(Accept a) : accept_drafts(std::move(a)) {}
  void accept(const Step& step, std::vector<uint32_t>& accepted) override {
    for (const Span& s : step.spans) accepted.push_back(s.drafts > 0 ? accept_drafts(s) : s.end - s.begin);
  }
};

// Runs an engine to the end through the lifecycle driver (run_step); accepted drafts from `accept`.
struct EngineRun {
  std::vector<Step> steps;
};
template <typename Accept>
EngineRun RunAll(Engine& engine, Accept&& accept, int max_steps = 100000) {
  EngineRun run;
  Step step;
  TestVerdict<std::decay_t<Accept>> verdict(accept);
  while (run_step(engine, step, verdict)) {
    run.steps.push_back(step);
    if (static_cast<int>(run.steps.size()) >= max_steps) {
      ADD_FAILURE() << "no end after " << max_steps << " steps";
      break;
    }
  }
  return run;
}

TEST(ServingEngine, ChunkedPrefillThenDecodeUnderTheBudget) {
  TestClient client;
  EngineConfig c;
  c.token_budget = 8;
  c.chunk_size = 5;
  Engine engine(c, {{1, 0, 12, 3}, {2, 0, 3, 2}, {3, 5, 4, 1}}, client);
  EngineRun run = RunAll(engine, [](const Span&) { return 1u; });
  // Step 0: request 1 chunk [0, 5), request 2 [0, 3) (budget 8). Step 1: 1 [5, 10), 2 decodes [3, 4).
  ASSERT_GE(run.steps.size(), 3u);
  ASSERT_EQ(run.steps[0].spans.size(), 2u);
  EXPECT_EQ(run.steps[0].spans[0].end, 5u);
  EXPECT_FALSE(run.steps[0].spans[0].samples);
  EXPECT_EQ(run.steps[0].spans[1].end, 3u);
  EXPECT_TRUE(run.steps[0].spans[1].samples);  // its whole prompt: the last row gives its first token
  EXPECT_EQ(run.steps[1].spans[0].begin, 5u);
  EXPECT_EQ(run.steps[1].spans[1].begin, 3u);  // request 2's first decode row
  EXPECT_EQ(run.steps[1].spans[1].end, 4u);
  // Every position of every request once, in order; each generates its tokens and finishes.
  std::map<uint64_t, uint32_t> next;
  std::map<uint64_t, int> finished;
  for (size_t i = 0; i < run.steps.size(); ++i) {
    for (const TokenMeta& m : run.steps[i].rows) EXPECT_EQ(m.position, next[m.request_id]++);
    for (uint64_t id : run.steps[i].finished) ++finished[id];
  }
  EXPECT_EQ(next[1], 12u + 3 - 1);  // the last generated token needs no row
  EXPECT_EQ(next[2], 3u + 2 - 1);
  EXPECT_EQ(next[3], 4u);
  EXPECT_EQ(finished, (std::map<uint64_t, int>{{1, 1}, {2, 1}, {3, 1}}));
  EXPECT_TRUE(engine.all_finished());
}

TEST(ServingEngine, PrefixCacheServesSharedBlocksAndRespectsTheSalt) {
  for (uint64_t salt_above : {0, 64}) {
    SCOPED_TRACE(salt_above);
    TestClient client;
    client.shared = {{1, 40}, {2, 40}};
    client.salt_above = salt_above;
    EngineConfig c;
    c.token_budget = 64;
    c.prefix_cache = true;
    c.block_size = 16;
    c.kv_blocks = 64;
    c.keep_request_stats = true;
    // Request 2 arrives after request 1 has computed its prompt: blocks [0, 16) and [16, 32) hold the shared
    // tokens (positions 32..39 share too, but their block [32, 48) holds request 1's own tokens as well).
    Engine engine(c, {{1, 0, 50, 2}, {2, 3, 70, 2}}, client);
    EngineRun run = RunAll(engine, [](const Span&) { return 1u; });
    int registered_by_1 = 0;
    for (const Step& r : run.steps) {
      for (const Registered& b : r.registered) registered_by_1 += b.id == 1;
    }
    EXPECT_EQ(registered_by_1, 3) << "request 1's full blocks: [0, 48)";
    // Without a salt the shared blocks serve request 2; with salt W = 64 they were written under L = 50
    // (50 < 16 + 64: salted with 50) and request 2 (L = 70) has other keys: no hit.
    const uint32_t cached = engine.request_stats(2).cached_at_admission;
    EXPECT_EQ(cached, salt_above == 0 ? 32u : 0u);
    for (const Step& p : run.steps) {
      for (const Admission& a : p.admitted) {
        if (a.id == 2) {
          EXPECT_EQ(a.blocks.size() * 16, a.cached);
        }
      }
    }
  }
}

TEST(ServingEngine, PreemptionRecomputesPromptAndGeneratedTokens) {
  TestClient client;
  EngineConfig c;
  c.token_budget = 32;
  c.prefix_cache = true;
  c.block_size = 4;
  c.kv_blocks = 12;  // 48 positions for three requests of 30-ish: someone must yield
  c.keep_request_stats = true;
  Engine engine(c, {{1, 0, 20, 12}, {2, 0, 18, 12}, {3, 1, 16, 10}}, client);
  EngineRun run = RunAll(engine, [](const Span&) { return 1u; });
  EXPECT_TRUE(engine.all_finished());
  EXPECT_GT(engine.stats().preemptions, 0);
  // A preempted request releases first, is admitted again (resumed) from what the cache still holds, and
  // recomputes its prompt and generated positions as prefill chunks.
  bool saw_resume = false;
  for (const Step& p : run.steps) {
    for (const Admission& a : p.admitted) {
      if (!a.resumed) continue;
      saw_resume = true;
      EXPECT_EQ(a.cached % 4, 0u);
      for (const Span& s : p.spans) {
        if (s.id == a.id) {
          EXPECT_EQ(s.begin, a.cached);
        }
      }
    }
  }
  EXPECT_TRUE(saw_resume);
  for (uint64_t id : {1, 2, 3}) EXPECT_TRUE(engine.request_stats(id).finished);
}

TEST(ServingEngine, SpeculationAcceptsSomeDraftsAndRollsBackTheRest) {
  TestClient client;
  client.drafts = 3;
  EngineConfig c;
  c.token_budget = 16;
  c.spec_tokens = 3;
  c.keep_request_stats = true;
  Engine engine(c, {{1, 0, 6, 11}}, client);
  // Accept 2 of 3 drafts every time: rows [c, c + 4), 3 accepted, rollback to c + 3.
  EngineRun run = RunAll(engine, [](const Span& s) { return std::min<uint32_t>(3, s.end - s.begin); });
  std::vector<uint32_t> spans;
  for (size_t i = 0; i < run.steps.size(); ++i) {
    for (const Span& s : run.steps[i].spans) spans.push_back(s.end - s.begin);
  }
  // The prompt (6 rows) gives token 1; then 10 tokens to go: each step sends 1 + min(3, to go - 1) rows and
  // gains 3 (2 drafts and the token the last accepted row samples): 10 -> 7 -> 4 -> 1, then a plain row.
  EXPECT_EQ(spans, (std::vector<uint32_t>{6, 4, 4, 4, 1}));
  const RequestStats st = engine.request_stats(1);
  EXPECT_EQ(st.drafted, 3 + 3 + 3);
  EXPECT_EQ(st.accepted, 2 + 2 + 2);
  EXPECT_EQ(run.steps[1].rollbacks.size(), 1u);
  EXPECT_EQ(run.steps[1].rollbacks[0].position, 6u + 3);
}

TEST(ServingEngine, BadInputIsAClearError) {
  TestClient client;
  EngineConfig c;
  c.prefix_cache = true;
  EXPECT_THROW(Engine(c, {}, client), std::invalid_argument);  // a cache without a pool
  c.kv_blocks = 2;
  c.block_size = 16;
  try {
    Engine e(c, {{5, 0, 40, 1}}, client);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("request 5 needs 3 KV blocks"), std::string::npos) << e.what();
  }
  c = EngineConfig{};
  EXPECT_THROW(Engine(c, {{1, 0, 4, 1}, {1, 2, 4, 1}}, client), std::invalid_argument);  // duplicate id
  EXPECT_THROW(Engine(c, {{1, 0, 0, 1}}, client), std::invalid_argument);
  Engine e(c, {{1, 0, 4, 2}}, client);
  Step step;
  ASSERT_TRUE(e.next(step));
  step.accepted = {3};
  EXPECT_THROW(e.complete(step), std::invalid_argument);  // a prompt chunk is accepted whole
  EXPECT_THROW(e.next(step), std::logic_error);           // the step is not completed
  step.accepted = {4};
  EXPECT_NO_THROW(e.complete(step));
  EXPECT_THROW(e.complete(step), std::logic_error);  // nothing pending
}

// A conversation: turn 2 (request 2, turn ends {20, 24, 30}) follows turn 1 (request 1: a 20-token prompt and
// 4 answer tokens) and arrives 3 steps after turn 1 finishes; turn 3 follows turn 2 with no think time. The
// turns' tokens are the conversation's (position p holds the same token in every turn), so each later turn
// finds every full block the previous turn computed in the cache - with the salt of a prefix-scope rule over
// the turn ends, whose earlier blocks keep their keys. Each Admission carries the turn ends.
TEST(ServingEngine, ConversationTurnsFollowAndReuseThePreviousTurn) {
  struct ChatClient : TestClient {
    uint64_t token(const EngineRequest&, uint32_t position) override { return mix64(77 + position); }
    uint64_t salt(const EngineRequest& r, uint32_t end) override {  // prefix scope, W = 4, over the turn ends
      DispatchPolicy p = DispatchPolicy::mode("stable");
      p.lookahead = 4;
      return prefix_cache_salt(p, end, r.turns());
    }
  } client;
  EngineConfig c;
  c.token_budget = 16;
  c.prefix_cache = true;
  c.block_size = 4;
  c.kv_blocks = 64;
  c.keep_request_stats = true;
  EngineRequest t1{1, 0, 20, 4};
  EngineRequest t2{2, 0, 30, 3};
  t2.turn_ends = {20, 24, 30};
  t2.follows = 1;
  t2.think_steps = 3;
  EngineRequest t3{3, 0, 36, 2};
  t3.turn_ends = {20, 24, 30, 33, 36};
  t3.follows = 2;
  Engine engine(c, {t3, t2, t1}, client);
  EngineRun run = RunAll(engine, [](const Span&) { return 1u; });
  std::map<uint64_t, int64_t> admitted_at, finished_at;
  for (const Step& s : run.steps) {
    for (const Admission& a : s.admitted) {
      admitted_at[a.id] = s.index;
      const std::vector<uint32_t> want = a.id == 1   ? std::vector<uint32_t>{}
                                         : a.id == 2 ? t2.turn_ends
                                                     : t3.turn_ends;
      EXPECT_EQ(a.turn_ends, want) << "request " << a.id;
    }
    for (uint64_t id : s.finished) finished_at[id] = s.index;
  }
  EXPECT_EQ(admitted_at[2], finished_at[1] + 1 + 3);
  EXPECT_EQ(admitted_at[3], finished_at[2] + 1);
  // Turn 1 computed positions [0, 23): blocks up to 20; turn 2 computed [0, 32): blocks up to 32 (its
  // positions 20-23 recomputed: 23 is the answer's last token, never fed in turn 1).
  EXPECT_EQ(engine.request_stats(2).cached_at_admission, 20u);
  EXPECT_EQ(engine.request_stats(3).cached_at_admission, 32u);
  EXPECT_TRUE(engine.all_finished());
}

TEST(ServingEngine, ConversationTurnsAreChecked) {
  TestClient client;
  EngineConfig c;
  EngineRequest bad{1, 0, 30, 1};
  bad.turn_ends = {20, 24};
  EXPECT_THROW(Engine(c, {bad}, client), std::invalid_argument);  // an even count
  bad.turn_ends = {20, 24, 31};
  EXPECT_THROW(Engine(c, {bad}, client), std::invalid_argument);  // not the prompt length
  EngineRequest a{1, 0, 4, 1}, b{2, 0, 4, 1};
  a.follows = 3;
  EXPECT_THROW(Engine(c, {a, b}, client), std::invalid_argument);  // follows an unknown request
  a.follows = 2;
  b.follows = 1;
  try {
    Engine e(c, {a, b}, client);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("a cycle of turns"), std::string::npos) << e.what();
  }
  b.follows = kNoRequest;
  a.think_steps = -1;
  EXPECT_THROW(Engine(c, {a, b}, client), std::invalid_argument);
}

// The lifecycle driver (sim/serving/lifecycle.h) hands each step's events to its handler in the one order:
// preempted released, admissions, the forward pass, the verdict, rollbacks, registered blocks, finished
// released - and replay_step hands a recorded step's events to another handler the same way (without the
// verdict, which the step carries).
TEST(ServingLifecycle, EventsReachTheHandlerInOrderAndReplayAlike) {
  struct Log : StepHandler {
    std::vector<std::string> events;
    void release(uint64_t id) override { events.push_back("release " + std::to_string(id)); }
    void admit(const Admission& a) override {
      events.push_back("admit " + std::to_string(a.id) + " cached " + std::to_string(a.cached));
    }
    void forward(const Step& step) override {
      events.push_back("forward " + std::to_string(step.rows.size()));
    }
    void accept(const Step& step, std::vector<uint32_t>& accepted) override {
      events.push_back("accept");
      for (const Span& s : step.spans) accepted.push_back(s.drafts > 0 ? 1 : s.end - s.begin);
    }
    void rollback(uint64_t id, uint32_t position) override {
      events.push_back("rollback " + std::to_string(id) + " " + std::to_string(position));
    }
    void keep(const Registered& b) override { events.push_back("keep " + std::to_string(b.block)); }
  };
  TestClient client;
  client.drafts = 2;
  client.shared = {{1, 40}, {2, 40}, {3, 40}};
  EngineConfig c;
  c.token_budget = 24;
  c.chunk_size = 8;
  c.prefix_cache = true;
  c.block_size = 4;
  c.kv_blocks = 16;
  c.spec_tokens = 2;
  Engine engine(c, {{1, 0, 30, 8}, {2, 0, 20, 12}, {3, 6, 44, 6}}, client);
  Log live, replayed;
  Step step;
  std::map<std::string, int> seen;
  // Within a step: release (preempted) < admit < forward < accept < rollback < keep < release (finished).
  auto rank = [](const std::string& e, bool after_forward) {
    if (e.starts_with("release")) return after_forward ? 6 : 0;
    if (e.starts_with("admit")) return 1;
    if (e.starts_with("forward")) return 2;
    if (e == "accept") return 3;
    if (e.starts_with("rollback")) return 4;
    return 5;  // keep
  };
  for (size_t from = 0; run_step(engine, step, live); from = live.events.size()) {
    replay_step(step, replayed);
    int last = -1;
    bool after_forward = false;
    for (size_t i = from; i < live.events.size(); ++i) {
      const std::string& e = live.events[i];
      after_forward |= e.starts_with("forward");
      const int r = rank(e, after_forward);
      EXPECT_GE(r, last) << "step " << step.index << ": " << e;
      last = r;
      ++seen[e.substr(0, e.find(' '))];
    }
  }
  // Replayed events are the live ones without the verdicts.
  std::vector<std::string> without_accept;
  for (const std::string& e : live.events) {
    if (e != "accept") without_accept.push_back(e);
  }
  EXPECT_EQ(replayed.events, without_accept);
  for (const char* kind : {"release", "admit", "forward", "accept", "rollback", "keep"}) {
    EXPECT_GT(seen[kind], 0) << kind << " never happened";
  }
  EXPECT_GT(engine.stats().preemptions, 0);
  EXPECT_GT(engine.stats().cached_tokens, 0);
}

TEST(BlockPool, LeastRecentlyReleasedIsEvictedFirst) {
  BlockPool pool(3);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.allocate(3, a));
  EXPECT_FALSE(pool.allocate(1, b));
  auto key = [](uint8_t v) {
    BlockKey k;
    k.bytes[0] = v;
    return k;
  };
  EXPECT_TRUE(pool.register_block(a[0], key(10)));
  EXPECT_TRUE(pool.register_block(a[1], key(11)));
  EXPECT_FALSE(pool.register_block(a[2], key(10)));  // the key is taken
  pool.release(std::vector<int32_t>{a[1], a[0], a[2]});
  EXPECT_EQ(pool.available(), 3);
  std::vector<int32_t> hit;
  const std::vector<BlockKey> chain = {key(10), key(11), key(12)};
  EXPECT_EQ(pool.match(chain, hit), 2);
  pool.release(hit);
  ASSERT_TRUE(pool.allocate(2, b));  // the free block, then the least recently released cached one
  EXPECT_EQ(b[0], a[2]);
  EXPECT_EQ(pool.evictions(), 1);
  EXPECT_EQ(pool.cached(), 1);
}

// Random workloads: every step keeps the invariants (rows of a request consecutive from its computed
// position; blocks within the pool; rollbacks only of drafts; each request ends with its tokens), and the
// same inputs give the same steps.
TEST(ServingEngine, RandomWorkloadsKeepTheInvariants) {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 200; ++trial) {
    EngineConfig c;
    c.token_budget = 8 + static_cast<int>(rng() % 64);
    c.chunk_size = static_cast<int>(rng() % 3) * 8;
    c.max_running = 1 + static_cast<int>(rng() % 16);
    c.prefix_cache = rng() % 2 == 0;
    c.block_size = 1 + static_cast<int>(rng() % 16);
    c.spec_tokens = static_cast<int>(rng() % 4);
    std::vector<EngineRequest> reqs;
    TestClient client;
    client.drafts = c.spec_tokens;
    client.salt_above = rng() % 2 ? 16 : 0;
    uint64_t longest = 0;
    for (int i = 0; i < 1 + static_cast<int>(rng() % 20); ++i) {
      EngineRequest r{static_cast<uint64_t>(i + 1), static_cast<int64_t>(rng() % 30),
                      1 + static_cast<uint32_t>(rng() % 60), 1 + static_cast<uint32_t>(rng() % 20)};
      longest =
          std::max<uint64_t>(longest, (r.prompt_length + r.max_new_tokens + c.block_size - 1) / c.block_size);
      if (rng() % 2) client.shared[r.id] = static_cast<uint32_t>(rng() % 50);
      reqs.push_back(r);
    }
    c.kv_blocks = c.prefix_cache || rng() % 2 ? static_cast<int64_t>(longest + rng() % (3 * longest)) : 0;
    SCOPED_TRACE(trial);
    SCOPED_TRACE(Describe(c));
    std::mt19937_64 accept_rng(trial);
    auto accept = [&](const Span& s) { return 1 + static_cast<uint32_t>(accept_rng() % (s.end - s.begin)); };
    Engine engine(c, reqs, client);
    EngineRun run = RunAll(engine, accept);
    ASSERT_TRUE(engine.all_finished());
    std::map<uint64_t, uint32_t> computed;
    std::map<uint64_t, int> finishes;
    for (size_t i = 0; i < run.steps.size(); ++i) {
      const Step& p = run.steps[i];
      EXPECT_LE(static_cast<int>(p.rows.size()), c.token_budget);
      for (uint64_t id : p.preempted) computed[id] = 0;
      for (const Admission& a : p.admitted) computed[a.id] = a.cached;
      for (const Span& s : p.spans) {
        EXPECT_EQ(s.begin, computed[s.id]) << "request " << s.id;
        for (uint32_t q = s.begin; q < s.end; ++q) {
          EXPECT_EQ(p.rows[s.row + (q - s.begin)].request_id, s.id);
          EXPECT_EQ(p.rows[s.row + (q - s.begin)].position, q);
        }
        computed[s.id] = s.end;
      }
      for (const TokenMeta& rb : run.steps[i].rollbacks) computed[rb.request_id] = rb.position;
      for (uint64_t id : run.steps[i].finished) ++finishes[id];
    }
    for (const EngineRequest& r : reqs) EXPECT_EQ(finishes[r.id], 1) << "request " << r.id;
    if (c.kv_blocks == 0) {
      EXPECT_EQ(engine.stats().preemptions, 0);
    }
    // Deterministic: the same inputs, the same steps.
    std::mt19937_64 again_rng(trial);
    auto again_accept = [&](const Span& s) {
      return 1 + static_cast<uint32_t>(again_rng() % (s.end - s.begin));
    };
    Engine again(c, reqs, client);
    EngineRun run2 = RunAll(again, again_accept);
    ASSERT_EQ(run2.steps.size(), run.steps.size());
    for (size_t i = 0; i < run.steps.size(); ++i) ASSERT_EQ(run2.steps[i].rows, run.steps[i].rows);
  }
}

}  // namespace
}  // namespace moe::sim::serving

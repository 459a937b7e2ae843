// Workloads: length distributions, request generation and the continuous-batching scheduler.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "router/dispatch_policy.h"
#include "router/routing_rule.h"
#include "sim/errors.h"
#include "sim/length_dist.h"
#include "sim/rng.h"
#include "sim/workload.h"
#include "tests/sim_test_util.h"

namespace moe::sim {
namespace {

using testing::expect_throw_with;

TEST(SimRng, FixedValuesPinTheStream) {
  // The same seed must give the same numbers on every machine: these values are part of the contract.
  Rng rng(stream_key(42, 7, 3));
  const uint64_t a = rng.next();
  Rng again(stream_key(42, 7, 3));
  EXPECT_EQ(again.next(), a);
  EXPECT_EQ(a, 0x4b782277a9ed426aull);
  EXPECT_EQ(again.normal(), -0.34860884862566421);  // polar Box-Muller: sqrt and log only
  EXPECT_EQ(mix64(0), 0xe220a8397b1dcdafull);
  Rng zero(0);
  EXPECT_EQ(zero.next(), 0x99ec5f36cb75f2b4ull);
}

TEST(SimRng, NormalHasUnitMomentsAndUniformIntStaysInRange) {
  Rng rng(1);
  double sum = 0, sum2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = rng.normal();
    sum += x;
    sum2 += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum2 / n, 1.0, 0.02);
  for (int i = 0; i < 1000; ++i) {
    const int64_t v = rng.uniform_int(-3, 5);
    EXPECT_GE(v, -3);
    EXPECT_LE(v, 5);
  }
  double g = 0;
  for (int i = 0; i < 20000; ++i) g += rng.gamma(0.5);
  EXPECT_NEAR(g / 20000, 0.5, 0.03);
}

TEST(SimLengthDist, ParsesPrintsAndSamples) {
  EXPECT_EQ(LengthDist::parse("128").to_string(), "fixed:128");
  EXPECT_EQ(LengthDist::parse("fixed:7").to_string(), "fixed:7");
  EXPECT_EQ(LengthDist::parse("uniform:64,1024").to_string(), "uniform:64,1024");
  EXPECT_EQ(LengthDist::parse("lognormal:mean=512,sigma=0.8").to_string(), "lognormal:mean=512,sigma=0.8");
  const LengthDist u = LengthDist::parse("uniform:10,20");
  const LengthDist ln = LengthDist::parse("lognormal:mean=512,sigma=0.8,max=4096");
  Rng a(5), b(5);
  double mean = 0;
  for (int i = 0; i < 20000; ++i) {
    const int64_t x = u.sample(a);
    EXPECT_EQ(x, u.sample(b));
    EXPECT_GE(x, 10);
    EXPECT_LE(x, 20);
    const int64_t y = ln.sample(a);
    EXPECT_EQ(y, ln.sample(b));
    EXPECT_LE(y, 4096);
    mean += static_cast<double>(y);
  }
  EXPECT_NEAR(mean / 20000, 512, 20);  // mean= is the distribution's mean
}

TEST(SimLengthDist, RejectsBadSpecsByName) {
  expect_throw_with<UsageError>([] { LengthDist::parse("uniform:5,1"); }, "uniform:5,1");
  expect_throw_with<UsageError>([] { LengthDist::parse("lognormal:mean=5"); }, "needs mean= and sigma=");
  expect_throw_with<UsageError>([] { LengthDist::parse("poisson:3"); }, "unknown kind 'poisson'");
  expect_throw_with<UsageError>([] { LengthDist::parse("fixed:x"); }, "expected an integer");
  expect_throw_with<UsageError>([] { LengthDist::parse("fixed:-1"); }, ">= 0");
}

TEST(SimWorkload, RequestsAreDeterministicPerSeedAndPerRequest) {
  WorkloadConfig c;
  c.num_requests = 50;
  c.prompt_len = LengthDist::parse("lognormal:mean=300,sigma=1");
  c.arrival_rate = 0.3;
  const auto a = make_requests(c, 9);
  const auto b = make_requests(c, 9);
  const auto other = make_requests(c, 10);
  ASSERT_EQ(a.size(), 50u);
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, i);
    EXPECT_EQ(a[i].prompt_len, b[i].prompt_len);
    EXPECT_EQ(a[i].arrival_step, b[i].arrival_step);
    EXPECT_GE(a[i].prompt_len, 1u);
    if (i) {
      EXPECT_GE(a[i].arrival_step, a[i - 1].arrival_step);
    }
    differs |= a[i].prompt_len != other[i].prompt_len;
  }
  EXPECT_TRUE(differs);
  // Request i's lengths do not depend on how many requests there are.
  c.num_requests = 10;
  const auto fewer = make_requests(c, 9);
  for (size_t i = 0; i < fewer.size(); ++i) EXPECT_EQ(fewer[i].prompt_len, a[i].prompt_len);
}

// Checks the scheduler's contract on a set of requests.
void check_schedule(const std::vector<RequestSpec>& requests, const std::vector<serving::Step>& steps,
                    int budget) {
  std::map<uint64_t, const RequestSpec*> by_id;
  for (const auto& r : requests) by_id[r.id] = &r;
  std::map<uint64_t, uint32_t> next;             // next expected position
  std::map<uint64_t, size_t> last_prefill_step;  // step index of the last prompt token
  std::map<uint64_t, int> finished;
  int64_t last_index = -1;
  for (size_t s = 0; s < steps.size(); ++s) {
    const serving::Step& step = steps[s];
    EXPECT_GT(step.index, last_index);
    last_index = step.index;
    EXPECT_LE(static_cast<int>(step.rows.size()), budget) << "step " << s << " exceeds the token budget";
    EXPECT_FALSE(step.rows.empty());
    size_t span_rows = 0;  // the spans cover the rows, in order
    for (const serving::Span& span : step.spans) {
      EXPECT_EQ(span.row, static_cast<int32_t>(span_rows));
      span_rows += span.end - span.begin;
    }
    EXPECT_EQ(span_rows, step.rows.size());
    EXPECT_EQ(step.accepted.size(), step.spans.size());
    std::map<uint64_t, int> decode_in_step;
    for (const TokenMeta& m : step.rows) {
      const RequestSpec& r = *by_id.at(m.request_id);
      EXPECT_GE(step.index, r.arrival_step) << "request " << r.id << " scheduled before it arrived";
      EXPECT_EQ(m.position, next[m.request_id]) << "request " << m.request_id << " positions not contiguous";
      next[m.request_id] = m.position + 1;
      if (m.position < r.prompt_len) {
        last_prefill_step[m.request_id] = s;
      } else {
        EXPECT_GT(s, last_prefill_step.at(m.request_id)) << "decode in the same step as the prompt's end";
        EXPECT_EQ(++decode_in_step[m.request_id], 1) << "two decode tokens of one request in a step";
      }
    }
    for (uint64_t id : step.finished) {
      EXPECT_EQ(next[id], by_id.at(id)->prompt_len + by_id.at(id)->decode_len);
      ++finished[id];
    }
  }
  for (const auto& r : requests) {
    EXPECT_EQ(next[r.id], r.prompt_len + r.decode_len) << "request " << r.id << " incomplete";
    EXPECT_EQ(finished[r.id], 1);
  }
}

TEST(SimWorkload, ContinuousBatchingRespectsBudgetAndOrder) {
  for (int budget : {1, 7, 64, 512}) {
    for (double rate : {0.0, 0.2}) {
      WorkloadConfig c;
      c.num_requests = 20;
      c.prompt_len = LengthDist::parse("uniform:1,150");
      c.decode_len = LengthDist::parse("uniform:0,20");
      c.arrival_rate = rate;
      c.token_budget = budget;
      const auto requests = make_requests(c, 3);
      const auto steps = schedule(requests, c);
      SCOPED_TRACE("budget " + std::to_string(budget) + " rate " + std::to_string(rate));
      check_schedule(requests, steps, budget);
    }
  }
}

TEST(SimWorkload, StaticBatchHoldsEveryPromptOnce) {
  WorkloadConfig c;
  c.num_requests = 5;
  const auto requests = make_requests(c, 1);
  const auto steps = schedule(requests, c);
  ASSERT_EQ(steps.size(), 1u);
  size_t total = 0;
  for (const auto& r : requests) total += r.prompt_len;
  EXPECT_EQ(steps[0].rows.size(), total);
  EXPECT_EQ(steps[0].finished.size(), 5u);
  EXPECT_EQ(steps[0].spans.size(), 5u);
  for (const TokenMeta& m : steps[0].rows) EXPECT_LT(m.position, requests.at(m.request_id).prompt_len);
}

// Shared system prompts: a share of the requests begins with one of the workload's system prompts (each of
// one length, drawn once); their rows of it are keyed by the system prompt's content, so every request with
// it routes those rows alike; the prefix cache then serves them.
TEST(SimWorkload, SystemPromptsAreSharedAndCached) {
  WorkloadConfig c;
  c.num_requests = 400;
  c.prompt_len = LengthDist::parse("uniform:8,40");
  c.decode_len = LengthDist::parse("uniform:1,8");
  c.system_prompts = 4;
  c.system_prompt_share = 0.5;
  c.token_budget = 128;
  c.arrival_rate = 0.5;
  const auto requests = make_requests(c, 5);
  std::map<int32_t, uint32_t> length;
  int with = 0;
  for (const RequestSpec& r : requests) {
    if (r.system_prompt < 0) {
      EXPECT_EQ(r.system_len, 0u);
      continue;
    }
    ++with;
    EXPECT_LT(r.system_prompt, 4);
    EXPECT_GE(r.system_len, 24u);
    EXPECT_LE(r.system_len, 96u);
    EXPECT_GE(r.prompt_len, r.system_len + 8);
    auto [it, inserted] = length.emplace(r.system_prompt, r.system_len);
    EXPECT_EQ(it->second, r.system_len) << "one length per system prompt";
  }
  EXPECT_GT(with, 150);
  EXPECT_LT(with, 250);
  EXPECT_EQ(length.size(), 4u);
  c.prefix_cache = true;
  c.kv_blocks = 256;
  std::vector<std::vector<TokenMeta>> keys;
  const auto steps = schedule(requests, c, 5, &keys);
  ASSERT_EQ(keys.size(), steps.size());
  int64_t cached = 0, keyed_rows = 0;
  std::map<uint64_t, const RequestSpec*> by_id;
  for (const RequestSpec& r : requests) by_id[r.id] = &r;
  for (size_t k = 0; k < steps.size(); ++k) {
    const serving::Step& s = steps[k];
    for (const serving::Admission& a : s.admitted) {
      cached += a.cached;
      EXPECT_LE(a.cached, by_id.at(a.id)->system_len + 15) << "only system prompts are shared";
    }
    if (keys[k].empty()) continue;
    ASSERT_EQ(keys[k].size(), s.rows.size());
    for (size_t i = 0; i < s.rows.size(); ++i) {
      const RequestSpec& r = *by_id.at(s.rows[i].request_id);
      if (s.rows[i].position < r.system_len) {
        EXPECT_EQ(keys[k][i].request_id, kSystemPromptContent | static_cast<uint64_t>(r.system_prompt));
        ++keyed_rows;
      } else {
        EXPECT_EQ(keys[k][i], s.rows[i]);
      }
    }
  }
  EXPECT_GT(cached, 0);
  EXPECT_GT(keyed_rows, 0);
}

// Conversations: each of the 60 conversations has 2-5 turns; a later turn follows the previous one (its
// index), resends the previous turns' prompts and answers (its turn ends extend the previous turn's by the
// answer's end and its own length), shares the conversation's content and system prompt, and arrives after
// the previous turn finished plus its think time. Its rows are keyed by the conversation's content, and the
// cache serves it the previous turn's full blocks: under the prefix rule's salt over the turn ends as many as
// a cache keyed by tokens alone, more than when later turns are admitted as plain prompts.
TEST(SimWorkload, ConversationTurnsFollowAndHitTheCache) {
  WorkloadConfig c;
  c.num_requests = 60;
  c.turns = LengthDist::parse("uniform:2,5");
  c.prompt_len = LengthDist::parse("uniform:20,80");
  c.turn_prompt_len = LengthDist::parse("uniform:4,40");
  c.decode_len = LengthDist::parse("uniform:1,24");
  c.think_steps = LengthDist::parse("uniform:0,6");
  c.token_budget = 128;
  c.arrival_rate = 0.2;
  c.system_prompts = 2;
  const auto requests = make_requests(c, 9);
  int later = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const RequestSpec& r = requests[i];
    if (r.follows < 0) {
      EXPECT_TRUE(r.turn_ends.empty());
      EXPECT_EQ(r.content(), r.id);
      continue;
    }
    ++later;
    ASSERT_EQ(r.follows, static_cast<int64_t>(i) - 1);
    const RequestSpec& p = requests[i - 1];
    std::vector<uint32_t> want = p.turn_ends.empty() ? std::vector<uint32_t>{p.prompt_len} : p.turn_ends;
    want.push_back(p.prompt_len + p.decode_len + 1);
    want.push_back(r.prompt_len);
    EXPECT_EQ(r.turn_ends, want);
    EXPECT_GE(r.prompt_len, want[want.size() - 2] + 4);
    EXPECT_EQ(r.content(), p.content());
    EXPECT_EQ(r.system_prompt, p.system_prompt);
    EXPECT_GE(r.think_steps, 0);
    EXPECT_LE(r.think_steps, 6);
  }
  EXPECT_GE(later, 60);
  EXPECT_LE(later, 240);

  c.prefix_cache = true;
  c.kv_blocks = 2048;
  auto cached_share = [&](const std::vector<RoutingRule>& rules, bool turn_ends, bool check) {
    WorkloadConfig w = c;
    w.turn_ends = turn_ends;
    StepStream stream(requests, w, 9, rules);
    serving::Step step;
    std::vector<TokenMeta> keys;
    std::map<uint64_t, size_t> index;
    for (size_t i = 0; i < requests.size(); ++i) index[requests[i].id] = i;
    std::map<uint64_t, int64_t> finished_at;
    int64_t later_cached = 0, later_previous = 0;
    while (stream.next(step, keys)) {
      for (const serving::Admission& a : step.admitted) {
        const RequestSpec& r = requests[index.at(a.id)];
        if (r.follows < 0 || a.resumed) continue;
        const RequestSpec& p = requests[static_cast<size_t>(r.follows)];
        if (check) {
          EXPECT_GE(step.index, finished_at.at(p.id) + 1 + r.think_steps) << "request " << r.id;
          EXPECT_EQ(a.turn_ends, turn_ends ? r.turn_ends : std::vector<uint32_t>{});
        }
        later_cached += a.cached;
        later_previous += (p.prompt_len + p.decode_len) / 16 * 16;  // the previous turn's full blocks
      }
      for (size_t i = 0; i < step.rows.size() && check; ++i) {
        const RequestSpec& r = requests[index.at(step.rows[i].request_id)];
        const TokenMeta key = keys.empty() ? step.rows[i] : keys[i];
        if (step.rows[i].position >= r.system_len && r.follows >= 0 && key.request_id < kDraftContent) {
          EXPECT_EQ(key.request_id, r.content());
        }
      }
      for (uint64_t id : step.finished) finished_at[id] = step.index;
    }
    return static_cast<double>(later_cached) / static_cast<double>(later_previous);
  };
  DispatchPolicy stable = DispatchPolicy::mode("stable");
  const double salted = cached_share({RoutingRule::of(stable)}, true, true);
  const double tokens = cached_share({}, true, false);
  const double plain = cached_share({RoutingRule::of(stable)}, false, true);
  std::printf("cached share of the previous turns: salted %.3f, tokens %.3f, plain %.3f\n", salted, tokens,
              plain);
  EXPECT_GE(salted, 0.98 * tokens) << salted << " against " << tokens;
  EXPECT_GT(salted, 0.9) << "a later turn finds the previous turn's blocks";
  EXPECT_LT(plain, 0.9 * salted) << "plain prompts miss the blocks near the previous turn's end";
}

// Speculative decoding in the workload: drafts accepted from the seed's stream (the same steps for the same
// seed), rejected ones keyed as drafts and rolled back.
TEST(SimWorkload, SpeculationIsSeededAndRollsBackRejectedDrafts) {
  WorkloadConfig c;
  c.num_requests = 30;
  c.prompt_len = LengthDist::parse("uniform:4,20");
  c.decode_len = LengthDist::parse("uniform:4,30");
  c.token_budget = 64;
  c.spec_tokens = 3;
  c.spec_accept = 0.6;
  const auto requests = make_requests(c, 2);
  std::vector<std::vector<TokenMeta>> keys;
  const auto a = schedule(requests, c, 2, &keys), b = schedule(requests, c, 2);
  ASSERT_EQ(a.size(), b.size());
  int64_t rollbacks = 0, drafts = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].rows, b[i].rows);
    EXPECT_EQ(a[i].accepted, b[i].accepted);
    rollbacks += static_cast<int64_t>(a[i].rollbacks.size());
    for (size_t r = 0; r < keys[i].size(); ++r) drafts += (keys[i][r].request_id & kDraftContent) != 0;
  }
  EXPECT_GT(rollbacks, 0);
  EXPECT_GT(drafts, 0);
  c.spec_accept = 1.0;  // every draft accepted: no rollback
  for (const serving::Step& s : schedule(requests, c, 2)) EXPECT_TRUE(s.rollbacks.empty());
}

TEST(SimWorkload, SizeIsCheckedBeforeAnythingIsAllocated) {
  // The case: 1e8 requests of 1e5 prompt tokens, one static batch.
  WorkloadConfig c;
  c.num_requests = 100000000;
  c.prompt_len = LengthDist::parse("fixed:100000");
  const WorkloadFootprint f = expected_footprint(c);
  EXPECT_EQ(f.requests, 1e8);
  EXPECT_EQ(f.tokens, 1e13);
  EXPECT_EQ(f.steps, 1.0);
  EXPECT_EQ(f.largest_step, 1e13);
  EXPECT_GT(f.bytes(8, 2, 2), 1e13 * 36);  // at least each token's row and routes
  expect_throw_with<DataError>([&] { check_workload_size(f, 8, 2, 2, "use fewer"); },
                               "the workload needs at least ");
  expect_throw_with<DataError>([&] { check_workload_size(f, 8, 2, 2, "use fewer"); },
                               "of memory (1e+08 requests, 1e+13 tokens), more than the ");
  // Continuous batching: prompt + decode tokens, at least tokens / budget steps of at most budget tokens.
  c.token_budget = 1000;
  c.decode_len = LengthDist::parse("uniform:0,10");
  const WorkloadFootprint g = expected_footprint(c);
  EXPECT_EQ(g.tokens, 1e8 * 100005);
  EXPECT_EQ(g.steps, std::ceil(1e8 * 100005 / 1000));
  EXPECT_EQ(g.largest_step, 1000);
  // Exact counts from requests.
  const std::vector<RequestSpec> requests = {{0, 0, 10, 5}, {1, 3, 2, 0}};
  const WorkloadFootprint s = footprint(requests, 0);
  EXPECT_EQ(s.tokens, 12);
  EXPECT_EQ(s.largest_step, 12);
  const WorkloadFootprint cb = footprint(requests, 4);
  EXPECT_EQ(cb.tokens, 17);
  EXPECT_EQ(cb.steps, 5);
  EXPECT_EQ(cb.largest_step, 4);
  EXPECT_NO_THROW(check_workload_size(cb, 8, 2, 2, "x"));
  // A stated limit instead of the machine's memory; and a step too large to index (with memory to spare).
  expect_throw_with<DataError>([&] { check_workload_size(cb, 8, 2, 2, "x", 100); },
                               "more than the 100 bytes allowed");
  WorkloadFootprint big;
  big.requests = 1;
  big.tokens = big.largest_step = 3e8;
  big.steps = 1;
  expect_throw_with<UsageError>([&] { check_workload_size(big, 8, 2, 2, "x", 1e300); },
                                "a step of 300000000 tokens is too large (at most 268435455 with 8 experts)");
}

TEST(SimWorkload, ValidatesFields) {
  WorkloadConfig c;
  c.num_requests = 0;
  expect_throw_with<UsageError>([&] { c.validate(); }, "requests must be >= 1");
  c.num_requests = 1;
  c.token_budget = -1;
  expect_throw_with<UsageError>([&] { c.validate(); }, "token-budget");
}

}  // namespace
}  // namespace moe::sim

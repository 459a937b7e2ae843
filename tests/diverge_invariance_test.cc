// sim/diverge: the deterministic preset (stable dispatch: prefix scope, invariant kernels) gives the probe
// exactly one completion - the one it gets alone, with bit-identical logits - over 30+ trials with varied
// traffic (Poisson and fixed-interval arrivals, shared system prompts, twins), prefill chunk sizes, token
// budgets, prefix caching, preemption and speculative decoding; so do causal scope and dropless dispatch.
// The same at temperature 0.7, each request sampling by its (seed, position). Request scope, whose budgets
// follow the forward pass, and sequence scope under a cache keyed by tokens alone are the counter-checks.
// The same for a probe that is a 3-turn conversation, its later turns served from the cache; admitted as
// plain prompts, its later turns miss the previous turns' last blocks (the counter-check of the turn ends).
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "moe/model/model.h"
#include "sim/diverge/conversation.h"
#include "sim/diverge/diverge.h"

namespace moe::sim::diverge {
namespace {

DivergeOptions options() {
  DivergeOptions o;
  o.shape = model::ModelShape::tiny();
  o.trials = 32;
  o.probe_length = 20;
  o.gen_length = 24;
  o.engine.token_budget = 32;
  o.engine.chunk_size = 8;
  o.vary_chunks = {1, 3, 8, 16, 32};
  o.vary_budgets = {16, 32, 64};
  o.traffic.arrival_rate = 0.7;
  o.traffic.prompt_max = 40;
  o.traffic.decode_max = 24;
  o.traffic.probe_arrival_step = 5;
  o.traffic.horizon_steps = 100;
  o.traffic.system_min = 10;
  o.traffic.system_max = 40;
  o.tight_kv_blocks = 16;
  o.sweep_capacity_factors.clear();
  o.seed = 77;
  o.threads = 2;
  return o;
}

TEST(DivergeInvariance, StableAndCausalGiveOneCompletionWithTheSameBits) {
  for (const char* mode : {"stable", "causal"}) {
    for (double cf : {0.5, 1.0}) {
      for (int fixed_interval : {0, 2}) {
        DivergeOptions o = options();
        o.traffic.fixed_interval = fixed_interval;
        o.grid = {{mode, kernels::KernelKind::kInvariant, cf, true}};
        const DivergeReport rep = run_diverge(o);
        const ConfigResult& r = rep.grid[0];
        const std::string what =
            std::string(mode) + " cf " + std::to_string(cf) + " interval " + std::to_string(fixed_interval);
        EXPECT_EQ(r.distinct, 1) << what;
        EXPECT_EQ(r.diverged, 0) << what;
        EXPECT_EQ(r.bitwise_same, o.trials) << what;
        // The traffic really varied the probe's batches, its chunks and budgets, its cached prefix, its
        // preemptions and drafts, and the probe lost pairs.
        EXPECT_GT(r.rows, 32 * 44) << what;
        EXPECT_EQ(std::set<int>(r.token_budgets.begin(), r.token_budgets.end()).size(), 3u) << what;
        EXPECT_GT(r.trials_with_cache_hits(), 4) << what;
        EXPECT_GT(r.trials_preempted(), 0) << what;
        int accepted = 0;
        for (int a : r.probe_accepted) accepted += a;
        EXPECT_GT(accepted, 0) << what;
        if (cf == 0.5) {
          EXPECT_GT(r.probe_pairs_dropped, 0) << what;
        }
      }
    }
  }
}

// At temperature 0.7 (top_p 0.95) every request samples by its (seed, position): the deterministic preset
// still gives the probe one completion, its alone one, with the same logits bits, whatever the traffic,
// chunking, budget, cache, preemption and speculation (drafts verified against the sampled token); and the
// sampled completion is not the greedy one.
TEST(DivergeInvariance, StableSampledGivesOneCompletionWithTheSameBits) {
  for (int fixed_interval : {0, 2}) {
    DivergeOptions o = options();
    o.traffic.fixed_interval = fixed_interval;
    o.grid = {{"stable", kernels::KernelKind::kInvariant, 1.0, true, false, 0.7},
              {"stable", kernels::KernelKind::kInvariant, 1.0, false, false, 0.7},
              {"stable", kernels::KernelKind::kInvariant, 1.0, true}};
    const DivergeReport rep = run_diverge(o);
    for (size_t i = 0; i < 2; ++i) {
      const ConfigResult& r = rep.grid[i];
      const std::string what = r.spec.label() + " interval " + std::to_string(fixed_interval);
      EXPECT_EQ(r.distinct, 1) << what;
      EXPECT_EQ(r.diverged, 0) << what;
      EXPECT_EQ(r.bitwise_same, o.trials) << what;
    }
    const ConfigResult& varied = rep.grid[0];
    EXPECT_GT(varied.trials_with_cache_hits(), 4);
    EXPECT_GT(varied.trials_preempted(), 0);
    int accepted = 0;
    for (int a : varied.probe_accepted) accepted += a;
    EXPECT_GT(accepted, 0);
    EXPECT_NE(varied.alone, rep.grid[2].alone);  // sampled, not greedy
  }
}

// The counter-check: request scope sizes the probe's budget from its rows in each forward pass, so varying
// the chunk size and budget changes its logits.
TEST(DivergeInvariance, RequestScopeDependsOnTheServerConfiguration) {
  DivergeOptions o = options();
  o.grid = {{"request", kernels::KernelKind::kInvariant, 0.5, true}};
  const DivergeReport rep = run_diverge(o);
  EXPECT_LT(rep.grid[0].bitwise_same, o.trials);
}

// The bug prefix scope fixes: sequence scope sizes a prompt's budget from its whole length, so a cached
// prefix written by a request of another prompt length (a cache keyed by tokens alone, which shared system
// prompts and twins fill) is not the probe's routing.
TEST(DivergeInvariance, SequenceScopeUnderATokenKeyedCacheDiverges) {
  DivergeOptions o = options();
  o.grid = {{"sequence", kernels::KernelKind::kInvariant, 0.5, true, true}};
  const DivergeReport rep = run_diverge(o);
  EXPECT_GT(rep.grid[0].trials_with_cache_hits(), 4);
  EXPECT_LT(rep.grid[0].bitwise_same, o.trials);
}

TEST(DivergeInvariance, DroplessInvariantGivesOneCompletion) {
  DivergeOptions o = options();
  o.grid = {{"dropless", kernels::KernelKind::kInvariant, 1.0, true}};
  const DivergeReport rep = run_diverge(o);
  EXPECT_EQ(rep.grid[0].distinct, 1);
  EXPECT_EQ(rep.grid[0].diverged, 0);
}

// The trials of every configuration share one pool of threads: the report's bytes (its JSON, times aside) are
// the same on 1 and 3 threads, for a grid of two configurations and a sweep of two more.
TEST(DivergeInvariance, ThreadCountDoesNotChangeResults) {
  DivergeOptions o = options();
  o.trials = 6;
  o.grid = {{"greedy", kernels::KernelKind::kFast, 1.0, false},
            {"stable", kernels::KernelKind::kInvariant, 1.0, true}};
  o.sweep_modes = {"greedy"};
  o.sweep_capacity_factors = {0.75, 1.5};
  auto bytes = [](const DivergeReport& r) {
    std::string json = to_json(r), out;
    std::istringstream lines(json);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("\"seconds\"") == std::string::npos) out += line + "\n";
    }
    return out;
  };
  o.threads = 1;
  const DivergeReport a = run_diverge(o);
  o.threads = 3;
  const DivergeReport b = run_diverge(o);
  ASSERT_EQ(a.grid.size(), 2u);
  ASSERT_EQ(a.sweep.size(), 2u);
  EXPECT_EQ(a.grid[0].completions, b.grid[0].completions);
  EXPECT_EQ(a.grid[0].alone, b.grid[0].alone);
  EXPECT_EQ(bytes(a), bytes(b));
}

// The positions of a turn's previous turn that the cache can hold: its prompt and answer but the answer's
// last token (never fed back in that turn), rounded down to whole blocks of 16.
int cacheable(int previous_prompt, int previous_answer) {
  return (previous_prompt + previous_answer - 1) / 16 * 16;
}

// Multi-turn trials: the probe is a 3-turn conversation (each turn the whole previous turn, its answer and a
// message) among strangers, a quarter of them conversations too. The deterministic preset gives it one
// completion - every turn's answer - with the alone run's bits in every trial, fixed or varied server, greedy
// or sampled; and its later turns took the previous turns' positions from the cache: in the alone run every
// cacheable position, in the fixed-server trials as many.
TEST(DivergeInvariance, StableMultiTurnGivesOneCompletionFromTheCache) {
  for (int fixed_interval : {0, 2}) {
    DivergeOptions o = options();
    o.traffic.fixed_interval = fixed_interval;
    o.grid = {{"stable", kernels::KernelKind::kInvariant, 1.0, false, false, 0.0, 3},
              {"stable", kernels::KernelKind::kInvariant, 1.0, true, false, 0.0, 3},
              {"stable", kernels::KernelKind::kInvariant, 0.5, true, false, 0.7, 3}};
    const DivergeReport rep = run_diverge(o);
    const std::vector<int> answers = split_answers(o.gen_length, 3);
    for (const ConfigResult& r : rep.grid) {
      const std::string what = r.spec.label() + " interval " + std::to_string(fixed_interval);
      EXPECT_EQ(r.distinct, 1) << what;
      EXPECT_EQ(r.diverged, 0) << what;
      EXPECT_EQ(r.bitwise_same, o.trials) << what;
      EXPECT_EQ(r.alone.size(), static_cast<size_t>(o.gen_length)) << what;
      ASSERT_EQ(r.turn_prompt_lengths.size(), 3u) << what;
      ASSERT_EQ(r.alone_turn_cached.size(), 3u) << what;
      const std::vector<double> hits = r.turn_hit_shares();
      for (size_t t = 1; t < 3; ++t) {
        const int floor = cacheable(r.turn_prompt_lengths[t - 1], answers[t - 1]);
        EXPECT_GE(r.alone_turn_cached[t], floor) << what << " turn " << t + 1;
        if (!r.spec.varied) {
          EXPECT_GE(hits[t], static_cast<double>(floor) / r.turn_prompt_lengths[t])
              << what << " turn " << t + 1;
        } else {
          EXPECT_GT(hits[t], 0.3) << what << " turn " << t + 1;  // tight pools evict in some trials
        }
      }
    }
    EXPECT_GT(rep.grid[1].trials_preempted(), 0);
    EXPECT_GT(rep.grid[2].probe_pairs_dropped, 0);
  }
}

// The later turns really come from the cache, and that changes nothing: the conversation served alone with
// and without the prefix cache gives the same logits bits. The counter-check: admitted as plain prompts (no
// turn ends) the later turns route the previous turns' last prompt rows under another horizon, so those
// blocks' keys differ and the cache serves fewer positions.
TEST(DivergeInvariance, MultiTurnPlainPromptsMissThePreviousTurnsBlocks) {
  model::ModelOptions mo;
  mo.kernel = kernels::KernelKind::kInvariant;
  mo.policy = model::ModelOptions::dispatch_mode("stable", 0.75);
  mo.record_routing = true;
  mo.max_tokens = 64;
  model::Model m(model::random_model(model::ModelShape::tiny(), 11), mo);
  const int vocab = m.shape().vocab_size;
  Request first;
  first.id = 1;
  first.prompt = random_prompt(50, vocab, 1);
  first.max_new_tokens = 8;
  const std::vector<std::vector<int32_t>> messages = {random_prompt(10, vocab, 2),
                                                      random_prompt(10, vocab, 3)};
  auto conversation = [&](bool plain) {
    std::vector<Request> requests = {first};
    for (Request& t : follow_up_turns(first, messages, std::vector<int>{8, 8}, std::vector<int>{2, 0}, 2)) {
      t.as_plain_prompt = plain;
      requests.push_back(std::move(t));
    }
    return requests;
  };
  const uint64_t turns[] = {1, 2, 3};
  serving::EngineConfig cached = serving::EngineConfig{};
  cached.chunk_size = 16;
  cached.prefix_cache = true;
  cached.kv_blocks = 64;
  const ServeOutcome with = serve(m, conversation(false), cached, CacheKey::kSalted, turns);
  const ServeOutcome without =
      serve(m, conversation(false), serving::EngineConfig{32, 16}, CacheKey::kSalted, turns);
  EXPECT_EQ(with.probe_logits_hash, without.probe_logits_hash);
  EXPECT_EQ(with.probe_tokens, without.probe_tokens);
  ASSERT_EQ(with.probe_turns.size(), 3u);
  EXPECT_EQ(with.probe_turns[1].cached_at_admission, static_cast<uint32_t>(cacheable(50, 8)));  // 48
  EXPECT_EQ(with.probe_turns[2].cached_at_admission, static_cast<uint32_t>(cacheable(68, 8)));  // 64
  EXPECT_EQ(without.engine.cached_tokens, 0);
  const ServeOutcome plain = serve(m, conversation(true), cached, CacheKey::kSalted, turns);
  for (size_t t = 1; t < 3; ++t) {
    EXPECT_LT(plain.probe_turns[t].cached_at_admission, with.probe_turns[t].cached_at_admission) << t + 1;
  }
}

}  // namespace
}  // namespace moe::sim::diverge

// A serving engine's handling of one probe request, drawn at random and run by the serving engine model
// (sim/serving/engine.h) through its lifecycle driver (sim/serving/lifecycle.h), recorded step by step; every
// backend under test (the CPU planner, the GPU planner's OpenMP twin, the CPU and expert-parallel layers)
// replays the steps (serving::replay_step) on its own RoutingState: strangers arriving, prefilling in chunks
// and decoding (speculatively too); a writer request that shares the probe's first P tokens and whose routing
// segments the prefix cache keeps beside its blocks; the probe restored from those segments (where the key's
// salt lets it: another prompt length only where no decision of the prefix saw it), prefilled in chunks,
// decoding with speculative draft tokens that are partly rejected (rolled back), preempted by a tight KV pool
// (released, restored from what the cache still holds of its own blocks, its prompt and generated tokens
// re-prefilled in chunks). What the probe's positions end up with - through the writer's cached segments,
// its own recomputations or its own cached blocks - must equal the probe served alone in one call
// (docs/determinism.md clause 2b).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "router/dispatch_policy.h"
#include "router/routing_rule.h"
#include "router/routing_state.h"
#include "router/token_meta.h"
#include "sim/serving/block_store.h"
#include "sim/serving/engine.h"
#include "sim/serving/lifecycle.h"

namespace moe::testing {

// A row: its identity in the batch and its content - the token it holds, which is what decides its router
// input: (content, position) for a stranger's tokens, the probe's, a shared prefix or a rejected draft token.
struct ServingRow {
  TokenMeta meta;
  uint64_t content = 0;
};

struct ServingTrial {
  DispatchPolicy policy;
  uint64_t probe = 7;
  uint64_t probe_content = 7;
  uint32_t prompt_length = 0;
  uint32_t total = 0;  // positions the probe ends with (prompt + decode)
  sim::serving::EngineConfig engine;
  // The engine's steps (lifecycle events and verdicts), and per step its rows with their contents, in the
  // order the forward pass sends them (shuffled: a backend's plan must not depend on the row order).
  std::vector<sim::serving::Step> steps;
  std::vector<std::vector<ServingRow>> rows;
  // A cache keyed by tokens alone (ignoring prefix_cache_salt): a restore takes the segments as the
  // restoring request's own, whatever prompt length they were planned under - the counter-check of sequence
  // scope.
  bool forge_prompt_length = false;
  std::vector<uint64_t> unfinished;  // requests still live after the last step (released then)
  // What happened to the probe.
  uint32_t cached = 0;  // positions its first admission found in the cache
  int preemptions = 0;
  int rejected = 0;  // rejected draft rows
  int forwards = 0;

  std::string describe() const {
    return "prompt " + std::to_string(prompt_length) + ", total " + std::to_string(total) + ", cached " +
           std::to_string(cached) + ", preemptions " + std::to_string(preemptions) + ", rejected drafts " +
           std::to_string(rejected) + ", steps " + std::to_string(steps.size()) + ", budget " +
           std::to_string(engine.token_budget) + ", chunk " + std::to_string(engine.chunk_size) + ", block " +
           std::to_string(engine.block_size) + ", kv blocks " + std::to_string(engine.kv_blocks) + ", spec " +
           std::to_string(engine.spec_tokens) + ", scope " + std::string(to_string(policy.scope)) +
           ", lookahead " + std::to_string(policy.lookahead);
  }
};

// The probe alone: its prompt and decode rows in one call, after admit(probe, prompt_length).
inline std::vector<ServingRow> ProbeAloneRows(const ServingTrial& trial) {
  std::vector<ServingRow> rows;
  for (uint32_t p = 0; p < trial.total; ++p) rows.push_back({{trial.probe, p}, trial.probe_content});
  return rows;
}

struct ServingDrawOptions {
  int max_prompt = 48;
  int max_decode = 8;
  // Counter-check: the writer's prompt length differs where its routing depends on it, and the cache keys
  // blocks by their tokens alone, so the probe restores the writer's segments claiming its own prompt length.
  bool forge = false;
};

namespace serving_detail {

// A request of a trial: its tokens are its content, but for the positions it shares with the probe.
struct Drawn {
  sim::serving::EngineRequest request;
  uint64_t content = 0;
  uint32_t shared = 0;  // positions [0, shared) hold the probe's content
  uint64_t content_at(uint32_t position, uint64_t probe_content) const {
    return position < shared ? probe_content : content;
  }
};

// The engine's client: tokens are contents; drafts proposed at random; the salt of the trial's rule.
class Client : public sim::serving::EngineClient {
 public:
  Client(std::mt19937_64& rng, const std::vector<Drawn>& drawn, const ServingTrial& trial)
      : rng_(rng), drawn_(drawn), trial_(trial), rule_(RoutingRule::of(trial.policy)) {}
  uint64_t token(const sim::serving::EngineRequest& r, uint32_t position) override {
    return drawn_[r.client_index].content_at(position, trial_.probe_content);
  }
  int propose(const sim::serving::EngineRequest&, uint32_t, int max) override {
    return static_cast<int>(rng_() % static_cast<uint64_t>(max + 1));
  }
  uint64_t salt(const sim::serving::EngineRequest& r, uint32_t block_end) override {
    return trial_.forge_prompt_length ? 0 : prefix_cache_salt(rule_, block_end, r.prompt_length);
  }

 private:
  std::mt19937_64& rng_;
  const std::vector<Drawn>& drawn_;
  const ServingTrial& trial_;
  RoutingRule rule_;
};

// The trial's verdicts: the leading drafts accepted at random; records each step with its rows' contents
// (accepted rows hold their request's tokens, rejected drafts contents of their own), shuffled, and which
// requests are live.
class Recorder : public sim::serving::StepHandler {
 public:
  Recorder(std::mt19937_64& rng, const std::vector<Drawn>& drawn, ServingTrial& trial)
      : rng_(rng), drawn_(drawn), trial_(trial) {}
  void admit(const sim::serving::Admission& a) override { live_.insert(a.id); }
  void release(uint64_t id) override { live_.erase(id); }
  const std::set<uint64_t>& live() const { return live_; }
  void accept(const sim::serving::Step& step, std::vector<uint32_t>& accepted) override {
    for (const sim::serving::Span& s : step.spans) {
      const uint32_t n = s.end - s.begin;
      accepted.push_back(s.drafts > 0 ? 1 + static_cast<uint32_t>(rng_() % n) : n);
    }
  }
  void record(const sim::serving::Step& step) {
    std::vector<ServingRow> rows;
    for (size_t i = 0; i < step.spans.size(); ++i) {
      const sim::serving::Span& s = step.spans[i];
      const Drawn& d = drawn_[s.client_index];
      for (uint32_t q = s.begin; q < s.end; ++q) {
        const bool rejected = q >= s.begin + step.accepted[i];
        rows.push_back({{s.id, q}, rejected ? draft_content_++ : d.content_at(q, trial_.probe_content)});
      }
      if (s.id == trial_.probe) trial_.rejected += static_cast<int>(s.end - s.begin - step.accepted[i]);
    }
    std::shuffle(rows.begin(), rows.end(), rng_);
    trial_.steps.push_back(step);
    trial_.rows.push_back(std::move(rows));
    ++trial_.forwards;
  }

 private:
  std::mt19937_64& rng_;
  const std::vector<Drawn>& drawn_;
  ServingTrial& trial_;
  uint64_t draft_content_ = uint64_t{1} << 40;
  std::set<uint64_t> live_;  // admitted and not released
};

inline uint32_t Below(std::mt19937_64& rng, uint32_t n) {
  return n == 0 ? 0 : static_cast<uint32_t>(rng() % n);
}

}  // namespace serving_detail

// Draws one trial under `policy` and runs it through the serving engine (a recording RoutingState replays
// it: a rollback into a restored request's records needs them).
inline ServingTrial DrawServingTrial(std::mt19937_64& rng, const DispatchPolicy& policy,
                                     const ServingDrawOptions& opt = {}) {
  using serving_detail::Below;
  using serving_detail::Drawn;
  ServingTrial t;
  t.policy = policy;
  t.forge_prompt_length = opt.forge;
  t.prompt_length = 1 + static_cast<uint32_t>(rng() % opt.max_prompt);
  t.total = t.prompt_length + static_cast<uint32_t>(rng() % (opt.max_decode + 1));
  const uint32_t L = t.prompt_length;
  const RoutingRule rule = RoutingRule::of(policy);
  sim::serving::EngineConfig& e = t.engine;
  e.token_budget = 16 + static_cast<int>(Below(rng, 49));
  e.chunk_size = rng() % 3 == 0 ? 0 : 2 + static_cast<int>(Below(rng, 15));
  e.block_size = 1 << Below(rng, Below(rng, 4) + 1);  // 1, 2, 4 or 8 positions, small ones more often
  e.prefix_cache = true;
  e.spec_tokens = rng() % 5 < 3 ? 1 + static_cast<int>(Below(rng, 4)) : 0;
  e.keep_request_stats = true;
  std::vector<Drawn> drawn;
  uint64_t next_id = 100;
  // A request of `positions` positions (its prompt and the generated tokens that get a row).
  auto add = [&](uint64_t id, int64_t arrival, uint32_t prompt, uint32_t positions, uint64_t content,
                 uint32_t shared) {
    drawn.push_back(Drawn{{id, arrival, prompt, positions - prompt + 1, drawn.size()}, content, shared});
  };
  // A writer computed the probe's first P prompt positions earlier; the cache keeps its blocks.
  int64_t probe_arrival = Below(rng, 4);
  if (L >= 2 && (opt.forge || rng() % 100 < 90)) {
    // At least one whole block where the prompt has one (the cache serves whole blocks).
    const uint32_t P = std::max(1 + Below(rng, L - 1), std::min<uint32_t>(L - 1, e.block_size));
    // A writer whose routing of [0, P) is the probe's where the salt says so: where no decision of [0, P)
    // saw L (salt 0) its prompt is any length >= P + lookahead, else the probe's own.
    uint32_t writer_prompt = L;
    if (prefix_cache_salt(rule, P, L) == 0 && rng() % 100 < 70) {
      const uint32_t least = policy.scope == CapacityScope::kPrefix ? P + policy.lookahead : P;
      writer_prompt = std::max<uint32_t>(1, least + Below(rng, 16));
    }
    if (opt.forge) writer_prompt = std::max<uint32_t>(P, L + 1 + Below(rng, 24));  // another salt, forged
    // It decodes on for a while, so that its blocks are often still held (not evictable) when the probe
    // comes, which is about when its prompt is computed.
    add(next_id, 0, writer_prompt, writer_prompt + Below(rng, 8), uint64_t{1} << 20, P);
    ++next_id;
    const uint32_t rows_per_step = e.chunk_size > 0 ? std::min(e.chunk_size, e.token_budget) : e.token_budget;
    probe_arrival = (writer_prompt + rows_per_step - 1) / rows_per_step + Below(rng, 3);
  }
  add(t.probe, probe_arrival, L, t.total, t.probe_content, 0);
  for (uint32_t strangers = Below(rng, 9); strangers > 0; --strangers, ++next_id) {
    const uint32_t prompt = 1 + Below(rng, 40);
    add(next_id, static_cast<int64_t>(Below(rng, static_cast<uint32_t>(probe_arrival) + 4)), prompt,
        prompt + Below(rng, 8), next_id, 0);
  }
  // The KV pool: room for everyone, or (half the time) just enough for the longest request, so that the
  // engine preempts - the latest-started first, which is often the probe (strangers started before it).
  uint64_t longest = 0;
  for (const Drawn& d : drawn) {
    const uint64_t positions = uint64_t{d.request.prompt_length} + d.request.max_new_tokens;
    longest = std::max<uint64_t>(longest, (positions + e.block_size - 1) / e.block_size);
  }
  e.kv_blocks = rng() % 2 ? static_cast<int64_t>(longest + Below(rng, 3)) : 4096;
  std::vector<sim::serving::EngineRequest> requests;
  for (const Drawn& d : drawn) requests.push_back(d.request);
  serving_detail::Client client(rng, drawn, t);
  serving_detail::Recorder recorder(rng, drawn, t);
  sim::serving::Engine engine(e, requests, client);
  // The engine runs until the probe finishes; the requests still live then are released (the server stops).
  sim::serving::Step step;
  while (sim::serving::run_step(engine, step, recorder)) {
    recorder.record(step);
    if (std::find(step.finished.begin(), step.finished.end(), t.probe) != step.finished.end()) break;
  }
  t.unfinished.assign(recorder.live().begin(), recorder.live().end());
  const sim::serving::RequestStats probe = engine.request_stats(t.probe);
  t.cached = probe.cached_at_admission;
  t.preemptions = probe.preemptions;
  return t;
}

// The lifecycle calls of a replay, straight on the state (a backend with collective calls - the
// expert-parallel layer - passes its own).
struct DirectLifecycle {
  void admit(RoutingState& s, uint64_t id, uint32_t prompt_length) { s.admit(id, prompt_length); }
  void restore(RoutingState& s, uint64_t id, uint32_t prompt_length,
               const std::vector<RoutingSegment>& prefix) {
    s.restore(id, prompt_length, prefix);
  }
  void rollback(RoutingState& s, uint64_t id, uint32_t position) { s.rollback(id, position); }
  void release(RoutingState& s, uint64_t id) { s.release(id); }
};

// Replays `trial` on `state` (a recording state of the backend's shape) with the backend's forward pass:
//   forward(rows, state) -> one Outcome per row (its pairs, and whatever else the backend checks)
// and returns the probe's outcome at each of its positions [0, total): the computation its KV comes from at
// the end - its own last one, or the one of the request whose cached segments it restored. The lifecycle is
// sim/serving/lifecycle.h's (replay_step); the routing segments are the payload kept beside each block.
template <class Outcome, class Forward, class Lifecycle = DirectLifecycle>
std::vector<Outcome> ReplayServingTrial(const ServingTrial& trial, RoutingState& state, Forward&& forward,
                                        Lifecycle life = {}) {
  // A computation: the index of a row's outcome in `computed` (rows computed again get new indices).
  using Computation = size_t;
  struct Payload {
    RoutingSegment segment;
    std::vector<Computation> source;  // per position of the block: the computation its KV comes from
  };
  struct Replay : sim::serving::StepHandler {
    const ServingTrial& trial;
    RoutingState& state;
    Forward& forward_pass;
    Lifecycle& life;
    size_t step = 0;
    std::vector<Outcome> computed;
    std::map<uint64_t, std::vector<Computation>> source;  // request -> per position, the computation it uses
    sim::serving::BlockStore<Payload> cache;              // block -> what the cache keeps beside it
    std::vector<const Payload*> taken;

    Replay(const ServingTrial& t, RoutingState& s, Forward& f, Lifecycle& l)
        : trial(t), state(s), forward_pass(f), life(l), cache(t.engine.kv_blocks) {}
    void release(uint64_t id) override { life.release(state, id); }
    void admit(const sim::serving::Admission& a) override {
      std::vector<Computation>& src = source[a.id];
      src.clear();
      if (a.cached == 0) {
        life.admit(state, a.id, a.prompt_length);
        return;
      }
      std::vector<RoutingSegment> prefix;
      cache.take(a, taken);
      for (const Payload* p : taken) {
        prefix.push_back(p->segment);
        if (trial.forge_prompt_length) prefix.back().prompt_length = a.prompt_length;
        src.insert(src.end(), p->source.begin(), p->source.end());
      }
      life.restore(state, a.id, a.prompt_length, prefix);
    }
    void forward(const sim::serving::Step&) override {
      const std::vector<ServingRow>& rows = trial.rows.at(step++);
      const std::vector<Outcome> out = forward_pass(rows, state);
      for (size_t r = 0; r < rows.size(); ++r) {
        const TokenMeta& m = rows[r].meta;
        std::vector<Computation>& src = source[m.request_id];
        if (src.size() <= m.position) src.resize(m.position + 1);
        src[m.position] = computed.size();
        computed.push_back(out[r]);
      }
    }
    void rollback(uint64_t id, uint32_t position) override {
      life.rollback(state, id, position);
      source[id].resize(position);
    }
    void keep(const sim::serving::Registered& b) override {
      const std::vector<Computation>& src = source.at(b.id);
      cache.keep(b, Payload{state.segment(b.id, b.begin, b.end),
                            std::vector<Computation>(src.begin() + b.begin, src.begin() + b.end)});
    }
  };
  Replay replay(trial, state, forward, life);
  for (const sim::serving::Step& step : trial.steps) sim::serving::replay_step(step, replay);
  for (uint64_t id : trial.unfinished) life.release(state, id);
  std::vector<Outcome> probe;
  const std::vector<Computation>& src = replay.source.at(trial.probe);
  for (uint32_t p = 0; p < trial.total; ++p) probe.push_back(replay.computed.at(src.at(p)));
  return probe;
}

}  // namespace moe::testing

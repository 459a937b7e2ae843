#include "sim/diverge/serving.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "router/routing_rule.h"
#include "router/rules/plan_rules.h"
#include "sim/diverge/conversation.h"
#include "sim/serving/block_store.h"
#include "sim/serving/lifecycle.h"

namespace moe::sim::diverge {
namespace {

// The engine's client: the requests' tokens (prompt, then what they generated), their drafts, the salt. A
// later turn's tokens are its message until its previous turn finishes (finished()), then its whole prompt.
class LabClient : public serving::EngineClient {
 public:
  LabClient(const std::vector<Request>& requests, const DispatchPolicy& policy, CacheKey cache_key)
      : rule_(cache_key == CacheKey::kTokens ? RoutingRule{} : RoutingRule::of(policy)),
        tokens_(requests.size()),
        drafts_(requests.size()),
        sampling_(requests.size()),
        lengths_(prompt_lengths(requests)) {
    for (size_t i = 0; i < requests.size(); ++i) {
      tokens_[i] = requests[i].prompt;
      sampling_[i] = requests[i].sampling;
      index_[requests[i].id] = i;
      if (requests[i].follows != serving::kNoRequest) followers_[requests[i].follows].push_back(i);
    }
  }
  uint64_t token(const serving::EngineRequest& r, uint32_t position) override {
    return static_cast<uint64_t>(tokens_[r.client_index].at(position));
  }
  int propose(const serving::EngineRequest& r, uint32_t, int max) override {
    drafts_[r.client_index] = propose_drafts(tokens_[r.client_index], max);
    return static_cast<int>(drafts_[r.client_index].size());
  }
  uint64_t salt(const serving::EngineRequest& r, uint32_t block_end) override {
    return prefix_cache_salt(rule_, block_end, r.turns());
  }
  // Request `id` finished: each turn that follows it gets its whole prompt, the finished request's prompt
  // and answer (its first L + max_new_tokens tokens) in front of the message.
  void finished(uint64_t id) {
    const auto it = followers_.find(id);
    if (it == followers_.end()) return;
    const std::vector<int32_t>& before = tokens_[index_.at(id)];
    for (size_t f : it->second) {
      const size_t answer_end = lengths_[f] - tokens_[f].size();  // A: the message follows it
      if (before.size() < answer_end) {
        throw std::logic_error("serve: request " + std::to_string(id) + " finished with " +
                               std::to_string(before.size()) + " tokens, fewer than its next turn's " +
                               std::to_string(answer_end));
      }
      tokens_[f].insert(tokens_[f].begin(), before.begin(),
                        before.begin() + static_cast<std::ptrdiff_t>(answer_end));
    }
  }
  std::vector<int32_t>& tokens(size_t index) { return tokens_[index]; }
  const std::vector<int32_t>& drafts(size_t index) const { return drafts_[index]; }
  const Sampling& sampling(size_t index) const { return sampling_[index]; }
  uint32_t prompt_length(size_t index) const { return lengths_[index]; }

 private:
  RoutingRule rule_;
  std::vector<std::vector<int32_t>> tokens_;
  std::vector<std::vector<int32_t>> drafts_;
  std::vector<Sampling> sampling_;
  std::vector<uint32_t> lengths_;                                // whole prompt lengths
  std::unordered_map<uint64_t, size_t> index_;                   // id -> index
  std::unordered_map<uint64_t, std::vector<size_t>> followers_;  // id -> the turns that follow it
};

}  // namespace

serving::EngineConfig lab_engine_defaults() {
  serving::EngineConfig e;
  e.chunk_size = 16;
  return e;
}

std::vector<serving::EngineRequest> engine_requests(const std::vector<Request>& requests) {
  std::vector<serving::EngineRequest> out;
  for (const Request& r : requests) {
    if (r.prompt.empty())
      throw std::invalid_argument("serve: request " + std::to_string(r.id) + " has an empty prompt");
    if (r.max_new_tokens < 1) {
      throw std::invalid_argument("serve: request " + std::to_string(r.id) + " has max_new_tokens " +
                                  std::to_string(r.max_new_tokens) + " (must be >= 1)");
    }
    if (r.think_steps < 0) {
      throw std::invalid_argument("serve: request " + std::to_string(r.id) + " has think_steps " +
                                  std::to_string(r.think_steps) + " (must be >= 0)");
    }
    try {
      r.sampling.validate();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("serve: request " + std::to_string(r.id) + ": " + e.what());
    }
  }
  const std::vector<uint32_t> lengths = prompt_lengths(requests);
  std::vector<std::vector<uint32_t>> turn_ends = turn_ends_of(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    serving::EngineRequest e{r.id, r.arrival_step, lengths[i], static_cast<uint32_t>(r.max_new_tokens), i};
    e.turn_ends = std::move(turn_ends[i]);
    e.follows = r.follows;
    e.think_steps = r.think_steps;
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<int32_t> propose_drafts(std::span<const int32_t> tokens, int max) {
  const size_t len = tokens.size();
  for (size_t n = 3; n >= 1; --n) {
    if (len <= n) continue;
    const std::span<const int32_t> suffix = tokens.subspan(len - n);
    // The latest earlier occurrence that has at least one token after it.
    for (size_t j = len - n; j-- > 0;) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + static_cast<std::ptrdiff_t>(j)))
        continue;
      const size_t from = j + n;
      const size_t take = std::min<size_t>(static_cast<size_t>(std::max(max, 0)), len - from);
      return std::vector<int32_t>(tokens.begin() + static_cast<std::ptrdiff_t>(from),
                                  tokens.begin() + static_cast<std::ptrdiff_t>(from + take));
    }
  }
  return {};
}

namespace {

// The lab's side of each step (sim/serving/lifecycle.h): the model's request lifecycle, its forward pass,
// the verification of drafts under the sampling rule, and what is recorded of the probe.
class LabHandler : public serving::StepHandler {
 public:
  LabHandler(model::Model& model, LabClient& client, int64_t kv_blocks, CacheKey cache_key,
             std::span<const uint64_t> probe_turns, ServeOutcome& out)
      : model_(model),
        client_(client),
        cache_(kv_blocks),
        ignore_salt_(cache_key == CacheKey::kTokens),
        probe_turns_(probe_turns),
        out_(out),
        vocab_(model.shape().vocab_size),
        pairs_per_row_(model.shape().top_k * model.shape().num_layers) {}

  void release(uint64_t id) override { model_.release(id); }
  void admit(const serving::Admission& a) override {
    cache_.take(a, blocks_);  // exactly its cached positions, each kept under the key the engine matched
    model_.admit_cached(a.id, a.turns(), blocks_, ignore_salt_);
  }
  // The rows' tokens (a prompt or generated token, or a draft), one pass, every row's logits when a span
  // verifies drafts.
  void forward(const serving::Step& step) override {
    rows_.clear();
    bool any_drafts = false;
    for (const serving::Span& s : step.spans) {
      const std::vector<int32_t>& tokens = client_.tokens(s.client_index);
      const std::vector<int32_t>& drafts = client_.drafts(s.client_index);
      for (uint32_t q = s.begin; q < s.end; ++q) {
        const int32_t token = q < tokens.size() ? tokens[q] : drafts.at(q - tokens.size());
        rows_.push_back(model::BatchRow{s.id, q, token});
      }
      any_drafts |= s.drafts > 0;
    }
    ++out_.steps;
    out_.rows += static_cast<int64_t>(rows_.size());
    model_.forward(rows_, logit_rows_, logits_, &stats_,
                   any_drafts ? model::LogitRows::kEvery : model::LogitRows::kLastPerRequest);
    logit_index_.assign(rows_.size(), -1);
    for (size_t i = 0; i < logit_rows_.size(); ++i) logit_index_[logit_rows_[i]] = static_cast<int32_t>(i);
    for (const serving::Span& s : step.spans) {
      if (is_probe(s.id)) record_probe_span(s);
    }
  }
  // Verification under the sampling rule: a sampling span keeps its leading drafts while each is the token
  // the rule draws at its position from the previous row (greedy: the argmax), then takes one more token
  // (the first the drafts do not hold); the client's tokens grow by them. The draw is the one the request
  // would make without speculation, so its tokens are the same either way.
  void accept(const serving::Step& step, std::vector<uint32_t>& accepted) override {
    for (const serving::Span& s : step.spans) accepted.push_back(s.samples ? sample(s) : s.end - s.begin);
  }
  void rollback(uint64_t id, uint32_t position) override { model_.rollback(id, position); }
  void keep(const serving::Registered& b) override {
    cache_.keep(b, model_.cached_block(b.id, b.begin, b.end));
  }

 private:
  bool is_probe(uint64_t id) const {
    return std::find(probe_turns_.begin(), probe_turns_.end(), id) != probe_turns_.end();
  }
  uint32_t sample(const serving::Span& s) {
    std::vector<int32_t>& tokens = client_.tokens(s.client_index);
    const std::vector<int32_t>& drafts = client_.drafts(s.client_index);
    const Sampling& sampling = client_.sampling(s.client_index);
    const uint32_t n = s.end - s.begin;
    // Row i's logits predict position begin + i + 1.
    for (uint32_t i = s.drafts > 0 ? 0 : n - 1;; ++i) {
      const int32_t at = logit_index_.at(static_cast<size_t>(s.row) + i);
      const float* row = logits_.data() + static_cast<size_t>(at) * vocab_;
      const uint32_t position = s.begin + i + 1;  // the position `next` is for
      const int32_t next =
          sample_token(std::span<const float>(row, static_cast<size_t>(vocab_)), sampling, position);
      if (is_probe(s.id)) hash_probe_row(row);
      if (s.drafts > 0 && position < s.end && drafts.at(position - tokens.size()) == next) continue;
      // `next` is the first token that no draft already holds: accept the drafts before it, then it.
      const size_t have = tokens.size();
      for (uint32_t q = static_cast<uint32_t>(have); q < position; ++q) tokens.push_back(drafts.at(q - have));
      tokens.push_back(next);
      return i + 1;
    }
  }
  void hash_probe_row(const float* row) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(row);
    for (size_t b = 0; b < sizeof(float) * static_cast<size_t>(vocab_); ++b) {
      out_.probe_logits_hash = (out_.probe_logits_hash ^ bytes[b]) * 0x100000001B3ull;
    }
  }
  void record_probe_span(const serving::Span& s) {
    const uint32_t n = s.end - s.begin;
    ++out_.probe_steps;
    out_.probe_chunks.push_back(static_cast<int>(n));
    out_.probe_pairs += static_cast<int64_t>(n) * pairs_per_row_;
    int dropped = 0;
    for (uint32_t q = 0; q < n; ++q) dropped += stats_.dropped_pairs[s.row + q];
    out_.probe_pairs_dropped += dropped;
    if (dropped > 0) ++out_.probe_steps_with_drop;
  }

  model::Model& model_;
  LabClient& client_;
  serving::BlockStore<model::Model::CachedBlock> cache_;  // per KV block: the payload the prefix cache keeps
  bool ignore_salt_;
  std::span<const uint64_t> probe_turns_;
  ServeOutcome& out_;
  int vocab_;
  int64_t pairs_per_row_;
  model::ForwardStats stats_;
  std::vector<model::BatchRow> rows_;
  std::vector<int32_t> logit_rows_;
  std::vector<float> logits_;
  std::vector<int32_t> logit_index_;  // per row: its logits' index (-1: none)
  std::vector<const model::Model::CachedBlock*> blocks_;
};

}  // namespace

ServeOutcome serve(model::Model& model, std::vector<Request> requests, const serving::EngineConfig& engine,
                   CacheKey cache_key, uint64_t probe_id, int max_steps) {
  const uint64_t turns[] = {probe_id};
  return serve(model, std::move(requests), engine, cache_key, turns, max_steps);
}

ServeOutcome serve(model::Model& model, std::vector<Request> requests, const serving::EngineConfig& engine,
                   CacheKey cache_key, std::span<const uint64_t> probe_turns, int max_steps) {
  if (engine.chunk_size <= 0) {
    throw std::invalid_argument("serve: chunk_size (" + std::to_string(engine.chunk_size) +
                                ") must be positive (the lab's server always chunks its prefill)");
  }
  engine.validate();
  if (probe_turns.empty()) throw std::invalid_argument("serve: the probe has no turns");
  std::vector<size_t> probe_index;  // per probe turn: its index in `requests`
  for (uint64_t id : probe_turns) {
    const auto it =
        std::find_if(requests.begin(), requests.end(), [&](const Request& r) { return r.id == id; });
    if (it == requests.end()) {
      throw std::invalid_argument("serve: the probe id " + std::to_string(id) + " is not among the requests");
    }
    const uint64_t expected = probe_index.empty() ? serving::kNoRequest : requests[probe_index.back()].id;
    if (it->follows != expected) {
      throw std::invalid_argument("serve: the probe's turn " + std::to_string(id) +
                                  " does not follow the turn before it");
    }
    probe_index.push_back(static_cast<size_t>(it - requests.begin()));
  }
  if (model.num_requests() != 0) throw std::invalid_argument("serve: the model already holds live requests");
  const bool stateful = rules::carries_routing_state(model.options().policy);
  if (stateful && (engine.prefix_cache || engine.spec_tokens > 0) && !model.options().record_routing) {
    throw std::invalid_argument(
        "serve: the prefix cache and speculation need a model that records routing "
        "(ModelOptions::record_routing)");
  }
  LabClient client(requests, model.options().policy, cache_key);
  serving::EngineConfig config = engine;
  config.keep_request_stats = true;
  serving::Engine server(config, engine_requests(requests), client);
  ServeOutcome out;
  LabHandler handler(model, client, config.kv_blocks, cache_key, probe_turns, out);
  serving::Step step;
  const uint64_t last = probe_turns.back();
  try {
    for (bool probe_done = false; !probe_done;) {
      if (out.steps >= max_steps) {
        throw std::invalid_argument("serve: the probe did not finish within " + std::to_string(max_steps) +
                                    " steps");
      }
      if (!serving::run_step(server, step, handler)) {
        throw std::logic_error("serve: the engine finished before the probe");
      }
      for (uint64_t id : step.finished) client.finished(id);  // before the turns that follow arrive
      probe_done = std::find(step.finished.begin(), step.finished.end(), last) != step.finished.end();
    }
  } catch (...) {
    model.clear();
    throw;
  }
  for (size_t t = 0; t < probe_index.size(); ++t) {
    const size_t i = probe_index[t];
    const std::vector<int32_t>& tokens = client.tokens(i);
    const auto begin = tokens.begin() + static_cast<std::ptrdiff_t>(client.prompt_length(i));
    out.probe_tokens.insert(
        out.probe_tokens.end(), begin,
        begin + std::min<std::ptrdiff_t>(requests[i].max_new_tokens, tokens.end() - begin));
    out.probe_turns.push_back(server.request_stats(probe_turns[t]));
  }
  out.probe = out.probe_turns.front();
  out.engine = server.stats();
  model.clear();
  return out;
}

}  // namespace moe::sim::diverge

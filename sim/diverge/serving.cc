#include "sim/diverge/serving.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "router/routing_rule.h"
#include "router/rules/plan_rules.h"

namespace moe::sim::diverge {
namespace {

// The engine's client: the requests' tokens (prompt, then what they generated), their drafts, the salt.
class LabClient : public serving::EngineClient {
 public:
  LabClient(const std::vector<Request>& requests, const DispatchPolicy& policy, bool key_by_tokens)
      : rule_(key_by_tokens ? RoutingRule{} : RoutingRule::of(policy)),
        tokens_(requests.size()),
        drafts_(requests.size()) {
    for (size_t i = 0; i < requests.size(); ++i) tokens_[i] = requests[i].prompt;
  }
  uint64_t token(const serving::EngineRequest& r, uint32_t position) override {
    return static_cast<uint64_t>(tokens_[r.client_index].at(position));
  }
  int propose(const serving::EngineRequest& r, uint32_t, int max) override {
    drafts_[r.client_index] = propose_drafts(tokens_[r.client_index], max);
    return static_cast<int>(drafts_[r.client_index].size());
  }
  uint64_t salt(uint32_t block_end, uint32_t prompt_length) override {
    return prefix_cache_salt(rule_, block_end, prompt_length);
  }
  std::vector<int32_t>& tokens(size_t index) { return tokens_[index]; }
  const std::vector<int32_t>& drafts(size_t index) const { return drafts_[index]; }

 private:
  RoutingRule rule_;
  std::vector<std::vector<int32_t>> tokens_;
  std::vector<std::vector<int32_t>> drafts_;
};

}  // namespace

void SchedulerConfig::validate() const {
  if (engine.chunk_size <= 0) {
    throw std::invalid_argument("SchedulerConfig: chunk_size (" + std::to_string(engine.chunk_size) +
                                ") must be positive (the lab's server always chunks its prefill)");
  }
  engine.validate();
}

std::vector<serving::EngineRequest> engine_requests(const std::vector<Request>& requests) {
  std::vector<serving::EngineRequest> out;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    if (r.prompt.empty()) throw std::invalid_argument("serve: request " + std::to_string(r.id) + " has an empty prompt");
    if (r.max_new_tokens < 1) {
      throw std::invalid_argument("serve: request " + std::to_string(r.id) + " has max_new_tokens " +
                                  std::to_string(r.max_new_tokens) + " (must be >= 1)");
    }
    out.push_back(serving::EngineRequest{r.id, r.arrival_step, static_cast<uint32_t>(r.prompt.size()),
                                         static_cast<uint32_t>(r.max_new_tokens), i});
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
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + static_cast<std::ptrdiff_t>(j))) continue;
      const size_t from = j + n;
      const size_t take = std::min<size_t>(static_cast<size_t>(std::max(max, 0)), len - from);
      return std::vector<int32_t>(tokens.begin() + static_cast<std::ptrdiff_t>(from),
                                  tokens.begin() + static_cast<std::ptrdiff_t>(from + take));
    }
  }
  return {};
}

ServeOutcome serve(model::Model& model, std::vector<Request> requests, const SchedulerConfig& config,
                   uint64_t probe_id, int max_steps) {
  config.validate();
  size_t probe_index = requests.size();
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].id == probe_id) probe_index = i;
  }
  if (probe_index == requests.size()) {
    throw std::invalid_argument("serve: the probe id " + std::to_string(probe_id) + " is not among the requests");
  }
  if (model.num_requests() != 0) throw std::invalid_argument("serve: the model already holds live requests");
  const bool stateful = rules::carries_routing_state(model.options().policy);
  if (stateful && (config.engine.prefix_cache || config.engine.spec_tokens > 0) &&
      !model.options().record_routing) {
    throw std::invalid_argument("serve: the prefix cache and speculation need a model that records routing "
                                "(ModelOptions::record_routing)");
  }
  LabClient client(requests, model.options().policy, config.key_by_tokens);
  serving::EngineConfig engine_config = config.engine;
  engine_config.keep_request_stats = true;
  serving::Engine engine(engine_config, engine_requests(requests), client);
  std::vector<model::Model::CachedBlock> cache(static_cast<size_t>(config.engine.kv_blocks));

  ServeOutcome out;
  serving::StepPlan plan;
  serving::StepResult result;
  model::ForwardStats stats;
  std::vector<model::BatchRow> rows;
  std::vector<int32_t> logit_rows;
  std::vector<float> logits;
  std::vector<int32_t> logit_index;  // per row: its logits' index (-1: none)
  std::vector<uint32_t> accepted;
  std::vector<const model::Model::CachedBlock*> blocks;
  const int vocab = model.shape().vocab_size;
  const int top_k = model.shape().top_k;
  const int layers = model.shape().num_layers;
  auto hash_row = [&](int32_t row) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(logits.data() + static_cast<size_t>(row) * vocab);
    for (size_t b = 0; b < sizeof(float) * vocab; ++b) {
      out.probe_logits_hash = (out.probe_logits_hash ^ bytes[b]) * 0x100000001B3ull;
    }
  };
  try {
    for (bool probe_done = false; !probe_done;) {
      if (out.steps >= max_steps) {
        throw std::invalid_argument("serve: the probe did not finish within " + std::to_string(max_steps) +
                                    " steps");
      }
      if (!engine.next(plan)) throw std::logic_error("serve: the engine finished before the probe");
      ++out.steps;
      for (uint64_t id : plan.preempted) model.release(id);
      for (const serving::Admission& a : plan.admitted) {
        blocks.clear();
        for (size_t b = 0; b < a.blocks.size(); ++b) blocks.push_back(&cache.at(static_cast<size_t>(a.blocks[b])));
        model.admit_cached(a.id, a.prompt_length, blocks, config.key_by_tokens);
      }
      rows.clear();
      bool any_drafts = false;
      for (const serving::Span& s : plan.spans) {
        const std::vector<int32_t>& tokens = client.tokens(s.client_index);
        const std::vector<int32_t>& drafts = client.drafts(s.client_index);
        for (uint32_t q = s.begin; q < s.end; ++q) {
          const int32_t token = q < tokens.size() ? tokens[q] : drafts.at(q - tokens.size());
          rows.push_back(model::BatchRow{s.id, q, token});
        }
        any_drafts |= s.drafts > 0;
      }
      out.rows += static_cast<int64_t>(rows.size());
      model.forward(rows, logit_rows, logits, &stats,
                    any_drafts ? model::LogitRows::kEvery : model::LogitRows::kLastPerRequest);
      logit_index.assign(rows.size(), -1);
      for (size_t i = 0; i < logit_rows.size(); ++i) logit_index[logit_rows[i]] = static_cast<int32_t>(i);
      accepted.clear();
      for (const serving::Span& s : plan.spans) {
        std::vector<int32_t>& tokens = client.tokens(s.client_index);
        const bool probe = s.id == probe_id;
        uint32_t m = s.end - s.begin;
        if (s.samples) {
          // Row i's logits predict position begin + i + 1; drafts are accepted while they are what the
          // previous row predicts, and the last accepted row gives the next token.
          const std::vector<int32_t> drafts = client.drafts(s.client_index);
          uint32_t i = s.drafts > 0 ? 0 : m - 1;
          for (;; ++i) {
            const int32_t at = logit_index.at(static_cast<size_t>(s.row) + i);
            const int32_t next = model::Model::argmax(logits.data() + static_cast<size_t>(at) * vocab, vocab);
            if (probe) hash_row(at);
            const uint32_t position = s.begin + i + 1;  // the position `next` is for
            if (s.drafts > 0 && position < s.end && drafts.at(position - tokens.size()) == next) continue;
            // `next` is the first token that no draft already holds: accept the drafts before it, then it.
            const size_t have = tokens.size();
            for (uint32_t q = static_cast<uint32_t>(have); q < position; ++q) tokens.push_back(drafts.at(q - have));
            tokens.push_back(next);
            m = i + 1;
            break;
          }
        }
        accepted.push_back(m);
        if (probe) {
          ++out.probe_steps;
          out.probe_chunks.push_back(static_cast<int>(s.end - s.begin));
          out.probe_pairs += static_cast<int64_t>(s.end - s.begin) * top_k * layers;
          int dropped = 0;
          for (uint32_t q = 0; q < s.end - s.begin; ++q) dropped += stats.dropped_pairs[s.row + q];
          out.probe_pairs_dropped += dropped;
          if (dropped > 0) ++out.probe_steps_with_drop;
        }
      }
      engine.complete(accepted, result);
      for (const TokenMeta& r : result.rollbacks) model.rollback(r.request_id, r.position);
      for (const serving::Registered& b : result.registered) {
        cache.at(static_cast<size_t>(b.block)) = model.cached_block(b.id, b.begin, b.end);
      }
      for (uint64_t id : result.finished) {
        model.release(id);
        probe_done |= id == probe_id;
      }
    }
  } catch (...) {
    model.clear();
    throw;
  }
  const std::vector<int32_t>& probe_tokens = client.tokens(probe_index);
  out.probe_tokens.assign(probe_tokens.begin() + static_cast<std::ptrdiff_t>(requests[probe_index].prompt.size()),
                          probe_tokens.end());
  out.probe = engine.request_stats(probe_id);
  out.engine = engine.stats();
  model.clear();
  return out;
}

}  // namespace moe::sim::diverge

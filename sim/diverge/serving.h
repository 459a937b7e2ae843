// The divergence lab's server: requests arrive over time, the serving engine (sim/serving/engine.h: chunked
// prefill under a token budget, a block prefix cache, recompute preemption, prompt-lookup speculative
// decoding) forms each step, and a moe::model::Model runs the batch and decodes greedily.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "moe/model/model.h"
#include "sim/serving/engine.h"

namespace moe::sim::diverge {

// One request: its prompt arrives at step arrival_step; it generates max_new_tokens tokens (greedy), then
// finishes. Ids rank requests under request priority; the traffic generator gives them in arrival order.
struct Request {
  uint64_t id = 0;
  int arrival_step = 0;
  std::vector<int32_t> prompt;
  int max_new_tokens = 1;
};

// The server's configuration: the serving engine's (sim/serving/engine.h; docs/divergence.md, "The serving
// engine": continuous batching with chunked prefill under a token budget, the block prefix cache and its KV
// pool, recompute preemption, prompt-lookup speculative decoding), whose defaults it keeps but one - the lab
// always chunks its prefill, in chunks of 16 by default (chunk_size must be positive) - and how the prefix
// cache keys blocks:
//   key_by_tokens   the cache keys a block by its tokens alone, and a request restored from it takes the
//                   routing it holds as its own (an engine unaware of the routing); off: tokens and
//                   prefix_cache_salt of the model's dispatch rule
// serve() keeps every request's statistics whatever engine.keep_request_stats says (it reads the probe's
// after it finished).
struct SchedulerConfig {
  serving::EngineConfig engine = lab_engine_defaults();
  bool key_by_tokens = false;

  // Throws std::invalid_argument naming the bad field.
  void validate() const;
  static serving::EngineConfig lab_engine_defaults() {
    serving::EngineConfig e;
    e.chunk_size = 16;
    return e;
  }
};

// What the probe saw while the server ran.
struct ServeOutcome {
  std::vector<int32_t> probe_tokens;  // its greedy completion
  int steps = 0;                      // steps run until the probe finished
  int64_t rows = 0;                   // rows processed in those steps
  int probe_steps = 0;                // steps in which the probe had rows
  int probe_steps_with_drop = 0;      // ... in which at least one of its pairs was dropped (any layer)
  int64_t probe_pairs = 0;            // (row, layer, j) pairs of the probe
  int64_t probe_pairs_dropped = 0;
  std::vector<int> probe_chunks;  // rows of the probe per step, in order (its prefill chunking)
  // FNV-1a over the bits of every logits row the probe sampled a token from: equal hashes mean
  // bitwise-equal logits (a kernel difference shows here even when it does not change the argmax).
  uint64_t probe_logits_hash = 0xCBF29CE484222325ull;
  serving::RequestStats probe;  // cached positions, preemptions, drafts of the probe
  serving::EngineStats engine;
};

// The engine's view of the lab's requests (client_index = index in `requests`).
std::vector<serving::EngineRequest> engine_requests(const std::vector<Request>& requests);

// Runs `requests` through `model` (which must hold no live request) until request `probe_id` finishes: the
// engine's lifecycle events become the model's (admit / admit_cached from the cached blocks' KV and routing,
// rollback, release; registered blocks are copied into the cache's payloads); releases every request from
// the model afterwards. The model must record routing (ModelOptions::record_routing) when the prefix cache
// or speculation is on. Throws std::invalid_argument if probe_id is absent, a request is bad, or the server
// runs max_steps steps without finishing it.
ServeOutcome serve(model::Model& model, std::vector<Request> requests, const SchedulerConfig& config,
                   uint64_t probe_id, int max_steps = 100000);

// Prompt-lookup drafting: up to `max` tokens that followed the latest earlier occurrence of the last n tokens
// of `tokens` (n = 3, then 2, then 1); none when no n-gram recurs.
std::vector<int32_t> propose_drafts(std::span<const int32_t> tokens, int max);

}  // namespace moe::sim::diverge

// The divergence lab's server: requests arrive over time, the serving engine (sim/serving/engine.h: chunked
// prefill under a token budget, a block prefix cache, recompute preemption, prompt-lookup speculative
// decoding) forms each step, and a moe::model::Model runs the batch; each request's tokens follow the
// sampling rule (sim/diverge/sampling.h: greedy at temperature 0, else seeded by (seed, position)). The
// lifecycle of each step is sim/serving/lifecycle.h's; the lab supplies the forward pass, the verification
// of drafts under the sampling rule and what it records of the probe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "moe/model/model.h"
#include "sim/diverge/sampling.h"
#include "sim/serving/engine.h"

namespace moe::sim::diverge {

// One request: its prompt arrives at step arrival_step; it generates max_new_tokens tokens under `sampling`
// (temperature 0: greedy; else drawn by (sampling.seed, position), sim/diverge/sampling.h), then finishes.
// Ids rank requests under request priority; the traffic generator gives them in arrival order.
// A conversation's later turn (sim/diverge/conversation.h) follows request `follows` (its previous turn),
// arriving think_steps steps after it finishes (arrival_step is then ignored); its `prompt` is only its new
// message: the server puts the previous turn's prompt and answer in front of it when that turn finishes. It
// is admitted with the conversation's turn ends, or, with as_plain_prompt, as a plain prompt of the same
// tokens (the counter-check: the engine forgets where the turns end).
struct Request {
  uint64_t id = 0;
  int arrival_step = 0;
  std::vector<int32_t> prompt;
  int max_new_tokens = 1;
  Sampling sampling{};
  uint64_t follows = serving::kNoRequest;
  int think_steps = 0;
  bool as_plain_prompt = false;
};

// How the prefix cache keys a block:
//   kSalted   its tokens and prefix_cache_salt of the model's dispatch rule (docs/routing.md, "Prefix
//             caching"): a hit is the request's own routing
//   kTokens   its tokens alone (an engine unaware of the routing): a request restored from a block takes the
//             routing it holds as its own, whatever prompt length it was planned for (the counter-check)
enum class CacheKey { kSalted, kTokens };

// The serving engine's settings for the lab: the engine's defaults but one - the lab always chunks its
// prefill, in chunks of 16 by default (serve() refuses chunk_size 0).
serving::EngineConfig lab_engine_defaults();

// What the probe saw while the server ran.
// The probe may be a conversation (serve()'s probe turns): then its completion is every turn's answer in
// turn order, the hash covers every turn's rows and the counts every turn's steps.
struct ServeOutcome {
  std::vector<int32_t> probe_tokens;  // its completion
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
  serving::RequestStats probe;                     // cached positions, preemptions, drafts of the probe
  std::vector<serving::RequestStats> probe_turns;  // per turn of the probe (probe = probe_turns[0])
  serving::EngineStats engine;
};

// The engine's view of the lab's requests (client_index = index in `requests`; a later turn's prompt length
// and turn ends from sim/diverge/conversation.h). Throws std::invalid_argument for an empty prompt,
// max_new_tokens < 1, a bad sampling (Sampling::validate), a negative think time or a turn whose previous
// turn is absent or comes later in `requests`.
std::vector<serving::EngineRequest> engine_requests(const std::vector<Request>& requests);

// Runs `requests` through `model` (which must hold no live request) under `engine` (every request's stats are
// kept whatever engine.keep_request_stats says: the probe's are read after it finished) until request
// `probe_id` finishes: the engine's lifecycle events become the model's (admit / admit_cached from the cached
// blocks' KV and routing, rollback, release; registered blocks are copied into the cache's payloads, which a
// restore takes only for exactly its cached positions under the matched keys, sim/serving/block_store.h);
// releases every request from the model afterwards. The model must record routing
// (ModelOptions::record_routing) when the prefix cache or speculation is on. Throws std::invalid_argument if
// probe_id is absent, a request or the engine config is bad (chunk_size 0 included), or the server runs
// max_steps steps without finishing it.
ServeOutcome serve(model::Model& model, std::vector<Request> requests, const serving::EngineConfig& engine,
                   CacheKey cache_key, uint64_t probe_id, int max_steps = 100000);
// The same for a probe that is a conversation: probe_turns are its turns' ids in turn order (each following
// the one before), and the server runs until the last one finishes. When a request finishes, the turn that
// follows it gets its whole prompt: the finished request's prompt and its max_new_tokens generated tokens,
// then the follower's message. Throws std::invalid_argument as above, for an empty probe_turns, or for turns
// that do not follow each other.
ServeOutcome serve(model::Model& model, std::vector<Request> requests, const serving::EngineConfig& engine,
                   CacheKey cache_key, std::span<const uint64_t> probe_turns, int max_steps = 100000);

// Prompt-lookup drafting: up to `max` tokens that followed the latest earlier occurrence of the last n tokens
// of `tokens` (n = 3, then 2, then 1); none when no n-gram recurs.
std::vector<int32_t> propose_drafts(std::span<const int32_t> tokens, int max);

}  // namespace moe::sim::diverge

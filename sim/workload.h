// Workloads: which requests exist, and which of their tokens go into each forward pass (step).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "router/routing_rule.h"
#include "router/token_meta.h"
#include "sim/length_dist.h"
#include "sim/request_spec.h"
#include "sim/serving/engine.h"
#include "sim/serving/lifecycle.h"

namespace moe::sim {

// Tokens simulate_workload routes before it plans them (whole steps: a window holds at least one step).
inline constexpr int64_t kDefaultWindowTokens = int64_t{1} << 14;
// Windows simulate_workload holds at once with two or more threads (one with one thread).
inline constexpr double kWindowsHeld = 3;

struct WorkloadConfig {
  int num_requests = 16;
  LengthDist prompt_len = LengthDist::parse("uniform:16,256");
  LengthDist decode_len = LengthDist::parse("fixed:32");
  // 0: one static batch holding every request's whole prompt (decode ignored). > 0: continuous batching
  // with at most this many tokens per step.
  int token_budget = 0;
  // Arrivals: 0 = every request at step 0; > 0 = a Poisson process with this many requests per step.
  double arrival_rate = 0.0;
  // CSV or JSONL trace of requests (replaces num_requests, the length distributions and arrival_rate).
  std::string trace_file;
  // Shared system prompts (synthetic workloads): `system_prompts` prompts whose lengths are drawn once from
  // system_prompt_len; each request begins with one of them (uniformly) with probability
  // system_prompt_share, before its own prompt_len tokens.
  int system_prompts = 0;
  LengthDist system_prompt_len = LengthDist::parse("uniform:24,96");
  double system_prompt_share = 0.5;
  // Conversations (synthetic workloads; docs/routing.md, "Conversations"): each of the num_requests requests
  // begins a conversation of `turns` turns (drawn per conversation, clamped to [1, 64]); turn t > 1 sends
  // the previous turns' prompts and answers and a new message of turn_prompt_len tokens, with an answer of
  // decode_len tokens, arriving think_steps steps after the previous turn finishes. Needs continuous
  // batching. fixed:1 (the default): no conversations.
  LengthDist turns = LengthDist::parse("fixed:1");
  LengthDist turn_prompt_len = LengthDist::parse("lognormal:mean=64,sigma=0.8,max=1024");
  LengthDist think_steps = LengthDist::parse("uniform:4,32");
  // Whether a later turn is admitted with its turn ends (false: as a plain prompt of its length, the rule
  // before conversations existed - the counter-check of docs/results.md section 5i).
  bool turn_ends = true;
  // The serving engine of continuous batching (sim/serving/engine.h): chunk_size, max_running (0: no
  // limit), the prefix cache, KV blocks (0: unbounded), speculative decoding with spec_tokens draft tokens
  // per step, each accepted with probability spec_accept (the leading accepted ones count).
  int chunk_size = 0;
  int max_running = 0;
  bool prefix_cache = false;
  int block_size = 16;
  int64_t kv_blocks = 0;
  int spec_tokens = 0;
  double spec_accept = 0.7;

  // Throws UsageError naming the bad field.
  void validate() const;
  // Whether the prefix cache, a KV-block budget or speculation is on (reports add the engine's counts).
  bool serving_features() const { return prefix_cache || kv_blocks > 0 || spec_tokens > 0; }
  // Whether requests may have later turns.
  bool conversations() const { return !(turns.kind == LengthDist::Kind::kFixed && turns.a <= 1); }
};

// The requests of a workload: from the trace file if one is set, else num_requests requests with ids
// 0..n-1 whose lengths are drawn from stream_key(seed, id, kLengthTag) (so request i's lengths do not
// depend on how many requests there are) and whose arrivals come from one Poisson stream.
// Prompt lengths are clamped to >= 1. With conversations, request i begins conversation i and its later
// turns follow it in the list (ids go on counting: the first turns' ids are then not 0..n-1); a turn's
// lengths come from stream_key(seed, conversation, kTurnTag + turn).
std::vector<RequestSpec> make_requests(const WorkloadConfig& config, uint64_t seed);

// What a workload holds in memory while it is simulated, counted before it is generated. Steps stream
// (StepStream, simulate_workload), so what is held is: per request its spec and its place in the
// scheduler's queues; per token of kWindowsHeld windows of steps (each at least the largest step; one is
// planned while the next is routed and the one after is scheduled) its row and its routes;
// for the largest step the plan's arrays; per item in flight its logits. Counts are doubles so that no
// product overflows.
struct WorkloadFootprint {
  double requests = 0;
  double tokens = 0;
  double steps = 0;         // a lower bound for continuous batching (tokens / token_budget)
  double largest_step = 0;  // tokens of the largest step (an upper bound)
  // Tokens routed ahead of planning (simulate_workload's window): kWindowsHeld windows of
  // max(largest_step, this), at most `tokens`.
  double window_tokens = kDefaultWindowTokens;
  // Bytes under a router of E experts, top_k and num_ranked ranks per token.
  double bytes(int num_experts, int top_k, int num_ranked) const;
};

// From the configured distributions' expected lengths (synthetic workloads; num_requests requests).
WorkloadFootprint expected_footprint(const WorkloadConfig& config);
// Exact, from the requests (static batch when token_budget == 0).
WorkloadFootprint footprint(const std::vector<RequestSpec>& requests, int token_budget);

// The one check of a workload's size (run, sweep, probe call it before allocating): throws DataError
//   "the workload needs at least 447.0 TiB of memory (1e+08 requests, 1e+13 tokens), more than the 23.4 GiB
//    of this machine; <advice>"
// when f.bytes(...) exceeds memory_limit_bytes (0: the machine's physical memory), and UsageError when the
// largest step holds more than INT32_MAX / num_experts tokens (one step's logits are indexed with int).
void check_workload_size(const WorkloadFootprint& f, int num_experts, int top_k, int num_ranked,
                         const std::string& advice, double memory_limit_bytes = 0);

// Router-input keys: a shared system prompt's rows, and rejected draft tokens, are keyed apart from request
// ids (which are below 2^62).
inline constexpr uint64_t kSystemPromptContent = uint64_t{1} << 63;
inline constexpr uint64_t kDraftContent = uint64_t{1} << 62;

// The workload's steps (serving::Step), one at a time, holding the live requests only; each consumer replays
// them (serving::replay_step). Static batch (token_budget == 0): one step with every request's whole prompt,
// requests in the given order, all admitted before it and finished with it. Continuous batching
// (token_budget > 0): the serving engine (sim/serving/engine.h) with the workload's settings, driven by
// serving::run_step: requests arrive at arrival_step, running ones send their next prompt chunk or decode row
// (with draft tokens when speculating: spec_tokens drafts, each accepted with probability spec_accept from
// the stream (seed, request, position), the leading accepted ones counting), then waiting ones start; a
// request's rows are its prompt_len + decode_len positions (decode_len generated tokens, the last one needing
// no row). The prefix cache keys blocks by their tokens (a system prompt's, or the request's own) and by
// prefix_cache_salt(cache_rules): a block is shared only where it is valid under every rule (none: a cache
// keyed by tokens alone), so every policy planned over these steps may restore what the cache serves.
// `requests` must outlive the stream.
class StepStream {
 public:
  StepStream(const std::vector<RequestSpec>& requests, const WorkloadConfig& config, uint64_t seed,
             std::vector<RoutingRule> cache_rules = {});
  ~StepStream();
  // Fills `step` (reusing its vectors' capacity) with the next step, and `keys` with what each of its rows'
  // router input is keyed by (the token it holds): (system prompt content, position) for a shared system
  // prompt's rows, (draft content, position) for a rejected draft token, else the row itself - left empty
  // when every row keys itself. False (both untouched) after the last step.
  bool next(serving::Step& step, std::vector<TokenMeta>& keys);
  // The engine's statistics (continuous batching; zero for a static batch).
  serving::EngineStats engine_stats() const;

 private:
  class Client;
  class Verdict;
  bool next_static(serving::Step& step, std::vector<TokenMeta>& keys);
  void key_rows(const serving::Step& step, std::vector<TokenMeta>& keys) const;

  const std::vector<RequestSpec>& requests_;
  WorkloadConfig config_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Verdict> verdict_;
  std::unique_ptr<serving::Engine> engine_;
  bool static_done_ = false;
};

// Every step of the workload at once (a StepStream run to the end), and each step's row keys into `keys`
// when it is given.
std::vector<serving::Step> schedule(const std::vector<RequestSpec>& requests, const WorkloadConfig& config,
                                    uint64_t seed = 0, std::vector<std::vector<TokenMeta>>* keys = nullptr);

}  // namespace moe::sim

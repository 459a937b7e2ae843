// Workloads: which requests exist, and which of their tokens go into each forward pass (step).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "router/token_meta.h"
#include "sim/length_dist.h"
#include "sim/request_spec.h"

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

  // Throws UsageError naming the bad field.
  void validate() const;
};

// The requests of a workload: from the trace file if one is set, else num_requests requests with ids
// 0..n-1 whose lengths are drawn from stream_key(seed, id, kLengthTag) (so request i's lengths do not
// depend on how many requests there are) and whose arrivals come from one Poisson stream.
// Prompt lengths are clamped to >= 1.
std::vector<RequestSpec> make_requests(const WorkloadConfig& config, uint64_t seed);

// What a workload holds in memory while it is simulated, counted before it is generated. Steps stream
// (StepScheduler, simulate_workload), so what is held is: per request its spec and its place in the
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

// One forward pass: its token rows in arrival (row) order, and the requests that finished with it.
struct Step {
  int64_t index = 0;  // the scheduler step number (idle steps, with nothing to run, are skipped)
  std::vector<TokenMeta> rows;
  std::vector<uint64_t> finished;
  int num_prefill_tokens = 0;
  int num_decode_tokens = 0;
};

// The scheduler, one step at a time (the steps schedule() returns, in order), holding the request specs'
// order and the live requests only. Static batch (token_budget == 0): one step with every request's whole
// prompt, requests in the given order. Continuous batching (token_budget > 0): at each step, requests that
// have arrived are admitted in (arrival_step, id) order; first every request whose prompt is done contributes
// its next decode token (admission order, while the budget lasts), then waiting or partially prefilled
// requests contribute prompt chunks in admission order until the budget is used. A request's first decode
// token comes in a step after its last prompt chunk. Every request's positions appear exactly once, in
// increasing order. `requests` must outlive the scheduler.
class StepScheduler {
 public:
  StepScheduler(const std::vector<RequestSpec>& requests, int token_budget);
  // Fills `step` (reusing its vectors' capacity) with the next step; false (step untouched) after the last.
  bool next(Step& step);

 private:
  struct Active {
    const RequestSpec* spec;
    uint32_t next_position;
  };
  const std::vector<RequestSpec>& requests_;
  int token_budget_;
  std::vector<const RequestSpec*> pending_;  // continuous batching: (arrival_step, id) order
  size_t next_pending_ = 0;
  std::vector<Active> active_;
  int64_t now_ = 0;
  bool static_done_ = false;
};

// Every step of the workload at once (StepScheduler run to the end).
std::vector<Step> schedule(const std::vector<RequestSpec>& requests, int token_budget);

}  // namespace moe::sim

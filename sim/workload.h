// Workloads: which requests exist, and which of their tokens go into each forward pass (step).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "router/token_meta.h"
#include "sim/length_dist.h"
#include "sim/request_spec.h"

namespace moe::sim {

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

// One forward pass: its token rows in arrival (row) order, and the requests that finished with it.
struct Step {
  int64_t index = 0;  // the scheduler step number (idle steps, with nothing to run, are skipped)
  std::vector<TokenMeta> rows;
  std::vector<uint64_t> finished;
  int num_prefill_tokens = 0;
  int num_decode_tokens = 0;
};

// Static batch (token_budget == 0): one step with every request's whole prompt, requests in the given order.
// Continuous batching (token_budget > 0): at each step, requests that have arrived are admitted in
// (arrival_step, id) order; first every request whose prompt is done contributes its next decode token
// (admission order, while the budget lasts), then waiting or partially prefilled requests contribute
// prompt chunks in admission order until the budget is used. A request's first decode token comes in a step
// after its last prompt chunk. Every request's positions appear exactly once, in increasing order.
std::vector<Step> schedule(const std::vector<RequestSpec>& requests, int token_budget);

}  // namespace moe::sim

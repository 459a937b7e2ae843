// A continuous-batching server for the divergence lab: requests arrive over time, a vLLM-style scheduler
// packs decode tokens and chunked prefill into each step's token budget, and a moe::model::Model runs the
// batch and decodes greedily.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "moe/model/model.h"

namespace moe::sim::diverge {

// One request: its prompt arrives at step arrival_step; it generates max_new_tokens tokens (greedy), then
// finishes. Ids rank requests under request priority; the traffic generator gives them in arrival order.
struct Request {
  uint64_t id = 0;
  int arrival_step = 0;
  std::vector<int32_t> prompt;
  int max_new_tokens = 1;
};

// Batch formation (docs/divergence.md), in the style of vLLM's v1 scheduler with chunked prefill:
//   1. requests whose arrival_step <= step join the waiting queue, in arrival order (ties: by id);
//   2. running requests, in the order they started, each take one decode token, or, if their prompt is not
//      yet fully prefilled, the next chunk of min(remaining prompt, chunk_size, budget left) tokens;
//   3. then waiting requests, in arrival order, start with a first chunk of min(prompt, chunk_size, budget
//      left) tokens while budget is left and fewer than max_running requests run.
// A step's batch rows follow this order (the arrival order the MoE layers see). A running request that finds
// no budget left waits for the next step.
struct SchedulerConfig {
  int token_budget = 64;  // rows per step
  int chunk_size = 16;    // most prompt tokens a request prefills in one step
  int max_running = 256;  // most requests running at once

  // Throws std::invalid_argument naming the bad field.
  void validate() const;
};

class Scheduler {
 public:
  // Requests with duplicate ids, empty prompts or max_new_tokens < 1 throw std::invalid_argument.
  Scheduler(SchedulerConfig config, std::vector<Request> requests);

  // Forms the batch of the current step and advances the step counter. The rows may be empty (nothing has
  // arrived yet, or everything has finished).
  const std::vector<model::BatchRow>& next_batch();
  // After the batch ran: logit_rows / logits as Model::forward returned them. Requests whose prompt is now
  // complete or that decoded take the greedy token; requests that reach max_new_tokens finish and are
  // appended to `finished`.
  void complete(std::span<const int32_t> logit_rows, std::span<const float> logits, int vocab_size,
                std::vector<uint64_t>& finished);

  bool all_finished() const;
  int step() const { return step_; }
  // Tokens generated so far by request `id` (throws std::invalid_argument for an unknown id).
  const std::vector<int32_t>& generated(uint64_t id) const;
  bool finished(uint64_t id) const;

 private:
  struct Live {
    Request request;
    int prefilled = 0;
    std::vector<int32_t> generated;
    bool done = false;
  };
  SchedulerConfig config_;
  std::vector<Live> live_;                      // all requests, sorted by (arrival_step, id)
  std::unordered_map<uint64_t, size_t> index_;  // id -> live_ index
  size_t next_arrival_ = 0;
  std::deque<size_t> waiting_;
  std::vector<size_t> running_;  // in start order
  std::vector<model::BatchRow> rows_;
  int step_ = 0;
  size_t num_done_ = 0;
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
  // FNV-1a over the bits of every logits row the probe sampled from: equal hashes mean bitwise-equal logits
  // (a kernel difference shows here even when it does not change the argmax).
  uint64_t probe_logits_hash = 0xCBF29CE484222325ull;
};

// Runs `requests` through `model` (which must hold no live request) until request `probe_id` finishes,
// admitting each request with its prompt length when its first chunk is scheduled and releasing it when it
// finishes (the lifecycle of docs/routing.md section 2); releases every request from the model afterwards.
// Throws std::invalid_argument if probe_id is absent, or if the server runs max_steps steps without finishing
// it.
ServeOutcome serve(model::Model& model, std::vector<Request> requests, const SchedulerConfig& config,
                   uint64_t probe_id, int max_steps = 100000);

}  // namespace moe::sim::diverge

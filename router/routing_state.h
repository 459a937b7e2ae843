// Per-request routing state carried across forward passes: what the scopes whose decisions depend on a
// request's earlier tokens (causal, sequence) remember between calls, and the request lifecycle a serving
// engine drives (admit, run forward passes, release).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace moe {

// For every live request: its admitted prompt length, the next position it expects, and the slots it holds at
// each expert.
//   CapacityScope::kSequence  a request must be admitted with its prompt length before its first forward
//     pass; slots_held counts its prompt's slots (decode rows never hold any), higher_choices its prompt's
//     choice counts (rules::sequence_counts_size).
//   CapacityScope::kCausal    a request is created at its first forward pass (no admission needed; an
//     admitted one works too); slots_held counts every earlier token's slots.
// The planner reads and advances it, so a token's decision depends only on its own request's prefix, however
// the prompt is chunked into forward passes. Other scopes ignore it.
// Errors: std::invalid_argument naming the request, and the state is unchanged.
// Not thread-safe; one state per sequence of planning calls of one layer. Adding a request allocates (once).
class RoutingState {
 public:
  struct Request {
    uint32_t prompt_length = 0;  // admitted prompt length (0: created by causal scope, not admitted)
    uint32_t next_position = 0;
    std::vector<int32_t> slots_held;  // [num_experts]
    // Sequence scope, [top_k * num_experts]: block j - 1 at e counts the prompt rows so far whose choices of
    // rank < j include e (rules::sequence_counts_size). Sized at admission when the state knows top_k, else
    // by the first planner that decides the request's prompt (a later planner of another top_k is an error).
    std::vector<int32_t> higher_choices;
  };

  // A state for layers with `num_experts` experts and `top_k` choices (0: not checked). Planning with a state
  // of another shape is an error.
  explicit RoutingState(int num_experts, int top_k = 0);

  int num_experts() const { return num_experts_; }
  int top_k() const { return top_k_; }

  // A request that will send its prompt's `prompt_length` tokens (positions 0 .. prompt_length - 1, in chunks
  // of any size) and then decode tokens one position at a time. Throws if prompt_length is 0 or the state
  // already holds the request (release it first).
  void admit(uint64_t request_id, uint32_t prompt_length);
  // Forgets a finished request. Throws if the state does not hold it.
  void release(uint64_t request_id);
  // Forgets the request if the state holds it; returns whether it did (for callers that release on every
  // layer a request that some layers, under causal scope, never saw).
  bool release_if_held(uint64_t request_id);

  // nullptr when the request is not held.
  const Request* find(uint64_t request_id) const;
  // The request's state, created at position 0 (not admitted) when new (causal scope).
  Request& get_or_create(uint64_t request_id);
  void clear() { requests_.clear(); }
  size_t num_requests() const { return requests_.size(); }
  // The top_k of the choice counts some request already holds (0 when none does): a state made with top_k 0
  // takes the top_k of the first planner that decides a prompt, and a planner of another top_k is an error.
  int counts_top_k() const;

 private:
  int num_experts_;
  int top_k_;
  std::unordered_map<uint64_t, Request> requests_;
};

}  // namespace moe

// Per-request routing state carried across forward passes: what the scopes whose decisions depend on a
// request's earlier tokens (causal, sequence, prefix) remember between calls, and the request lifecycle a
// serving engine drives (admit or restore from a prefix cache, forward passes, roll back rejected speculative
// tokens, release).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "router/routing_rule.h"
#include "router/token_meta.h"

namespace moe {

// The routing of positions [begin, end) of one request, as its routing state recorded it: what a prefix cache
// keeps beside the KV of those positions (one per cached block and MoE layer), and what RoutingState::restore
// rebuilds a request's state from. Per position p (row i = p - begin), choices[i * top_k + j] is its rank-j
// choice (-1: unavailable) and placed[i * top_k + j] the expert where that pair holds a slot (-1: dropped; a
// rerouted pair's expert is its reroute candidate).
struct RoutingSegment {
  int num_experts = 0;
  int top_k = 0;
  RoutingRule rule;            // the rule the positions were planned under
  uint32_t prompt_length = 0;  // L of the request that planned them (prefix_cache_salt's argument)
  // The turn ends of the request that planned them (router/rules/turn_rules.h; back() == prompt_length), or
  // empty: a single-turn request ({prompt_length}).
  std::vector<uint32_t> turn_ends;
  uint32_t begin = 0;
  uint32_t end = 0;
  std::vector<int32_t> choices;  // [(end - begin) * top_k]
  std::vector<int32_t> placed;   // [(end - begin) * top_k]

  uint32_t size() const { return end - begin; }
  // The planning request's turn ends: turn_ends, or {prompt_length} when it is empty.
  std::span<const uint32_t> planned_turns() const {
    return turn_ends.empty() ? std::span<const uint32_t>(&prompt_length, 1)
                             : std::span<const uint32_t>(turn_ends);
  }
  // A self-describing little-endian byte string, and back: "MOERSEG1" then the fields for a single-turn
  // request, "MOERSEG2" (the same fields, then the turn ends) for a conversation's (the layout:
  // docs/routing.md, "The segment bytes"). parse() checks every field and the sizes before it allocates:
  // std::invalid_argument naming the problem.
  std::vector<uint8_t> serialize() const;
  static RoutingSegment parse(std::span<const uint8_t> bytes);
};

// For every live request: its admitted prompt length, the next position it expects, the slots it holds at
// each expert, and (when the state records) the routing of each of its positions so far.
//   CapacityScope::kSequence, kPrefix  a request must be admitted with its prompt length (or restored) before
//     its first forward pass; slots_held counts its prompt's slots (decode rows never hold any),
//     higher_choices its prompt's choice counts (rules::prompt_choice_counts_size).
//   CapacityScope::kCausal    a request is created at its first forward pass (no admission needed; an
//     admitted one works too); slots_held counts every earlier token's slots.
// The planner reads and advances it, so a token's decision depends only on its own request's prefix, however
// the prompt is chunked into forward passes. Other scopes ignore it.
// Errors: std::invalid_argument naming the request, and the state is unchanged.
// Not thread-safe; one state per sequence of planning calls of one layer. Adding a request allocates (once);
// a recording state grows each request's records as it plans.
class RoutingState {
 public:
  struct Request {
    uint32_t prompt_length = 0;  // admitted prompt length (0: created by causal scope, not admitted)
    // Its turn ends (router/rules/turn_rules.h; back() == prompt_length): {prompt_length} for a single
    // turn; empty when not admitted.
    std::vector<uint32_t> turn_ends;
    uint32_t next_position = 0;
    // Positions [0, cache_boundary) came from a prefix cache (restore): a rollback may not go below it.
    uint32_t cache_boundary = 0;
    RoutingRule rule;  // the rule its positions were planned under (empty before the first plan)
    std::vector<int32_t> slots_held;  // [num_experts]
    // Sequence and prefix scopes, [top_k * num_experts]: block j - 1 at e counts the prompt rows so far whose
    // choices of rank < j include e (rules::prompt_choice_counts_size). Sized at admission when the state
    // knows top_k, else by the first planner that decides the request's prompt (a later planner of another
    // top_k is an error).
    std::vector<int32_t> higher_choices;
    // Recording states: [next_position * top_k] each, position-major (RoutingSegment's layout).
    std::vector<int32_t> choices, placed;
  };

  // A state for layers with `num_experts` experts and `top_k` choices (0: not checked; a recording state
  // needs it). Planning with a state of another shape is an error. `record`: keep the routing of every
  // position of each live request (segment(); rollbacks into positions that changed the counts); the planners
  // fill it.
  explicit RoutingState(int num_experts, int top_k = 0, bool record = false);

  int num_experts() const { return num_experts_; }
  int top_k() const { return top_k_; }
  bool records() const { return record_; }

  // A request that will send its prompt's `prompt_length` tokens (positions 0 .. prompt_length - 1, in chunks
  // of any size) and then decode tokens one position at a time. Throws if prompt_length is 0 or the state
  // already holds the request (release it first).
  void admit(uint64_t request_id, uint32_t prompt_length);
  // A conversation's turn: its prompt is the earlier turns' prompts and answers and a new message, as
  // `turn_ends` describes them (router/rules/turn_rules.h; {L} is the admit above). Its prompt rows are
  // decided per turn, the answers' positions as decode rows, so that the earlier turns route as they did in
  // their own turns (docs/routing.md, "Conversations"). Throws for invalid turn ends, and as admit().
  void admit(uint64_t request_id, std::span<const uint32_t> turn_ends);
  // Admits a request whose positions [0, P) come from a prefix cache: `prefix` are the cached segments of
  // those positions in order (begin 0, each starting where the previous ended; P = the last one's end; empty:
  // plain admit). The request's counts are rebuilt from their records under their rule, its next position is
  // P, and positions below P can no longer be rolled back. Throws, changing nothing, when the state already
  // holds the request, prompt_length is 0, the segments are not contiguous from 0, a segment is of another
  // shape (experts, top_k), of another rule than the first, holds an expert outside [-1, E), or was planned
  // for a prompt length whose prefix_cache_salt differs from this request's (its routing is not this
  // request's: the engine's cache key must carry the salt).
  // A segment planned by another turn of the conversation (or another request) is accepted where
  // prefix_cache_turns of its planning request and of this one agree at its end.
  void restore(uint64_t request_id, uint32_t prompt_length, std::span<const RoutingSegment> prefix);
  void restore(uint64_t request_id, std::span<const uint32_t> turn_ends,
               std::span<const RoutingSegment> prefix);
  // The checks of restore() alone: throws what restore() would, changes nothing (a collective restore checks
  // every request before it restores any).
  void check_restore(uint64_t request_id, uint32_t prompt_length,
                     std::span<const RoutingSegment> prefix) const;
  void check_restore(uint64_t request_id, std::span<const uint32_t> turn_ends,
                     std::span<const RoutingSegment> prefix) const;
  // Rolls a request back to `position` (its positions >= position are forgotten: rejected speculative tokens,
  // or a partial recompute): next_position becomes `position` and the counts lose what those positions added.
  // Throws, changing nothing, when the state does not hold the request, `position` is past next_position
  // (forward) or below its cache boundary, or the forgotten positions changed the counts (prompt rows under
  // sequence and prefix scopes, any row under causal scope) and the state does not record.
  void rollback(uint64_t request_id, uint32_t position);
  // The checks of rollback() alone.
  void check_rollback(uint64_t request_id, uint32_t position) const;
  // The recorded routing of positions [begin, end) of a live request (a recording state). Throws when the
  // state does not record or hold the request, or [begin, end) is not within [0, next_position).
  RoutingSegment segment(uint64_t request_id, uint32_t begin, uint32_t end) const;
  // Forgets a finished request. Throws if the state does not hold it.
  void release(uint64_t request_id);
  // Forgets the request if the state holds it; returns whether it did (for callers that release on every
  // layer a request that some layers, under causal scope, never saw).
  bool release_if_held(uint64_t request_id);

  // What a planner calls after a successful plan of a recording state: rows[t]'s ranked choices
  // choices[t * choices_stride + j] and placed experts placed[t * top_k + j] become the records of its
  // position. Every row's request must be held with next_position > its position (the plan advanced it).
  void record_rows(std::span<const TokenMeta> rows, const int32_t* choices, int choices_stride,
                   const int32_t* placed);

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
  Request& create(uint64_t request_id, std::span<const uint32_t> turn_ends);
  // Whether positions [position, next_position) of `r` changed its counts.
  static bool rolled_back_rows_count(const Request& r, uint32_t position);

  int num_experts_;
  int top_k_;
  bool record_;
  std::unordered_map<uint64_t, Request> requests_;
};

}  // namespace moe

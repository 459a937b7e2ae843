// One request of a workload: when it arrives and how long its prompt and its generation are.
#pragma once

#include <cstdint>
#include <vector>

namespace moe::sim {

// It arrives at a step, brings prompt_len prompt tokens (positions 0..prompt_len-1) and then feeds decode_len
// generated tokens one per step (positions prompt_len..prompt_len+decode_len-1).
// A request may begin with one of the workload's shared system prompts: its first system_len prompt positions
// then hold system prompt `system_prompt`'s tokens, the same as every other request with it.
// A conversation's later turn (docs/routing.md, "Conversations") follows the previous turn: it arrives
// think_steps after that one finishes (arrival_step is then unused) and its prompt is the previous turns'
// prompts and answers and a new message - turn_ends {P_1, A_1, ..., prompt_len}, where an answer ends at the
// previous turn's prompt_len + decode_len + 1 (every generated token, the last one never fed back in its
// turn). Every turn's tokens are the conversation's: `conversation` is the id of its first turn.
struct RequestSpec {
  uint64_t id = 0;
  int64_t arrival_step = 0;
  uint32_t prompt_len = 1;
  uint32_t decode_len = 0;
  int32_t system_prompt = -1;  // -1: none
  uint32_t system_len = 0;
  uint64_t conversation = kOwnConversation;  // the first turn's id; kOwnConversation: this request's own
  int64_t follows = -1;                      // the index (in its workload) of the turn it follows; -1: none
  int64_t think_steps = 0;
  std::vector<uint32_t> turn_ends{};  // empty: a single turn

  static constexpr uint64_t kOwnConversation = ~uint64_t{0};
  // The id whose tokens this request's (non-system) positions hold.
  uint64_t content() const { return conversation == kOwnConversation ? id : conversation; }
};

}  // namespace moe::sim

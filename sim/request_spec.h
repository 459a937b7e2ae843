// One request of a workload: when it arrives and how long its prompt and its generation are.
#pragma once

#include <cstdint>

namespace moe::sim {

// It arrives at a step, brings prompt_len prompt tokens (positions 0..prompt_len-1) and then feeds decode_len
// generated tokens one per step (positions prompt_len..prompt_len+decode_len-1).
// A request may begin with one of the workload's shared system prompts: its first system_len prompt positions
// then hold system prompt `system_prompt`'s tokens, the same as every other request with it.
struct RequestSpec {
  uint64_t id = 0;
  int64_t arrival_step = 0;
  uint32_t prompt_len = 1;
  uint32_t decode_len = 0;
  int32_t system_prompt = -1;  // -1: none
  uint32_t system_len = 0;
};

}  // namespace moe::sim

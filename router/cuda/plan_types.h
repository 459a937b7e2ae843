// Array interface of the data-parallel dispatch planner (GPU, and CPU through Thrust's OpenMP backend).
//
// The planner reproduces router/dispatch_planner.cc exactly: same kept/rerouted/dropped decisions, same
// weights (bitwise), same slot numbers, same capacities and counts. This header holds the plain-pointer
// structs both backends share; no CUDA or Thrust types appear here, so host code can include it freely.
#pragma once

#include <cstddef>
#include <cstdint>

#include "router/dispatch_policy.h"
#include "router/rules/plan_error.h"
#include "router/rules/plan_rules.h"  // PairStatus
#include "router/token_meta.h"

namespace moe::cuda {

// What a planner instance is sized for. Validates at construction of the workspace (validate()).
struct PlanShape {
  int max_tokens = 0;   // largest batch the workspace must hold
  int num_experts = 0;  // E
  int top_k = 0;        // k
  int num_ranked = 0;   // ranks per token in the routes (>= top_k; top_k + reroute_depth when rerouting)
  DispatchPolicy policy;

  // Throws std::invalid_argument naming the bad field (router/plan_checks.h's check_planner_config, then
  // num_ranked against rules::num_ranked_needed and max_tokens), or when the shape does not fit the planner's
  // 63-bit sort keys (max_tokens around 2^20 with E = 4096).
  void validate() const;
};

// Inputs, all in the backend's memory (device memory for CUDA, host memory for OpenMP).
struct PlanInputs {
  int num_tokens = 0;                      // T <= shape.max_tokens
  const int32_t* route_experts = nullptr;  // [T * num_ranked], -1 = unavailable rank (TokenRoutes::experts)
  const float* route_weights = nullptr;    // [T * num_ranked]
  const float* top1_score = nullptr;       // [T]; read only under Priority::kScore
  const TokenMeta* meta = nullptr;         // [T]
  // Causal and sequence scopes (the RoutingState, as a table). token_state_row[t] is the row of the caller's
  // routing-state table that holds the request of token t; every token of one request must name the same row
  // and distinct requests distinct rows (the caller's request -> row map, like a KV-cache slot table).
  //   causal:   -1 = a request that starts fresh at position 0 (its counts are not kept); nullptr = every
  //             request fresh.
  //   sequence: -1 or a row with prompt length 0 = not admitted (kPlanNotAdmitted); nullptr = no state: each
  //             request's rows are its whole prompt.
  // The table rows are read and, when the plan succeeds, advanced in place:
  //   state_slots_held[row * E + e]     slots the request holds at expert e (sequence: its prompt's)
  //   state_next_position[row]          the position the request's next token must have
  //   state_prompt_length[row]          sequence: the admitted prompt length L (read only; a conversation's
  //                                     turn ends below)
  //   state_higher_choices[row * k * E + (j - 1) * E + e]
  //                                     sequence: the prompt rows so far whose choices of rank < j include e
  //                                     (j = 1 .. k; rules::prompt_choice_counts_size)
  const int32_t* token_state_row = nullptr;
  int num_state_rows = 0;
  int32_t* state_slots_held = nullptr;
  uint32_t* state_next_position = nullptr;
  const uint32_t* state_prompt_length = nullptr;
  int32_t* state_higher_choices = nullptr;
  // Sequence and prefix scopes, conversations (router/rules/turn_rules.h; read only): row r's turn ends are
  // state_turn_ends[state_turn_offsets[r] .. state_turn_offsets[r + 1]) when that range holds more than one
  // (the last is its prompt length); nullptr = every row a single turn {state_prompt_length[row]}.
  const uint32_t* state_turn_ends = nullptr;
  const int32_t* state_turn_offsets = nullptr;  // [num_state_rows + 1]
};

// Why a plan failed: PlanError (router/rules/plan_error.h), written to PlanOutputs::error (code kPlanOk =
// success). Detected on the device: the host learns of it only when it reads the struct back (the one
// documented synchronisation point).

// Outputs, in the backend's memory. Pair p = t * top_k + j. Field meanings are those of moe::DispatchPlan.
struct PlanOutputs {
  int32_t* pair_expert = nullptr;      // [T * k]
  int32_t* pair_slot = nullptr;        // [T * k]
  float* pair_weight = nullptr;        // [T * k]
  PairStatus* pair_status = nullptr;   // [T * k]
  int32_t* expert_load = nullptr;      // [E]
  int64_t* expert_capacity = nullptr;  // [E]
  int32_t* expert_offsets = nullptr;   // [E + 1]
  int32_t* slot_pairs = nullptr;       // [T * k]; the first expert_offsets[E] entries are the slots
  int64_t* counts = nullptr;           // [4]: kept, rerouted, dropped, tokens fully dropped
  PlanError* error = nullptr;          // [1]
};

// Checks the arguments both launchers share: num_tokens in [0, max_tokens], the pointers the policy reads are
// set (top1_score under score priority; the state table when token_state_row is given), every output is set.
// Throws std::invalid_argument naming the first missing one. Does not read device memory.
void check_plan_args(const PlanShape& shape, const PlanInputs& in, const PlanOutputs& out);

// Batch scope's C for a batch of num_tokens (host arithmetic, identical to the CPU planner); -1 otherwise.
int64_t plan_batch_capacity(const PlanShape& shape, int num_tokens);

// Byte offsets of the planner's scratch arrays inside one workspace (shared by both backends).
struct PlanWorkspaceLayout {
  size_t token_key = 0;         // uint64 [max_tokens]
  size_t order = 0;             // int32  [max_tokens]
  size_t inv_order = 0;         // int32  [max_tokens]
  size_t group_of = 0;          // int32  [max_tokens]
  size_t group_begin = 0;       // int32  [max_tokens + 1]
  size_t group_cap = 0;         // int64  [max_tokens]
  size_t group_cap_sum = 0;     // int64  [max_tokens]
  size_t token_stats = 0;       // 4 x int64 [max_tokens]
  size_t pair_key = 0;          // uint64 [max_pairs]
  size_t pair_val = 0;          // int32  [max_pairs]
  size_t pair_aux = 0;          // int32  [max_pairs + 1]
  size_t overflow = 0;          // int32  [max_pairs]
  size_t group_counts = 0;      // int32  [count_rows * E]
  size_t group_higher = 0;      // int32  [max_tokens * k * E] (sequence scope: each request's choice counts)
  size_t capacity_partial = 0;  // int64 [ceil(max_tokens / 256) * E] (causal and sequence scopes)
  size_t bytes = 0;             // total

  explicit PlanWorkspaceLayout(const PlanShape& shape);
};

}  // namespace moe::cuda

// What a request's routing state was planned under, and when a cached prefix of it may serve another request:
// the contract between the planner's stateful scopes and a serving engine's prefix cache (docs/routing.md
// section 2, "Prefix caching").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "router/dispatch_policy.h"

namespace moe {

// The planning rule a request's routing state follows. Two states (or a state and a cached prefix) may be
// combined only under the same rule: the fingerprint covers every policy field that changes which pairs keep
// a slot (capacity factor, rounding, min_capacity, scope, overflow, reroute depth, lookahead).
struct RoutingRule {
  CapacityScope scope = CapacityScope::kBatch;
  uint32_t lookahead = 0;    // prefix scope's W (0 under other scopes)
  uint64_t fingerprint = 0;  // 0: no rule (a state nothing has planned yet)

  static RoutingRule of(const DispatchPolicy& policy);
  bool empty() const { return fingerprint == 0; }
  friend bool operator==(const RoutingRule&, const RoutingRule&) = default;
};

// The prefix cache's key extension for a cached prefix of positions [0, prefix_end) of a request with prompt
// length `prompt_length` planned under `rule`: two requests with the same tokens in [0, prefix_end) route
// those positions bitwise alike iff their salts are equal. A serving engine hashes it into the key of the
// block that ends at prefix_end (beside the tokens, as it does a LoRA id or a cache salt):
//   prefix scope     0 when prompt_length >= prefix_end + lookahead (no decision in the prefix saw L: every
//                    such request shares the block), else prompt_length (only requests of the same L share
//                    it; blocks within `lookahead` of the prompt's end, and blocks with decode rows)
//   sequence scope   prompt_length (every decision depends on L: the cache is keyed by L)
//   causal scope     0 (no decision depends on L)
//   batch, request, none: 0 (no routing state: nothing of the prefix is carried; these scopes make no
//                    promise across batches anyway)
// The single-turn case of the conversation forms below ({prompt_length}).
uint64_t prefix_cache_salt(const RoutingRule& rule, uint32_t prefix_end, uint32_t prompt_length);
uint64_t prefix_cache_salt(const DispatchPolicy& policy, uint32_t prefix_end, uint32_t prompt_length);

// Conversations (router/rules/turn_rules.h; docs/routing.md, "Conversations"): the turn ends a cached prefix
// [0, prefix_end) of a request with turn ends `turn_ends` routes by, under sequence and prefix scopes - every
// end before prefix_end (where the prefix's turns and answers begin and end), and the end of the turn holding
// position prefix_end - 1 when that position is a prompt row whose decision reads it (sequence scope always;
// prefix scope when the turn ends within `lookahead` of prefix_end). Empty under the other scopes and for a
// prefix of one turn's prompt that ends `lookahead` or more before the turn does. Two requests with the same
// tokens in [0, prefix_end) route them bitwise alike iff these lists are equal: what an engine's block key
// must cover (exactly, or through the salt below).
std::vector<uint32_t> prefix_cache_turns(const RoutingRule& rule, uint32_t prefix_end,
                                         std::span<const uint32_t> turn_ends);
// The 64-bit form of prefix_cache_turns: 0 for an empty list, the one value for a list of one (so a
// single-turn request's salt is the one above), else a 64-bit hash of the list with its top bit set (never a
// prompt length). Throws std::invalid_argument for invalid turn ends (rules::turn_ends_error).
uint64_t prefix_cache_salt(const RoutingRule& rule, uint32_t prefix_end, std::span<const uint32_t> turn_ends);
uint64_t prefix_cache_salt(const DispatchPolicy& policy, uint32_t prefix_end,
                           std::span<const uint32_t> turn_ends);

// The key extension of a cache whose blocks serve requests planned under several rules at once (a simulator
// planning several policies over one engine pass): 0 where every rule's salt is 0 (no rule's decisions in
// the prefix saw the prompt length: a cache keyed by tokens alone), else a hash of all the rules' salts -
// so two blocks share a key only where every rule's salt is equal, and a hit is valid under each rule. With
// one rule it is that rule's salt; with none, 0.
uint64_t prefix_cache_salt(std::span<const RoutingRule> rules, uint32_t prefix_end, uint32_t prompt_length);
uint64_t prefix_cache_salt(std::span<const RoutingRule> rules, uint32_t prefix_end,
                           std::span<const uint32_t> turn_ends);

}  // namespace moe

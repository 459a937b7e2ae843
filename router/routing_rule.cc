#include "router/routing_rule.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "router/rules/turn_rules.h"

namespace moe {
namespace {

// FNV-1a over a value's bytes.
template <typename T>
void mix(uint64_t& h, const T& v) {
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  for (unsigned char b : bytes) h = (h ^ b) * 0x100000001B3ull;
}

}  // namespace

RoutingRule RoutingRule::of(const DispatchPolicy& policy) {
  RoutingRule r;
  r.scope = policy.scope;
  r.lookahead = policy.scope == CapacityScope::kPrefix ? policy.lookahead : 0;
  uint64_t h = 0xCBF29CE484222325ull;
  mix(h, policy.capacity_factor);
  mix(h, static_cast<int32_t>(policy.rounding));
  mix(h, policy.min_capacity);
  mix(h, static_cast<int32_t>(policy.scope));
  mix(h, static_cast<int32_t>(policy.overflow));
  mix(h, policy.overflow == Overflow::kReroute ? policy.reroute_depth : 0);
  mix(h, r.lookahead);
  r.fingerprint = h == 0 ? 1 : h;  // 0 means "no rule"
  return r;
}

namespace {

void check_turn_ends(std::span<const uint32_t> turn_ends) {
  if (const char* error = rules::turn_ends_error(turn_ends.data(), static_cast<int64_t>(turn_ends.size()))) {
    throw std::invalid_argument(std::string("prefix_cache_salt: ") + error);
  }
}

}  // namespace

std::vector<uint32_t> prefix_cache_turns(const RoutingRule& rule, uint32_t prefix_end,
                                         std::span<const uint32_t> turn_ends) {
  std::vector<uint32_t> out;
  const bool sequence = rule.scope == CapacityScope::kSequence;
  if (!sequence && rule.scope != CapacityScope::kPrefix) return out;  // nothing depends on the turns
  check_turn_ends(turn_ends);
  if (prefix_end == 0) return out;
  for (uint32_t end : turn_ends) {
    if (end < prefix_end) out.push_back(end);
  }
  const rules::TurnEnds turns{turn_ends.data(), static_cast<int>(turn_ends.size())};
  const int last = turns.segment_of(prefix_end - 1);
  if (rules::TurnEnds::is_prompt_segment(last, turns.count)) {
    const uint32_t turn_end = turns.ends[last];  // >= prefix_end
    if (sequence || uint64_t{turn_end} < uint64_t{prefix_end} + rule.lookahead) out.push_back(turn_end);
  }
  return out;
}

uint64_t prefix_cache_salt(const RoutingRule& rule, uint32_t prefix_end,
                           std::span<const uint32_t> turn_ends) {
  const std::vector<uint32_t> turns = prefix_cache_turns(rule, prefix_end, turn_ends);
  if (turns.empty()) return 0;
  if (turns.size() == 1) return turns.front();
  uint64_t h = 0xCBF29CE484222325ull;
  mix(h, static_cast<uint64_t>(turns.size()));
  for (uint32_t end : turns) mix(h, end);
  // A splitmix64 finaliser over the FNV state, then the top bit: never a prompt length (< 2^32).
  h ^= h >> 30;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 27;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 31;
  return h | (uint64_t{1} << 63);
}

uint64_t prefix_cache_salt(const DispatchPolicy& policy, uint32_t prefix_end,
                           std::span<const uint32_t> turn_ends) {
  return prefix_cache_salt(RoutingRule::of(policy), prefix_end, turn_ends);
}

uint64_t prefix_cache_salt(const RoutingRule& rule, uint32_t prefix_end, uint32_t prompt_length) {
  if (prompt_length == 0) return 0;  // no prompt (a request no rule admitted): nothing depends on it
  return prefix_cache_salt(rule, prefix_end, std::span<const uint32_t>(&prompt_length, 1));
}

uint64_t prefix_cache_salt(const DispatchPolicy& policy, uint32_t prefix_end, uint32_t prompt_length) {
  return prefix_cache_salt(RoutingRule::of(policy), prefix_end, prompt_length);
}

uint64_t prefix_cache_salt(std::span<const RoutingRule> rules, uint32_t prefix_end,
                           std::span<const uint32_t> turn_ends) {
  if (rules.size() == 1) return prefix_cache_salt(rules.front(), prefix_end, turn_ends);
  bool any = false;
  uint64_t h = 0xCBF29CE484222325ull;
  for (const RoutingRule& rule : rules) {
    const uint64_t salt = prefix_cache_salt(rule, prefix_end, turn_ends);
    any |= salt != 0;
    mix(h, salt);
  }
  return any ? (h == 0 ? 1 : h) : 0;
}

uint64_t prefix_cache_salt(std::span<const RoutingRule> rules, uint32_t prefix_end, uint32_t prompt_length) {
  if (prompt_length == 0) return 0;
  return prefix_cache_salt(rules, prefix_end, std::span<const uint32_t>(&prompt_length, 1));
}

}  // namespace moe

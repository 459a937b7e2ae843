#include "router/routing_rule.h"

#include <cstring>

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

uint64_t prefix_cache_salt(const RoutingRule& rule, uint32_t prefix_end, uint32_t prompt_length) {
  switch (rule.scope) {
    case CapacityScope::kSequence:
      return prompt_length;
    case CapacityScope::kPrefix:
      return uint64_t{prompt_length} >= uint64_t{prefix_end} + rule.lookahead ? 0 : prompt_length;
    default:
      return 0;
  }
}

uint64_t prefix_cache_salt(const DispatchPolicy& policy, uint32_t prefix_end, uint32_t prompt_length) {
  return prefix_cache_salt(RoutingRule::of(policy), prefix_end, prompt_length);
}

uint64_t prefix_cache_salt(std::span<const RoutingRule> rules, uint32_t prefix_end, uint32_t prompt_length) {
  if (rules.size() == 1) return prefix_cache_salt(rules.front(), prefix_end, prompt_length);
  bool any = false;
  uint64_t h = 0xCBF29CE484222325ull;
  for (const RoutingRule& rule : rules) {
    const uint64_t salt = prefix_cache_salt(rule, prefix_end, prompt_length);
    any |= salt != 0;
    mix(h, salt);
  }
  return any ? (h == 0 ? 1 : h) : 0;
}

}  // namespace moe

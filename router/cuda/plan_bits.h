// The data-parallel planner's 64-bit sort-key layout (internal to router/cuda; host and device code). The
// keys' fields (descending score key, random priority key) and every capacity formula are router/rules/'s.
#pragma once

#include <cstdint>

#include "base/host_device.h"
#include "router/dispatch_policy.h"

namespace moe::cuda {

// Bits needed to hold every value in [0, n).
MOE_HD inline int bits_below(int64_t n) {
  int bits = 0;
  while (bits < 63 && (int64_t{1} << bits) < n) ++bits;
  return bits;
}

// Claim key (pooled scopes): [group | expert | choice j | claiming index i], most significant first.
// Sorting the pairs by it lists, per (group, expert), the pairs that want the expert in claiming order
// (choice-major, then priority order), so a pair's rank in its run decides whether it fits.
// Slot key: [expert | group | slot within the group], which orders every placed pair by its final slot.
struct PlanKeyBits {
  int group = 0, expert = 0, choice = 0, index = 0, local = 0;

  MOE_HD PlanKeyBits() {}
  MOE_HD PlanKeyBits(int64_t num_tokens, int num_experts, int top_k, CapacityScope scope) {
    const bool grouped = scope == CapacityScope::kRequest || scope == CapacityScope::kCausal ||
                         scope == CapacityScope::kSequence || scope == CapacityScope::kPrefix;
    group = grouped ? bits_below(num_tokens) : 0;
    expert = bits_below(num_experts);
    choice = bits_below(top_k);
    index = bits_below(num_tokens);
    local = bits_below(num_tokens * top_k);
  }
  MOE_HD int claim_total() const { return group + expert + choice + index; }
  MOE_HD int slot_total() const { return expert + group + local; }
};

}  // namespace moe::cuda

// The planner's integer helpers and 64-bit sort-key layout (internal to kernels/cuda; host and device code).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "router/dispatch_policy.h"

#if defined(__CUDACC__)
#define MOE_HD __host__ __device__
#else
#define MOE_HD
#endif

namespace moe::cuda {

// splitmix64's finaliser, as router/dispatch_planner.cc.
MOE_HD inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

MOE_HD inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

// router/dispatch_planner.cc's descending_key, bit for bit.
MOE_HD inline uint64_t descending_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t bits = float_bits(f);
  const uint32_t ascending = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return ~ascending & 0xffffffffu;
}

// moe::rounded_capacity with the same double operations in the same order (IEEE on host and device).
MOE_HD inline int64_t rounded_capacity_hd(double capacity_factor, int64_t num_tokens, int top_k,
                                          int num_experts, bool ceil_rounding) {
  const double exact = capacity_factor * static_cast<double>(num_tokens) * top_k / num_experts;
  const double nearest = ::round(exact);
  const double magnitude = ::fabs(exact) > 1.0 ? ::fabs(exact) : 1.0;
  if (::fabs(exact - nearest) <= 1e-9 * magnitude) return static_cast<int64_t>(nearest);
  return static_cast<int64_t>(ceil_rounding ? ::ceil(exact) : ::floor(exact));
}

MOE_HD inline int64_t max3(int64_t a, int64_t b, int64_t c) {
  const int64_t m = a > b ? a : b;
  return m > c ? m : c;
}

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
    const bool grouped = scope == CapacityScope::kRequest || scope == CapacityScope::kCausal;
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

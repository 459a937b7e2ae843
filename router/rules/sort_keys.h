// The planner's sort keys (docs/routing.md section 3), one definition for the CPU planner and the GPU
// planner.
#pragma once

#include <cstdint>
#include <cstring>

#include "base/float_bits.h"
#include "base/host_device.h"
#include "base/splitmix64.h"

namespace moe::rules {

// Maps a finite float to an unsigned key with the same order; higher floats get lower keys, so sorting the
// keys ascending sorts the floats descending. +0 and -0 map to the same key. The key fits in 32 bits.
MOE_HD inline uint64_t descending_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t bits = float_bits(f);
  const uint32_t ascending = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return ~ascending & 0xffffffffu;
}

// Priority::kRandom's key: a seeded shuffle keyed by the token's identity, not its row, so a request's own
// order does not move when strangers join the batch. Ties (never in practice) go to the lower row.
MOE_HD inline uint64_t random_priority_key(uint64_t seed, uint64_t request_id, uint32_t position) {
  return mix64(seed ^ mix64(request_id ^ mix64(position)));
}

}  // namespace moe::rules

// splitmix64 (Steele, Lea, Flood 2014; Vigna's constants): the project's one 64-bit mixer and its seeded
// generator. Fixed integer arithmetic, so every machine, compiler and device gives the same bits. Used for
// the random priority's keys (router/rules/sort_keys.h), seeded weights, synthetic workloads and content
// hashes.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/host_device.h"

namespace moe {

inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;

// splitmix64's output function: a bijection of 64-bit words.
MOE_HD constexpr uint64_t splitmix64_finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The finaliser applied to x + golden gamma: splitmix64's value for state x. Bijective.
MOE_HD constexpr uint64_t mix64(uint64_t x) {
  return splitmix64_finalize(x + kGoldenGamma);
}

// Folds v into the running hash h (boost's hash_combine step, then the finaliser). Not commutative: the
// order of the values matters.
MOE_HD constexpr uint64_t hash_combine64(uint64_t h, uint64_t v) {
  return splitmix64_finalize(h ^ (v + kGoldenGamma + (h << 6) + (h >> 2)));
}

// The splitmix64 generator: next() returns mix64(state) and advances the state by the golden gamma. Derived
// draws are fixed functions of next() (no std::*_distribution, whose results are implementation-defined).
class SplitMix64 {
 public:
  MOE_HD explicit SplitMix64(uint64_t seed) : state_(seed) {}

  MOE_HD uint64_t next() {
    const uint64_t z = mix64(state_);
    state_ += kGoldenGamma;
    return z;
  }
  // Uniform in [0, 1): the top 24 bits as a float (exact).
  MOE_HD float uniform_float() { return static_cast<float>(next() >> 40) * 0x1.0p-24f; }
  // Uniform in [0, 1): the top 53 bits as a double (exact).
  MOE_HD double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in [lo, hi] inclusive (lo <= hi); multiply-shift on 32 bits, bias below 2^-32 per value.
  MOE_HD int64_t uniform_int(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(((next() >> 32) * span) >> 32);
  }

 private:
  uint64_t state_;
};

// FNV-1a (64-bit) of a byte string, for deriving stream keys from names.
constexpr uint64_t fnv1a64(std::string_view bytes, uint64_t h = 0xcbf29ce484222325ull) {
  for (char c : bytes) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

// A stream key from a seed and a name: FNV-1a of the name, mixed with the seed.
constexpr uint64_t stream_key(uint64_t seed, std::string_view name) {
  return mix64(seed ^ mix64(fnv1a64(name)));
}

}  // namespace moe

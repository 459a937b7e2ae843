// splitmix64: the model's seeded pseudo-random numbers, the same bits on every machine and compiler.
#pragma once

#include <cstdint>
#include <string_view>

namespace moe::model {

// Sebastiano Vigna's splitmix64 generator. next() advances the state by the golden-ratio increment and
// returns the mixed value. Derived draws are fixed functions of next() (no std::*_distribution, whose
// results are implementation-defined).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1): the top 24 bits as a float (exact).
  float uniform_float() { return static_cast<float>(next() >> 40) * 0x1.0p-24f; }
  // Uniform in [0, 1): the top 53 bits as a double (exact).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in [lo, hi] inclusive (lo <= hi); multiply-shift on 32 bits, bias below 2^-32 per value.
  int64_t uniform_int(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(((next() >> 32) * span) >> 32);
  }

 private:
  uint64_t state_;
};

// splitmix64's finaliser: a bijective 64-bit mix, used to derive independent stream keys.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A stream key from a seed and a name (FNV-1a of the name, mixed with the seed).
inline uint64_t stream_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return mix64(seed ^ mix64(h));
}

}  // namespace moe::model

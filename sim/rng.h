// The simulator's own pseudo-random numbers: the same seed gives the same numbers on every machine and
// compiler (std::normal_distribution and friends are implementation-defined, so none are used).
#pragma once

#include <cstdint>

#include "base/splitmix64.h"

namespace moe::sim {

// A stream key from a seed and up to three identifiers, e.g. stream_key(seed, request_id, position, tag).
// Each argument is folded in with mix64 (base/splitmix64.h), so streams for different tuples are independent
// for all practical purposes.
uint64_t stream_key(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0);

// stream_key(seed, a, b, c) from seed_hash = mix64(seed): inline, so that a loop over many tuples of one seed
// vectorises.
inline uint64_t stream_key_hashed(uint64_t seed_hash, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  return mix64(mix64(mix64(seed_hash ^ a) ^ b) ^ c);
}

// xoshiro256** seeded by running splitmix64 from `key`. Every derived draw is a fixed function of next():
//   uniform()      (next() >> 11) * 2^-53, in [0, 1)
//   normal()       Marsaglia's polar form of Box-Muller (uses only sqrt and log, both exactly or correctly
//                  rounded on IEEE-754 targets with glibc); the second value of each pair is cached
//   exponential()  -log(1 - uniform())
//   gamma(a)       Marsaglia-Tsang (a >= 1), with the a + 1 boost and U^(1/a) for a < 1
class Rng {
 public:
  explicit Rng(uint64_t key);

  uint64_t next();
  double uniform();
  // An integer uniform in [lo, hi] (inclusive), lo <= hi. Uses rejection, so it is unbiased.
  int64_t uniform_int(int64_t lo, int64_t hi);
  double normal();
  double exponential();
  double gamma(double shape);

 private:
  uint64_t s_[4];
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace moe::sim

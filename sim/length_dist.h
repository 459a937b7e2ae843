// Distributions of request lengths (prompt or decode tokens), written as short specs on the command line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "sim/rng.h"

namespace moe::sim {

// Spec syntax (docs/cli.md):
//   fixed:N   or just N                     always N
//   uniform:A,B                             an integer uniform in [A, B], both inclusive
//   lognormal:mean=M,sigma=S[,max=X]        round(exp(mu + S * z)), mu = ln(M) - S^2/2, so that the
//                                           distribution's mean is M; clamped to [0, X] (X default 1e6)
// Draws are integers >= 0; callers that need >= 1 (prompts) clamp.
struct LengthDist {
  enum class Kind { kFixed, kUniform, kLognormal };
  Kind kind = Kind::kFixed;
  int64_t a = 0;       // fixed value, or uniform lower bound
  int64_t b = 0;       // uniform upper bound
  double mean = 0.0;   // lognormal mean
  double sigma = 0.0;  // lognormal sigma
  int64_t max = 1000000;

  // Throws UsageError naming the spec and what is wrong with it.
  static LengthDist parse(std::string_view spec);
  // The canonical spec: parse(to_string()) gives an equal distribution.
  std::string to_string() const;
  int64_t sample(Rng& rng) const;
  double expected() const;
};

}  // namespace moe::sim

// Synthetic router logits with realistic imbalance: expert popularity, per-request topics and noise.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "router/token_meta.h"

namespace moe::sim {

// Popularity skew of the experts (the mean logit of expert e before topics and noise):
//   none            pop[e] = 0
//   zipf:S          pop[e] = -S * ln(e + 1)            (expert 0 is the most popular)
//   dirichlet:A     pop[e] = ln(p[e]) - mean_e ln(p),  p ~ Dirichlet(A, ..., A) drawn once from the seed
struct Skew {
  enum class Kind { kNone, kZipf, kDirichlet };
  Kind kind = Kind::kNone;
  double param = 0.0;

  static Skew parse(std::string_view spec);  // throws UsageError
  std::string to_string() const;
};

struct ScoreModelConfig {
  Skew skew = Skew::parse("zipf:0.5");
  double temperature = 1.0;  // > 0
  double topic_rho = 0.5;    // in [0, 1]: correlation of a request's tokens through its topic vector
  double noise_std = 1.0;    // >= 0

  void validate() const;  // throws UsageError naming the field
};

// The logit of token (request r, position p) at expert e:
//   L[e] = (pop[e] + noise_std * (rho * z_r[e] + sqrt(1 - rho^2) * n_{r,p}[e])) / temperature
// where z_r ~ N(0, I) is drawn from stream_key(seed, r, kTopicTag) and n_{r,p} ~ N(0, I) from
// stream_key(seed, r, p). Both come from the project's own Rng, so a token's logits are a function of
// (config, seed, request id, position) only: never of its batch mates, their order or the machine.
class ScoreModel {
 public:
  // Throws UsageError for an invalid config or num_experts < 1.
  ScoreModel(const ScoreModelConfig& config, int num_experts, uint64_t seed);

  int num_experts() const { return num_experts_; }
  const std::vector<double>& popularity() const { return popularity_; }

  // Writes rows.size() x num_experts logits, row-major, to `out` (resized).
  void logits(std::span<const TokenMeta> rows, std::vector<float>& out) const;
  // One token's logits into out[0 .. num_experts).
  void token_logits(const TokenMeta& token, float* out) const;

 private:
  ScoreModelConfig config_;
  int num_experts_;
  uint64_t seed_;
  std::vector<double> popularity_;
};

}  // namespace moe::sim

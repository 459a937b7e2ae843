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
//   explicit        pop[e] = values[e], one finite value per expert (the `popularity` setting; what
//                   `moe-sim fit` estimates from recorded logits)
struct Skew {
  enum class Kind { kNone, kZipf, kDirichlet, kExplicit };
  Kind kind = Kind::kNone;
  double param = 0.0;
  std::vector<double> values;  // kExplicit only

  // "none", "zipf:S", "dirichlet:A" or "explicit" (values empty: the `popularity` setting fills them).
  static Skew parse(std::string_view spec);  // throws UsageError
  // Kind kExplicit with these values; throws UsageError for an empty list or a value that is not finite.
  static Skew explicit_values(std::vector<double> values);
  std::string to_string() const;  // the kind for kExplicit ("explicit"), the values are shown apart
};

struct ScoreModelConfig {
  // The named model these fields came from ("gaussian": the defaults below), shown in the config.
  std::string name = "gaussian";
  Skew skew = Skew::parse("zipf:0.5");
  double temperature = 1.0;  // > 0
  double topic_rho = 0.5;    // in [0, 1]: correlation of a request's tokens through its topic vector
  double noise_std = 1.0;    // >= 0

  void validate() const;  // throws UsageError naming the field
};

// Named score models (docs/cli.md "Score models"), chosen with --scores NAME / `scores = "NAME"`:
//   gaussian        the defaults of ScoreModelConfig (zipf:0.5, rho 0.5, noise 1, temperature 1)
//   mixtral-8x7b    calibrated at E 8, k 2 to the routing statistics published for Mixtral 8x7B (expert
//                   shares, consecutive same first / shared top-2 choice); docs/cli.md gives the fit
// Throws UsageError naming the known models for another name.
ScoreModelConfig named_score_model(std::string_view name);
const std::vector<std::string>& score_model_names();

// The logit of token (request r, position p) at expert e:
//   L[e] = float(base_r[e] + c * n_{r,p}[e]),  base_r[e] = (pop[e] + noise_std * rho * z_r[e]) / temperature,
//                                               c = noise_std * sqrt(1 - rho^2) / temperature
// in double, where z_r and n_{r,p} are standard normals from draw_normals (sim/normal_draw.h) with keys
// stream_key(seed, r, kTopicPosition, kTopicTag) and stream_key(seed, r, p). A token's logits are a function
// of (config, seed, request id, position) only: never of its batch mates, their order, the thread that drew
// them, whether its topic came from a cache, or the machine.
class ScoreModel {
 public:
  // Throws UsageError for an invalid config, num_experts < 1, or an explicit skew whose popularity does not
  // hold num_experts values.
  ScoreModel(const ScoreModelConfig& config, int num_experts, uint64_t seed);

  int num_experts() const { return num_experts_; }
  const std::vector<double>& popularity() const { return popularity_; }

  // One worker's cache of base_r vectors (direct-mapped by request id; 2^18 / E slots, 16 to 16384, rounded
  // down to a power of two: at most 2 MB). Caching never changes a value: a base_r is a function of (seed,
  // r). Not shared between threads.
  class TopicCache {
   public:
    explicit TopicCache(const ScoreModel& model);
    const double* base(uint64_t request_id);

   private:
    const ScoreModel* model_;
    size_t slots_;
    std::vector<uint64_t> ids_;
    std::vector<bool> valid_;
    std::vector<double> values_;  // slots_ x num_experts
  };

  // Writes rows.size() x num_experts logits, row-major, to `out` (resized).
  void logits(std::span<const TokenMeta> rows, std::vector<float>& out) const;
  // The same into out[0 .. rows.size() * num_experts), with the caller's (per-thread) cache.
  void logits(std::span<const TokenMeta> rows, float* out, TopicCache& cache) const;
  // One token's logits into out[0 .. num_experts).
  void token_logits(const TokenMeta& token, float* out) const;

 private:
  void base_of(uint64_t request_id, double* out) const;
  void token_from_base(const TokenMeta& token, const double* base, float* out) const;

  ScoreModelConfig config_;
  int num_experts_;
  uint64_t seed_;
  std::vector<double> popularity_;
  std::vector<double> pop_base_;  // pop / temperature: base_r when rho == 0
  double noise_scale_ = 0.0;      // c
};

}  // namespace moe::sim

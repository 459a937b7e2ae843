// What a quality run measures per predicted token, against the target and against the dropless run:
//   nll        -log p(target) (natural log; perplexity = exp(mean nll))
//   agree      the argmax (ties to the lower id, model::Model::argmax) equals the dropless run's
//   correct    the argmax equals the target
//   kl         KL(p_dropless || p) = sum_v p_dropless(v) (log p_dropless(v) - log p(v)), in nats (what
//              llama.cpp's perplexity tool reports against a base model as "KLD")
// Every log-probability is log_softmax of the fp32 logits, computed in double.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moe::sim::quality {

// log(sum_v exp(z_v)) in double (the largest logit factored out).
double log_sum_exp(const float* z, int n);

// The dropless run's predictions of one segment: each token's logits, their log-sum-exp and argmax.
class Reference {
 public:
  Reference(int64_t tokens, int vocab);
  void store(int64_t token, const float* logits);
  const float* logits(int64_t token) const { return logits_.data() + token * vocab_; }
  double lse(int64_t token) const { return lse_[static_cast<size_t>(token)]; }
  int32_t top(int64_t token) const { return top_[static_cast<size_t>(token)]; }
  int vocab() const { return vocab_; }
  int64_t tokens() const { return static_cast<int64_t>(lse_.size()); }

 private:
  int vocab_;
  std::vector<float> logits_;
  std::vector<double> lse_;
  std::vector<int32_t> top_;
};

// Sums over predicted tokens (added in a fixed order, so a total does not depend on how work was split).
struct TokenTotals {
  int64_t tokens = 0;
  double nll = 0.0;
  int64_t agree = 0;
  int64_t correct = 0;
  double kl = 0.0;
  void add(const TokenTotals& o);
};

// Scores one prediction: `logits` (vocab values) for `target`, against the reference's prediction `token`.
void score_token(const float* logits, int32_t target, const Reference& reference, int64_t token,
                 TokenTotals& totals);

}  // namespace moe::sim::quality

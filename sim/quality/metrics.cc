#include "sim/quality/metrics.h"

#include <cmath>

#include "moe/model/model.h"

namespace moe::sim::quality {

double log_sum_exp(const float* z, int n) {
  double m = z[0];
  for (int v = 1; v < n; ++v) m = std::max(m, static_cast<double>(z[v]));
  double sum = 0.0;
  for (int v = 0; v < n; ++v) sum += std::exp(static_cast<double>(z[v]) - m);
  return m + std::log(sum);
}

Reference::Reference(int64_t tokens, int vocab)
    : vocab_(vocab),
      logits_(static_cast<size_t>(tokens) * static_cast<size_t>(vocab)),
      lse_(static_cast<size_t>(tokens)),
      top_(static_cast<size_t>(tokens)) {}

void Reference::store(int64_t token, const float* logits) {
  std::copy(logits, logits + vocab_, logits_.begin() + token * vocab_);
  lse_[static_cast<size_t>(token)] = log_sum_exp(logits, vocab_);
  top_[static_cast<size_t>(token)] = model::Model::argmax(logits, vocab_);
}

void TokenTotals::add(const TokenTotals& o) {
  tokens += o.tokens;
  nll += o.nll;
  agree += o.agree;
  correct += o.correct;
  kl += o.kl;
}

void score_token(const float* logits, int32_t target, const Reference& reference, int64_t token,
                 TokenTotals& totals) {
  const int V = reference.vocab();
  const double lse = log_sum_exp(logits, V);
  const int32_t top = model::Model::argmax(logits, V);
  const float* ref = reference.logits(token);
  const double ref_lse = reference.lse(token);
  double kl = 0.0;
  for (int v = 0; v < V; ++v) {
    const double log_p = static_cast<double>(ref[v]) - ref_lse;
    kl += std::exp(log_p) * (log_p - (static_cast<double>(logits[v]) - lse));
  }
  ++totals.tokens;
  totals.nll += lse - static_cast<double>(logits[target]);
  totals.agree += top == reference.top(token);
  totals.correct += top == target;
  totals.kl += kl;
}

}  // namespace moe::sim::quality

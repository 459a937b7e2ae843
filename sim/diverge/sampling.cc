#include "sim/diverge/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/splitmix64.h"
#include "moe/model/model.h"

namespace moe::sim::diverge {

void Sampling::validate() const {
  if (!std::isfinite(temperature) || temperature < 0) {
    throw std::invalid_argument("sampling: temperature (" + std::to_string(temperature) +
                                ") must be finite and >= 0 (0: greedy)");
  }
  if (!(top_p > 0 && top_p <= 1)) {
    throw std::invalid_argument("sampling: top_p (" + std::to_string(top_p) + ") must be in (0, 1]");
  }
}

double sampling_draw(uint64_t seed, uint32_t position) {
  return static_cast<double>(mix64(seed ^ mix64(position)) >> 11) * 0x1.0p-53;
}

int32_t sample_token(std::span<const float> logits, const Sampling& s, uint32_t position) {
  s.validate();
  const int vocab = static_cast<int>(logits.size());
  if (vocab < 1) throw std::invalid_argument("sampling: an empty logits row");
  float max = -INFINITY;
  for (int i = 0; i < vocab; ++i) {
    const float l = logits[i];
    if (std::isnan(l) || l == INFINITY) {
      throw std::invalid_argument("sampling: the logit of token " + std::to_string(i) + " at position " +
                                  std::to_string(position) + " is " + (std::isnan(l) ? "NaN" : "+inf") +
                                  " (the forward pass produced a non-number)");
    }
    max = std::max(max, l);
  }
  if (s.temperature == 0) return model::Model::argmax(logits.data(), vocab);
  if (max == -INFINITY) {
    throw std::invalid_argument("sampling: every logit at position " + std::to_string(position) +
                                " is -inf: nothing to sample");
  }
  // Weights in token-id order, their total in that order.
  std::vector<double> w(static_cast<size_t>(vocab));
  double total = 0;
  for (int i = 0; i < vocab; ++i) {
    w[i] = std::exp((static_cast<double>(logits[i]) - static_cast<double>(max)) / s.temperature);
    total += w[i];
  }
  // The order (logit descending, id ascending) is strict and total, so its first k are the same whichever k a
  // partial sort stops at: sort only as far as the nucleus reaches.
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; };
  const double reach = s.top_p * total;
  size_t nucleus = order.size();
  double nucleus_weight = 0;
  for (size_t k = std::min<size_t>(32, order.size());; k = std::min(order.size(), k * 8)) {
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), before);
    double cum = 0;
    size_t n = 0;
    while (n < k && !(n > 0 && cum >= reach)) cum += w[order[n++]];
    if (cum >= reach || k == order.size()) {
      nucleus = n;
      nucleus_weight = cum;
      break;
    }
  }
  const double target = sampling_draw(s.seed, position) * nucleus_weight;
  double cum = 0;
  int32_t last = order[0];
  for (size_t n = 0; n < nucleus; ++n) {
    const int32_t t = order[n];
    if (w[t] <= 0) break;
    cum += w[t];
    last = t;
    if (cum > target) return t;
  }
  return last;  // the draw fell on the rounding of the last sum: the last token of weight
}

}  // namespace moe::sim::diverge

// The lab's sampling rule: the token a request takes for a position from the logits row before it.
//
// Contract. The token is a function of (the logits' bits, temperature, top_p, seed, position) only - never of
// the batch, the step, the row, the thread or what else was sampled - so a request whose logits are bitwise
// the same gets the same tokens at any temperature, wherever and however it is served (the seeded
// determinism SGLang's deterministic mode gives: a draw per request and position). Speculative verification
// uses the same rule (sim/diverge/serving.cc): a draft is kept while it equals the token the rule draws at
// its position from the row before, so speculation never changes the output.
//   temperature 0   greedy: moe::model::Model::argmax (the largest logit, ties to the lower id)
//   temperature > 0 the uniform draw u = (mix64(seed ^ mix64(position)) >> 11) * 2^-53 in [0, 1) picks from
//                   the softmax of logits / temperature restricted to the top-p nucleus: tokens in the order
//                   (logit descending, token id ascending), weights w = exp((logit - max) / temperature) in
//                   double, the nucleus the shortest prefix of that order whose weight reaches top_p times
//                   the total (summed in token-id order; the whole vocabulary when no prefix does), and the
//                   token the first of the nucleus whose running weight exceeds u times the nucleus' weight.
// Every sum is taken in one fixed order, so equal logits bits give equal tokens on every machine (given the
// same libm exp(): glibc's is correctly rounded in practice; the lab's invariance is checked on one machine).
#pragma once

#include <cstdint>
#include <span>

namespace moe::sim::diverge {

struct Sampling {
  double temperature = 0.0;  // 0: greedy
  double top_p = 1.0;        // (0, 1]: the nucleus' share of the probability
  uint64_t seed = 0;         // the request's seed

  // Throws std::invalid_argument naming the field: temperature negative or not finite, top_p outside (0, 1].
  void validate() const;
};

// The uniform draw of (seed, position) in [0, 1): (mix64(seed ^ mix64(position)) >> 11) * 2^-53.
double sampling_draw(uint64_t seed, uint32_t position);

// The token for `position` from `logits` (one per token id) under `sampling`, by the rule above. Throws
// std::invalid_argument for an empty row, a NaN or +infinite logit (naming its token id), no finite logit at
// temperature > 0, or a bad `sampling`.
int32_t sample_token(std::span<const float> logits, const Sampling& sampling, uint32_t position);

}  // namespace moe::sim::diverge

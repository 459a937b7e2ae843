// A family's MoE layer against the float64 reference of its published block
// (tests/support/family_reference.h): the per-row relative error on a fixed batch, for the safetensors and
// the GGUF family tests alike.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "moe/layer/moe_layer.h"
#include "tests/support/family_reference.h"
#include "tests/support/layer_fixtures.h"

namespace moe::testing {

// Rows of 48 tokens of 6 requests (TokenHidden: a per-request direction, so routing is not uniform).
inline Batch FamilyTokens(int64_t d) {
  std::vector<TokenMeta> meta;
  for (uint32_t i = 0; i < 48; ++i) meta.push_back({i % 6, i / 6});
  return MakeBatch(meta, d);
}

// The layer against the family's float64 block: the worst per-row relative error (L2), near-tie tokens (whose
// top-k choice fp32 routing may legitimately resolve the other way) skipped and counted in `near_ties`.
inline double ErrorAgainstFamily(MoELayer& layer, const WrittenCheckpoint& w, const Batch& b,
                                 int* near_ties) {
  const int T = static_cast<int>(b.meta.size());
  const int64_t d = layer.hidden();
  std::vector<float> y(b.x.size());
  layer.forward(b.x.data(), T, b.meta, y.data());
  std::vector<bool> tie;
  const std::vector<double> ref = family_reference(w, b.x, T, &tie);
  double worst = 0.0;
  for (int t = 0; t < T; ++t) {
    if (tie[static_cast<size_t>(t)]) {
      ++*near_ties;
      continue;
    }
    double err = 0.0, norm = 0.0;
    for (int64_t i = 0; i < d; ++i) {
      const double diff = y[static_cast<size_t>(t * d + i)] - ref[static_cast<size_t>(t * d + i)];
      err += diff * diff;
      norm += ref[static_cast<size_t>(t * d + i)] * ref[static_cast<size_t>(t * d + i)];
    }
    worst = std::max(worst, std::sqrt(err / norm));
  }
  return worst;
}

}  // namespace moe::testing

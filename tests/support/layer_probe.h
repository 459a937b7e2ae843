// Probe-and-strangers experiments shared by the invariance tests of every layer backend: a probe request
// alone, then co-batched with random strangers in shuffled order; its rows compared bit for bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "tests/support/layer_fixtures.h"

namespace moe::testing {

// The rows of `probe` in y, in position order.
inline std::vector<float> ProbeRows(const Batch& b, const std::vector<float>& y, uint64_t probe,
                                    int64_t hidden) {
  std::vector<std::pair<uint32_t, size_t>> rows;
  for (size_t t = 0; t < b.meta.size(); ++t) {
    if (b.meta[t].request_id == probe) rows.push_back({b.meta[t].position, t});
  }
  std::sort(rows.begin(), rows.end());
  std::vector<float> out;
  for (auto [pos, t] : rows) out.insert(out.end(), y.begin() + t * hidden, y.begin() + (t + 1) * hidden);
  return out;
}

inline bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Any layer with MoELayer's forward(x, T, meta, y).
template <typename Layer>
std::vector<float> Forward(Layer& layer, const Batch& b) {
  std::vector<float> y(b.x.size());
  layer.forward(b.x.data(), static_cast<int>(b.meta.size()), b.meta, y.data());
  return y;
}

struct Mixes {
  int trials = 0;
  int changed = 0;
  int64_t probe_drops_alone = 0;
};

// A probe request alone, then co-batched with `trials` random stranger mixes in shuffled row order.
template <typename AloneLayer, typename BatchLayer>
Mixes CoBatch(AloneLayer& alone_layer, BatchLayer& batch_layer, int trials, uint64_t seed) {
  const int64_t hidden = alone_layer.hidden();
  std::mt19937_64 rng(seed);
  Mixes m;
  for (int trial = 0; trial < trials; ++trial) {
    const uint64_t probe = 1000 + rng() % 100;
    const int probe_len = 1 + static_cast<int>(rng() % 20);
    std::vector<TokenMeta> meta;
    for (int i = 0; i < probe_len; ++i) meta.push_back({probe, static_cast<uint32_t>(i)});
    const Batch alone = MakeBatch(meta, hidden);
    const std::vector<float> reference = Forward(alone_layer, alone);
    m.probe_drops_alone += alone_layer.last_plan().num_dropped;
    const int strangers = 1 + static_cast<int>(rng() % 10);
    for (int s = 0; s < strangers; ++s) {
      const uint64_t id = rng() % 900;  // never the probe's id
      const int len = 1 + static_cast<int>(rng() % 40);
      bool taken = false;
      for (const TokenMeta& t : meta) taken |= t.request_id == id;
      if (taken) continue;
      for (int i = 0; i < len; ++i) meta.push_back({id, static_cast<uint32_t>(i)});
    }
    std::shuffle(meta.begin(), meta.end(), rng);
    const Batch mixed = MakeBatch(meta, hidden);
    ++m.trials;
    if (!BitEqual(ProbeRows(mixed, Forward(batch_layer, mixed), probe, hidden), reference)) ++m.changed;
  }
  return m;
}

}  // namespace moe::testing

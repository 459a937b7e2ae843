// Global batches for the expert-parallel tests: the same batch on every rank (a pure function of a seed),
// split unevenly over the ranks (one rank may get no token), and the single-process reference.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "moe/parallel/expert_parallel_layer.h"
#include "tests/support/layer_fixtures.h"

namespace moe::testing {

// A global batch of several requests, rows shuffled (arrival order matters to greedy dispatch), and its
// split into per-rank row counts.
struct GlobalBatch {
  Batch batch;                   // all rows, in global (rank-major) order
  std::vector<int64_t> offsets;  // rank r holds rows [offsets[r], offsets[r+1])
};

// Uneven cuts of `num_rows` rows over `world_size` ranks; with two or more ranks, rank (which % world_size)
// gets no row. Returns world_size + 1 offsets.
inline std::vector<int64_t> SplitRows(int64_t num_rows, int world_size, uint64_t cut_seed, uint64_t which) {
  std::mt19937_64 rng(cut_seed);
  std::vector<int64_t> offsets(world_size + 1, 0), cuts;
  for (int r = 0; r + 1 < world_size; ++r) cuts.push_back(static_cast<int64_t>(rng() % (num_rows + 1)));
  std::sort(cuts.begin(), cuts.end());
  for (int r = 1; r < world_size; ++r) offsets[r] = cuts[r - 1];
  offsets[world_size] = num_rows;
  if (world_size >= 2) {
    const int empty = static_cast<int>(which % world_size);
    // The empty rank's rows go to its successor (the last rank's to its predecessor).
    if (empty + 1 < world_size) {
      offsets[empty + 1] = offsets[empty];
    } else {
      offsets[empty] = offsets[empty + 1];
    }
  }
  return offsets;
}

// `first_position` lets a second call continue the requests of a first one (causal state carried over).
inline GlobalBatch MakeGlobalBatch(uint64_t seed, int world_size, int64_t hidden, uint32_t first_position = 0,
                                   int max_requests = 8, int max_len = 20) {
  std::mt19937_64 rng(seed);
  std::vector<TokenMeta> meta;
  const int num_requests = 2 + static_cast<int>(rng() % (max_requests - 1));
  for (int r = 0; r < num_requests; ++r) {
    const uint64_t id = 100 + static_cast<uint64_t>(r) * 7 + seed % 5;
    const int len = 1 + static_cast<int>(rng() % max_len);
    for (int i = 0; i < len; ++i) meta.push_back({id, first_position + static_cast<uint32_t>(i)});
  }
  std::shuffle(meta.begin(), meta.end(), rng);
  GlobalBatch g{MakeBatch(meta, hidden),
                SplitRows(static_cast<int64_t>(meta.size()), world_size, rng(), seed)};
  return g;
}

inline int64_t LocalTokens(const GlobalBatch& g, int rank) {
  return g.offsets[rank + 1] - g.offsets[rank];
}

// Bitwise comparison of this rank's rows of y with rows [first, first + rows) of the reference.
inline bool SliceBitEqual(const std::vector<float>& y_local, const std::vector<float>& y_global,
                          int64_t first, int64_t rows, int64_t hidden) {
  if (rows == 0) return true;  // (memcmp of an empty vector's null data() is undefined)
  return static_cast<int64_t>(y_local.size()) >= rows * hidden &&
         std::memcmp(y_local.data(), y_global.data() + first * hidden,
                     static_cast<size_t>(rows * hidden) * sizeof(float)) == 0;
}

}  // namespace moe::testing

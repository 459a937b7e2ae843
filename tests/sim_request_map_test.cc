// RequestMap (sim/request_map.h) against std::unordered_map over random inserts, lookups and erases,
// including ids that share a home slot and long probe runs across the table's end.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <unordered_map>

#include "sim/request_map.h"

namespace moe::sim {
namespace {

TEST(SimRequestMap, MatchesUnorderedMap) {
  std::mt19937_64 rng(5);
  for (int universe : {8, 100, 5000}) {  // few ids: dense runs and many collisions; many ids: growth
    RequestMap<int64_t> map;
    std::unordered_map<uint64_t, int64_t> want;
    for (int op = 0; op < 200000; ++op) {
      const uint64_t id = rng() % universe * 0x9e3779b97f4a7c15ull;  // spread over the 64-bit range
      if (rng() % 3 == 0) {
        ASSERT_EQ(map.erase(id), want.erase(id) == 1) << "erase " << id;
      } else {
        const int64_t value = static_cast<int64_t>(rng() % 1000);
        const auto [ptr, inserted] = map.try_emplace(id, value);
        const auto [it, want_inserted] = want.try_emplace(id, value);
        ASSERT_EQ(inserted, want_inserted) << "insert " << id;
        ASSERT_EQ(*ptr, it->second) << "value of " << id;
        if (rng() % 2 == 0) *ptr = it->second = value + 1;  // writes through the pointer stick
      }
      ASSERT_EQ(map.size(), want.size());
    }
    for (const auto& [id, value] : want) {
      const auto [ptr, inserted] = map.try_emplace(id, -1);
      EXPECT_FALSE(inserted);
      EXPECT_EQ(*ptr, value);
    }
  }
}

}  // namespace
}  // namespace moe::sim

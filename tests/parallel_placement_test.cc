// Expert placement with redundant experts (moe/parallel/expert_placement.h) and DeepSeek's load balancer
// (moe/parallel/eplb.h): the policy's outputs equal the published algorithm's (tests/data/eplb_cases.txt: its
// README example and load vectors of our own, computed by the published eplb.py), its invariants, errors, and
// the replica rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "moe/parallel/eplb.h"
#include "moe/parallel/expert_placement.h"
#include "tests/support/expect_invalid.h"

namespace moe::parallel {
namespace {

using moe::testing::ExpectInvalid;

struct PublishedCase {
  std::string name;
  int replicas = 0, groups = 0, nodes = 0, gpus = 0;
  std::vector<float> load;
  std::vector<int> phy2log, logcnt, log2phy;  // log2phy: E x max_count, -1 padding
  int max_count = 0;
};

std::vector<PublishedCase> PublishedCases() {
  std::ifstream in(std::filesystem::path(MOE_SOURCE_DIR) / "tests" / "data" / "eplb_cases.txt");
  EXPECT_TRUE(in.good()) << "tests/data/eplb_cases.txt";
  std::vector<PublishedCase> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string key;
    s >> key;
    if (key == "case") {
      out.emplace_back();
      PublishedCase& c = out.back();
      s >> c.name >> c.replicas >> c.groups >> c.nodes >> c.gpus;
      continue;
    }
    PublishedCase& c = out.back();
    if (key == "load") {
      std::string v;
      while (s >> v) c.load.push_back(std::strtof(v.c_str(), nullptr));
    } else {
      std::vector<int>* to = key == "phy2log" ? &c.phy2log : key == "logcnt" ? &c.logcnt : &c.log2phy;
      if (key == "log2phy") s >> c.max_count;
      int v;
      while (s >> v) to->push_back(v);
    }
  }
  return out;
}

// The published log2phy layout (E x max_count, -1 padding) of a replication.
std::vector<int> PaddedLog2Phy(const ExpertReplication& r, int max_count) {
  std::vector<int> out;
  for (const std::vector<int>& slots : r.logical_to_physical) {
    for (int i = 0; i < max_count; ++i) out.push_back(i < static_cast<int>(slots.size()) ? slots[i] : -1);
  }
  return out;
}

TEST(Eplb, EqualsThePublishedAlgorithm) {
  const std::vector<PublishedCase> cases = PublishedCases();
  ASSERT_GE(cases.size(), 15u);
  EXPECT_EQ(cases[0].name, "readme_layer0");
  int hierarchical = 0;
  for (const PublishedCase& c : cases) {
    SCOPED_TRACE(c.name);
    const ExpertReplication r = eplb::rebalance(c.load, c.replicas, c.groups, c.nodes, c.gpus);
    EXPECT_EQ(r.physical_to_logical, c.phy2log);
    EXPECT_EQ(r.replica_count, c.logcnt);
    EXPECT_EQ(PaddedLog2Phy(r, c.max_count), c.log2phy);
    EXPECT_EQ(r.num_gpus, c.gpus);
    hierarchical += c.groups % c.nodes == 0 && c.nodes > 1;
  }
  EXPECT_GE(hierarchical, 5) << "both policies are covered";
}

// The README's picture, in words: 16 replicas on 8 GPUs of 2 nodes, 2 per GPU; groups {0-2, 3-5, 6-8, 9-11}
// two per node; the hottest experts (10, 5 and 1, 4 and 8 in layer 0) replicated.
TEST(Eplb, ReadmeExampleStructure) {
  const std::vector<float> load = {90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86};
  const ExpertReplication r = eplb::rebalance_hierarchical(load, 16, 4, 2, 8);
  EXPECT_EQ(r.physical_to_logical, (std::vector<int>{5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1}));
  EXPECT_EQ(r.slots_per_gpu(), 2);
  // A node's 8 slots hold only its two groups' experts.
  for (int node = 0; node < 2; ++node) {
    std::vector<int> groups;
    for (int s = node * 8; s < node * 8 + 8; ++s) groups.push_back(r.physical_to_logical[s] / 3);
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    EXPECT_EQ(groups.size(), 2u) << "node " << node;
  }
  const ExpertPlacement p = ExpertPlacement::from_replication(r);
  EXPECT_EQ(p.world_size(), 8);
  EXPECT_EQ(p.replicas(5), (std::vector<int>{0, 1}));  // slots 0 and 2: GPUs 0 and 1
  EXPECT_EQ(p.num_physical(), 16);
  EXPECT_TRUE(p.has_redundancy());
  EXPECT_EQ(p.experts_of(0), (std::vector<int>{5, 6}));
}

// What the policy promises, on random skewed loads: every GPU gets its share of slots, every expert at least
// one replica, the replicas go to the largest loads per replica, and the balance improves on one copy each.
TEST(Eplb, InvariantsOnSkewedLoads) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int E = 16 << (trial % 3), gpus = E > 16 && trial % 2 ? 8 : 4, nodes = trial % 4 == 0 ? 2 : 1;
    const int R = E + E / 4;  // 25 % redundant
    std::vector<float> load(E);
    for (int e = 0; e < E; ++e) load[e] = static_cast<float>(std::floor(10000.0 / (1 + e) + rng() % 50));
    std::shuffle(load.begin(), load.end(), rng);
    const ExpertReplication r = eplb::rebalance(load, R, 4, nodes, gpus);
    ASSERT_EQ(r.num_replicas(), R);
    std::vector<int> per_gpu(gpus, 0), count(E, 0);
    for (int s = 0; s < R; ++s) {
      ++per_gpu[r.gpu_of_slot(s)];
      ++count[r.physical_to_logical[s]];
    }
    EXPECT_EQ(per_gpu, std::vector<int>(gpus, R / gpus));
    EXPECT_EQ(count, r.replica_count);
    EXPECT_GE(*std::min_element(count.begin(), count.end()), 1);
    EXPECT_EQ(std::accumulate(count.begin(), count.end(), 0), R);
    const ExpertReplication none = eplb::rebalance(load, E, 4, nodes, gpus);
    EXPECT_EQ(none.replica_count, std::vector<int>(E, 1));
    const double with = eplb::imbalance(eplb::gpu_loads(load, r));
    const double without = eplb::imbalance(eplb::gpu_loads(load, none));
    EXPECT_LE(with, without + 1e-9) << "trial " << trial;
    EXPECT_GE(with, 1.0);
  }
}

TEST(Eplb, RejectsWhatThePolicyCannotDo) {
  const std::vector<float> load(12, 1.0f);
  ExpectInvalid([&] { eplb::rebalance_hierarchical(load, 16, 5, 1, 8); },
                "12 experts do not split into 5 equal groups");
  ExpectInvalid([&] { eplb::rebalance_hierarchical(load, 16, 4, 3, 6); },
                "4 groups do not split evenly over 3 nodes");
  ExpectInvalid([&] { eplb::rebalance_hierarchical(load, 16, 4, 2, 5); },
                "num_gpus (5) must be a multiple of num_nodes (2)");
  ExpectInvalid([&] { eplb::rebalance_global(load, 18, 4); },
                "num_replicas (18) must be a multiple of num_gpus (4)");
  ExpectInvalid([&] { eplb::rebalance_global(load, 8, 4); },
                "num_replicas (8) must be at least the 12 experts");
  ExpectInvalid([&] { eplb::rebalance_global(load, 16, 0); }, "num_gpus (0) must be >= 1");
  ExpectInvalid([&] { eplb::rebalance_global(std::vector<float>{}, 4, 4); }, "the load vector is empty");
  std::vector<float> bad = load;
  bad[3] = -1.0f;
  ExpectInvalid([&] { eplb::rebalance_global(bad, 16, 4); }, "the load of expert 3");
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  ExpectInvalid([&] { eplb::rebalance_global(bad, 16, 4); }, "must be finite");
  ExpectInvalid([&] { eplb::balanced_packing(load, 5); }, "12 items do not split evenly into 5 packs");
  ExpectInvalid([&] { eplb::gpu_loads(std::vector<float>(4, 1.0f), eplb::rebalance_global(load, 16, 4)); },
                "the load vector has 4 experts, the replication 12");
}

TEST(ExpertPlacementReplicas, FromReplicasAndTheRule) {
  // Expert 1 on ranks 0, 2 and 2 again (two shares on rank 2), expert 0 on rank 1.
  const ExpertPlacement p = ExpertPlacement::from_replicas({{1}, {0, 2, 2}, {3}}, 4);
  EXPECT_EQ(p.owners(), (std::vector<int>{1, 0, 3}));
  EXPECT_EQ(p.num_physical(), 5);
  EXPECT_EQ(p.experts_of(2), (std::vector<int>{1}));
  EXPECT_TRUE(p.holds(2, 1));
  EXPECT_FALSE(p.holds(1, 1));
  EXPECT_EQ(p.describe(), "rank 0: 1, rank 1: 0, rank 2: 1, rank 3: 2; replicas: 1 x3 (ranks 0, 2, 2)");
  // Home h's i-th kept pair at expert 1 goes to replica (h + i) mod 3.
  EXPECT_EQ(p.replica_rank(1, 0, 0), 0);
  EXPECT_EQ(p.replica_rank(1, 0, 1), 2);
  EXPECT_EQ(p.replica_rank(1, 1, 0), 2);
  EXPECT_EQ(p.replica_rank(1, 1, 2), 0);
  EXPECT_EQ(p.replica_rank(0, 3, 7), 1);
  // rows_per_rank equals counting pair by pair.
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int64_t> count(4 * 3);
    for (int64_t& c : count) c = static_cast<int64_t>(rng() % 9);
    std::vector<int64_t> want(4, 0);
    for (int h = 0; h < 4; ++h) {
      for (int e = 0; e < 3; ++e) {
        for (int64_t i = 0; i < count[h * 3 + e]; ++i) ++want[p.replica_rank(e, h, i)];
      }
    }
    EXPECT_EQ(p.rows_per_rank(count), want);
  }
  ExpectInvalid([&] { p.rows_per_rank(std::vector<int64_t>(5)); }, "rows_per_rank: 5 counts");
}

TEST(ExpertPlacementReplicas, HashAndErrors) {
  // Without redundancy the hash is the one-owner map's.
  EXPECT_EQ(ExpertPlacement::from_replicas({{0}, {0}, {1}}, 2).hash(),
            ExpertPlacement::from_map({0, 0, 1}, 2).hash());
  EXPECT_NE(ExpertPlacement::from_replicas({{0}, {0, 1}, {1}}, 2).hash(),
            ExpertPlacement::from_map({0, 0, 1}, 2).hash());
  EXPECT_NE(ExpertPlacement::from_replicas({{0}, {0, 1}, {1}}, 2).hash(),
            ExpertPlacement::from_replicas({{0}, {1, 0}, {1}}, 2).hash());
  ExpectInvalid([] { ExpertPlacement::from_replicas({{0}, {}}, 2); }, "expert 1 has no replica");
  ExpectInvalid(
      [] {
        ExpertPlacement::from_replicas({{0}, {1, 2}}, 2);
      },
      "expert 1 has a replica on rank 2, outside [0, 2)");
  ExpectInvalid([] { ExpertPlacement::from_replicas({}, 2); }, "empty");
  ExpertReplication r = eplb::rebalance_global(std::vector<float>{4, 1, 1, 1}, 6, 2);
  EXPECT_NO_THROW(ExpertPlacement::from_replication(r));
  r.logical_to_physical[0][0] = 5;
  ExpectInvalid([&] { ExpertPlacement::from_replication(r); }, "which does not hold it");
  r.num_gpus = 4;
  ExpectInvalid([&] { ExpertPlacement::from_replication(r); }, "6 slots do not split evenly over its 4 GPUs");
}

}  // namespace
}  // namespace moe::parallel

// moe/parallel/eplb.h: redundant experts from per-expert load estimates, by DeepSeek's expert-parallelism
// load balancer (EPLB, github.com/deepseek-ai/EPLB eplb.py; written anew from its description and code).
//
// Pure functions of one layer's load vector (loads[e] = the tokens, or pairs, expert e is expected to get;
// any non-negative finite values, e.g. a moving average of MoEStats::expert_load). They decide how many
// copies ("replicas", physical experts) each expert gets and on which GPU (rank) each copy lives:
//
//   rebalance_hierarchical  (the published policy for prefill, where the EP group is small): pack the
//                           expert groups (num_groups contiguous blocks of E / num_groups experts,
//                           DeepSeek-V3's group-limited routing) onto nodes with balanced group loads;
//                           replicate the hottest experts within each node (num_replicas / num_nodes physical
//                           experts per node); pack each node's physical experts onto its GPUs, num_replicas
//                           / num_gpus per GPU.
//   rebalance_global        (the published policy for decode, with a large EP group): the same with one group
//                           and one node: replicate over all experts, pack onto all GPUs.
//   rebalance               the published entry point: hierarchical when num_nodes divides num_groups, else
//                           global.
//
// The outputs equal the published eplb.rebalance_experts' (phy2log, log2phy, logcnt) for one layer, run on
// CPU: arithmetic in float32 as there (the loads are float32; sums and quotients rounded as there: exact for
// integer loads below 2^24), ties broken as there - torch's CPU sort (descending) is libstdc++'s std::sort on
// (value, index) pairs compared by value alone, which this code calls the same way; argmax and the emptiest
// pack take the first (lowest) index. Tested against the published code's outputs on its README example and
// on load vectors of our own (tests/data/eplb_cases.txt, tests/parallel_eplb_test.cc).
//
// Errors: std::invalid_argument naming the argument (E not a multiple of num_groups, num_groups not a
// multiple of num_nodes for the hierarchical policy, num_gpus not a multiple of num_nodes, num_replicas not a
// multiple of num_gpus or below E, a load that is negative or not finite, an empty load vector).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace moe::parallel {

// Which physical expert (slot) holds which logical expert, and where the slots live: slot p is on GPU (rank)
// p / slots_per_gpu(). The replicas of expert e are logical_to_physical[e] (by replica rank; size
// replica_count[e] >= 1). Slots of one GPU may hold the same expert twice (the published packing allows it).
struct ExpertReplication {
  int num_gpus = 1;
  std::vector<int> physical_to_logical;               // [num_replicas]: phy2log
  std::vector<int> replica_count;                     // [E]: logcnt
  std::vector<std::vector<int>> logical_to_physical;  // [E][replica_count[e]]: log2phy without its -1 padding

  int num_experts() const { return static_cast<int>(replica_count.size()); }
  int num_replicas() const { return static_cast<int>(physical_to_logical.size()); }
  int slots_per_gpu() const { return num_replicas() / num_gpus; }
  int gpu_of_slot(int slot) const { return slot / slots_per_gpu(); }
};

namespace eplb {

// The building blocks, as published (one row of their [layers, n] tensors).

// Packs n items into num_packs packs of exactly n / num_packs items each, heaviest first into the lightest
// pack that still has room. pack[i], rank_in_pack[i]: item i's pack and its place there. num_packs must
// divide n.
struct Packing {
  std::vector<int> pack;
  std::vector<int> rank_in_pack;
};
Packing balanced_packing(std::span<const float> weight, int num_packs);

// Grows num_log experts to num_physical >= num_log physical experts: each extra slot goes to the expert of
// the largest weight / replica_count. physical_to_logical[p] (slot p < num_log is expert p), replica_rank[p]
// (the copy's index among its expert's copies), replica_count[e].
struct Replicas {
  std::vector<int> physical_to_logical;
  std::vector<int> replica_rank;
  std::vector<int> replica_count;
};
Replicas replicate_experts(std::span<const float> weight, int num_physical);

// The policies (see the top of this file).
ExpertReplication rebalance_hierarchical(std::span<const float> load, int num_replicas, int num_groups,
                                         int num_nodes, int num_gpus);
ExpertReplication rebalance_global(std::span<const float> load, int num_replicas, int num_gpus);
ExpertReplication rebalance(std::span<const float> load, int num_replicas, int num_groups, int num_nodes,
                            int num_gpus);

// The load each GPU is expected to carry under `replication`: every expert's load split evenly over its
// replicas (the model the policy balances). Size num_gpus, in double.
std::vector<double> gpu_loads(std::span<const float> load, const ExpertReplication& replication);

// max / mean of `loads` (1 for equal loads; 0 when every load is 0). The balance figure of EPLB's README.
double imbalance(std::span<const double> loads);

}  // namespace eplb
}  // namespace moe::parallel

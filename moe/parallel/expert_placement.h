// moe/parallel/expert_placement.h: which ranks compute which routed expert, with redundant copies (replicas)
// of hot experts, and which copy computes each kept pair.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "moe/parallel/eplb.h"

namespace moe::parallel {

// A map expert -> the ranks that hold a copy of it (its replicas, >= 1, in replica order) over `world_size`
// ranks. A rank may hold no expert (then it only routes, combines and runs the shared expert for its own
// tokens), and may hold two replicas of one expert (EPLB's packing allows it: it then takes two shares).
// Immutable value type; hash() is what ranks compare at start-up.
//
// Which replica computes a kept pair (replica_rank): the pair's expert e, its token's home rank h (the rank
// whose rows hold the token) and its index i among the kept pairs at e of home h's tokens, in slot order
// (0, 1, ...): replica (h + i) mod R_e of replicas(e). A function of the plan alone (the plan gives every
// pair's expert and slot, the split gives every token's home), so every rank finds the same replica for a
// pair without exchanging anything; each home spreads its pairs at e round-robin over the replicas, starting
// at a different replica per home. With one replica per expert it is the owner.
class ExpertPlacement {
 public:
  // Contiguous blocks: rank r owns experts [E*r/size, E*(r+1)/size). Throws std::invalid_argument for
  // num_experts < 1 or world_size < 1.
  static ExpertPlacement contiguous(int num_experts, int world_size);
  // owner_of_expert[e] = the rank that computes expert e. Throws std::invalid_argument for an empty
  // map, world_size < 1, or an owner outside [0, world_size) (the message names the expert).
  static ExpertPlacement from_map(std::vector<int> owner_of_expert, int world_size);
  // ranks_of_expert[e] = the ranks holding expert e's replicas, in replica order (at least one each). Throws
  // std::invalid_argument for an empty map, world_size < 1, an expert without a replica, or a rank outside
  // [0, world_size) (naming the expert).
  static ExpertPlacement from_replicas(std::vector<std::vector<int>> ranks_of_expert, int world_size);
  // An EPLB replication (moe/parallel/eplb.h): expert e's replicas are the GPUs of its slots
  // logical_to_physical[e], world_size = replication.num_gpus. Throws std::invalid_argument for a malformed
  // replication (a slot outside the slots, a replica count that does not match).
  static ExpertPlacement from_replication(const ExpertReplication& replication);

  int num_experts() const { return static_cast<int>(replicas_.size()); }
  int world_size() const { return world_size_; }
  // The first replica's rank (the only one without redundancy).
  int owner(int expert) const { return replicas_[expert][0]; }
  // owner(e) for every expert.
  std::vector<int> owners() const;
  const std::vector<int>& replicas(int expert) const { return replicas_[expert]; }
  int num_replicas(int expert) const { return static_cast<int>(replicas_[expert].size()); }
  // Replicas over all experts (num_experts() without redundancy).
  int num_physical() const;
  bool has_redundancy() const { return num_physical() != num_experts(); }
  // Whether `rank` holds a replica of `expert`.
  bool holds(int rank, int expert) const;
  // The experts `rank` holds a replica of, ascending, each once.
  std::vector<int> experts_of(int rank) const;
  // The rank computing the kept pair at `expert` of a token of home rank `home` that is the `index`-th such
  // pair (from 0) in slot order: replicas(expert)[(home + index) mod num_replicas(expert)] (see above).
  int replica_rank(int expert, int home, int64_t index) const {
    const std::vector<int>& r = replicas_[expert];
    return r.size() == 1 ? r[0] : r[static_cast<size_t>((home + index) % static_cast<int64_t>(r.size()))];
  }
  // The rows each rank computes when home h sends count[h * E + e] kept pairs to expert e (h < world_size,
  // under replica_rank's rule): the per-rank load of a placement. Size world_size.
  std::vector<int64_t> rows_per_rank(std::span<const int64_t> count) const;
  // A 64-bit hash of (world_size, every expert's replicas): equal placements hash equal on every machine. A
  // placement without redundancy hashes as the one-owner maps always did.
  uint64_t hash() const;
  // "rank 0: 0-3, rank 1: 4-7" style summary (ranges where contiguous); with redundancy, the replicated
  // experts follow: "; replicas: 5 x2 (ranks 0, 3), ...".
  std::string describe() const;

 private:
  ExpertPlacement(std::vector<std::vector<int>> replicas, int world_size)
      : replicas_(std::move(replicas)), world_size_(world_size) {}
  std::vector<std::vector<int>> replicas_;
  int world_size_ = 1;
};

}  // namespace moe::parallel

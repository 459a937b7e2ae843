// moe/parallel/expert_placement.h: which rank computes which routed expert.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe::parallel {

// A map expert -> owning rank over `world_size` ranks. Every expert has exactly one owner; a rank may
// own none (then it only routes, combines and runs the shared expert for its own tokens).
// Immutable value type; hash() is what ranks compare at start-up.
class ExpertPlacement {
 public:
  // Contiguous blocks: rank r owns experts [E*r/size, E*(r+1)/size). Throws std::invalid_argument for
  // num_experts < 1 or world_size < 1.
  static ExpertPlacement contiguous(int num_experts, int world_size);
  // owner_of_expert[e] = the rank that computes expert e. Throws std::invalid_argument for an empty
  // map, world_size < 1, or an owner outside [0, world_size) (the message names the expert).
  static ExpertPlacement from_map(std::vector<int> owner_of_expert, int world_size);

  int num_experts() const { return static_cast<int>(owner_.size()); }
  int world_size() const { return world_size_; }
  int owner(int expert) const { return owner_[expert]; }
  const std::vector<int>& owners() const { return owner_; }
  // The experts `rank` owns, ascending.
  std::vector<int> experts_of(int rank) const;
  // A 64-bit hash of (world_size, owners): equal placements hash equal on every machine.
  uint64_t hash() const;
  // "rank 0: 0-3, rank 1: 4-7" style summary (ranges where contiguous).
  std::string describe() const;

 private:
  ExpertPlacement(std::vector<int> owner, int world_size)
      : owner_(std::move(owner)), world_size_(world_size) {}
  std::vector<int> owner_;
  int world_size_ = 1;
};

}  // namespace moe::parallel
